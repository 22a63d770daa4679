// Package dcqcn is DCQCN congestion control (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015) as mlx5 HCAs
// run it, for goroce's queue pairs: the reaction point (RP), the rate
// limiter of a sender, which cuts its rate on each congestion
// notification packet (CNP) by a factor alpha estimates and raises it
// again in fast recovery, additive and hyper increase; and the
// notification point (NP), the receiver's CNP pacing, at most one CNP
// per QP per np_min_time_between_cnps.
//
// Both are plain state machines driven by the times their caller passes
// (the QP's clock, or a simulation's), so tests decide what time it is.
// Params carries the parameters under mlx5's names and defaults. The
// engine's side (ECT marks, CNPs built and received, the pacing of a QP's
// requests) is in package qp (congestion.go); docs/congestion.md tells
// the whole story.
package dcqcn
