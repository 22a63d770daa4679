// Package interop is goroce's interop matrix: every roced tool command
// run against the real program it stands in for (rdma-core's ibv_*_pingpong,
// perftest's ib_*), in both directions, over several message sizes, with
// the verdict taken from the exit statuses and the tools' own checks.
//
// The matrix is data (Tools, Matrix): a Scenario is a tool, a transport, a
// message size and extra flags; a Case is a scenario with a Direction
// (roced serving the peer's client, or the peer serving roced's client).
// A Peer says where each side runs (a Runner: this host, the lab's network
// namespace, the lab's guest, ssh, or a person at a terminal) and how its
// command line differs (device, GID index, address). Run runs the cases
// one by one and Judge decides each.
//
// The command interop/cmd/interop runs it; interop/interop-lab.sh
// runs it against both lab guests, as make test does. See README.md.
package interop
