// Package transport is goroce's RDMA engine: the verbs objects a program
// uses (Device, PD, MR, MW, CQ, QP, SRQ, AH, XRCD) and the InfiniBand
// transport protocol of IBA vol 1 chapter 9 that carries out their work
// requests over RoCEv2. It is one package, as Linux rxe keeps its verbs
// objects and its engine in one directory, so that every step of a
// packet's path is a plain call a reader and a tool can follow.
//
// A Device opened over a link (package nic) owns the verbs objects,
// receives packets and dispatches them by destination QP number, runs the
// QPs' deferred work and timers, and reports its asynchronous events
// (Events) and protocol counters (Counters, Stats). A QP is connected by
// exchanging endpoints: LocalEndpoint gives what to send the peer,
// Connect takes the peer's and brings the QP to RTS (see Example and the
// examples after it, which run as tests).
//
// Where each part lives:
//
//   - device.go, connect.go, qptable.go, gsi.go (QP1, the MADs of the
//     connection manager), device_xrc.go, events.go, counters.go, stats.go,
//     deaths.go, share.go: the device (ibv_context) and its receive path.
//   - qp.go, types.go, modify.go and statemachine.go (IBA 10.3's Modify QP
//     state machine), post.go and wr.go (work requests), recvring.go,
//     srq.go, ah.go, xrc.go (annex A14), death.go (why a QP entered ERR):
//     the queue pair.
//   - requester.go (IBA 9.7.4.1, 9.7.5.1; rxe_req.c) turns send WQEs into
//     request packets; tx.go hands them to the link.
//   - responder.go (IBA 9.7.5.1, 9.7.5.2; rxe_resp.c) executes incoming RC
//     requests and produces ACKs, NAKs and read responses;
//     responder_ucud.go is the unreliable responders.
//   - completer.go (IBA 9.7.5.1, 9.9; rxe_comp.c) matches ACKs and
//     responses to outstanding work requests, retransmits, and reports
//     completions; complete.go retires WQEs to the CQs and holds the error
//     state.
//   - cq.go: completion queues (ibv_cq).
//   - mr.go, mw.go, fastreg.go, access.go: protection domains, memory
//     regions and windows, and the key checks every access goes through
//     (IBA 10.6, 10.2.3); mapping.go and cache.go: memory outside the Go
//     heap and a registration cache.
//
// Memory: a region is any memory the program can hold as a []byte: a Go
// slice, or memory outside the Go heap that a Mapping maps (MapAnonymous,
// MapHugePages, MapFile). Every region is pageable, as an HCA's
// on-demand-paging (ODP) region is: the engine reads and writes it through
// the process's virtual memory like any other code, so the kernel may page
// it out, and a page not touched yet (or paged out) is faulted in when the
// engine first touches it, on the engine's goroutine, delaying that packet;
// a fault is never an error. Nothing is locked in memory (mlock) unless
// the program asks (MapOptions.Lock). What registering guarantees instead
// of pinning is that the memory stays alive and unmoved while registered:
// Go's garbage collector does not move heap objects, the region holds its
// slice, and a Mapping refuses to unmap while a region over it is
// registered.
package transport
