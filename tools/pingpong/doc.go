// Package pingpong is rdma-core's example programs ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong on goroce: their
// command-line flags, their TCP exchange of queue pair addresses, their
// output lines and, in Main, the whole program (QP setup and send/receive
// loop on goroce's engine, as `roced rc_pingpong` and the others run it), so
// that roced can stand in for either end.
//
// How the real tools behave on the TCP side (rdma-core 44 and 56 alike, read
// from libibverbs/examples/*_pingpong.c and the lab's captures):
//
//   - The side started without a host operand is the server. It binds the
//     port (-p, default 18515) on the wildcard address with SO_REUSEADDR,
//     listens with a backlog of 1, accepts exactly one connection and closes
//     the listening socket: a second client is refused.
//   - The client resolves the host and tries each address once. It does not
//     retry: started before the server listens, it fails at once with
//     "Couldn't connect to HOST:PORT".
//   - Each side sends fixed 52-byte records (see Dest). The client writes its
//     record(s) first. The server reads them, moves its QP(s) to RTR and RTS
//     (pp_connect_ctx) and only then answers with its own, so the client
//     never sends before the server is ready to receive. The client then
//     writes "done\0" and both close; the verbs traffic starts after that.
//   - rc, uc and ud send one record each way. srq sends 256 records each way
//     (its MAX_QP), whatever -q says: the first -q describe its QPs, the
//     rest are all-zero. Both sides read them with a loop; the server reads
//     "done" with a single read().
//   - The rc/uc/ud server reads the client's record with one read() that must
//     return all 52 bytes, and the client reads the server's the same way, so
//     a record must be written with one write (this package does).
//   - ud uses the same record; its QPN is the UD QP and the Q_Key is the
//     fixed 0x11111111. Its PSN only seeds the send queue.
package pingpong
