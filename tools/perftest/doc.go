// Package perftest is perftest's ib_write_bw, ib_write_lat, ib_read_bw,
// ib_read_lat, ib_send_bw, ib_send_lat, ib_atomic_bw and ib_atomic_lat on
// goroce: their TCP exchange (port 18515), their flags and their report
// output, for the versions the lab offers: 6.06 (Debian bookworm), 6.24
// (Debian trixie) and the 6.28/6.29 negotiate_params step of upstream
// perftest; and, in Main, the whole tool (QPs, traffic loops and
// measurements on goroce's engine, as `roced write_bw` and the others run
// it).
//
// The exchange is a series of fixed-size messages that both sides send
// (ctx_xchg_data): the client writes then reads, the server reads then
// writes. Plan lists them for a given run and versions; a Session performs
// each one:
//
//	s, _ := perftest.Dial(ctx, host, port, perftest.DefaultClientVersion)
//	s.ExchangeVersions(ctx)          // 16 bytes
//	s.ExchangeSysData(ctx, ...)      // 2 x 4 bytes
//	s.ExchangeMTU(ctx, mtu)          // 2 bytes
//	s.Negotiate(ctx, params, reads)  // 320 bytes, only for >= 6.28 pairs
//	s.ExchangeRecord(ctx, rec)       // 108 bytes, 2q+1 to 4 times
//	... RDMA traffic ...
//	s.ExchangeBWReport(ctx, rep)     // 5 x 8 bytes (one-sided _bw tests)
//	s.ExchangeRecord(ctx, rec)       // closing handshake
//	s.Close(ctx, linger)             // 6.06's "done", then close
//
// Version claims: a server reads the client's version before it answers,
// so roced's server answers with the newest implemented dialect not newer
// than the client's (ServerClaim): the real client then talks to a peer of
// its own kind and roced sends exactly what a real server of that version
// would. A client must speak first, so roced's client claims 6.29
// (DefaultClientVersion): 6.29 and later servers then negotiate and catch a
// mismatched command line as the real tools do, 6.28 servers negotiate
// whatever the claim, and older servers have no version gate above 5.70.
package perftest
