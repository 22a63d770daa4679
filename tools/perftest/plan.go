package perftest

// StepKind is one kind of message exchange in a perftest run.
type StepKind int

const (
	StepVersion   StepKind = iota // 16 bytes
	StepSysData                   // 2 x 4 bytes
	StepMTU                       // 2 bytes
	StepNegotiate                 // 320 bytes, perftest >= 6.28 pairs
	StepRecord                    // one ctx_hand_shake: 108 (or 59) bytes
	StepTraffic                   // the RDMA traffic (no TCP bytes)
	StepBWReport                  // 5 x 8 bytes
	StepClose                     // 6.06's "done\0" if any, then close
	StepCMConnect                 // -R: the QPs connect through the RDMA CM
)

var stepNames = [...]string{"version", "sys_data", "mtu", "negotiate", "record", "traffic", "bw_report", "close", "cm_connect"}

// String returns the step's name ("negotiate", "traffic").
func (k StepKind) String() string { return stepNames[k] }

// Step is one entry of a Plan.
type Step struct {
	Kind StepKind // which exchange
	// QP is the QP whose record a StepRecord carries (0 for the
	// synchronisation handshakes, which reuse the first QP's record).
	QP int
	// Size is the message size of a StepTraffic (it changes per step with
	// -a).
	Size uint64
	// Passive marks a StepTraffic where this side only serves the peer's
	// operations (the write/read/atomic servers): its next step blocks
	// until the peer is done.
	Passive bool
	// Zero marks the two StepRecord around StepCMConnect: they carry
	// my_dest[0] before set_up_connection filled it, all zeros.
	Zero bool
}

// Shape is what decides the sequence of exchanges of a run.
type Shape struct {
	Test     Test   // the program
	Role     Role   // server or client
	NumQPs   int    // -q (bandwidth tests only)
	Method   int32  // RunRegular, RunAll (-a) or RunInfinitely (--run_infinitely)
	TestType int32  // Iterations or Duration (-D)
	Duplex   bool   // -b
	WriteImm bool   // --write_with_imm (write tests)
	Conn     int32  // ConnRC, ConnUC, ConnUD
	MTU      MTU    // the negotiated MTU; bounds -a for UD send tests
	Size     uint64 // -s, the message size
	RDMACM   bool   // -R: QPs connected through the RDMA CM
}

// Plan lists every exchange a real tool of version local makes with a peer
// of version peer for the given run, in order, as the test programs'
// main() do it (perftest 6.06 to 6.29, sockets, no RDMA CM). The rules:
//
//   - version, sys_data, mtu, then negotiate when Negotiates(local, peer);
//   - write_bw, read_bw, atomic_bw: each QP's record twice (before and after
//     moving to RTR) and one more handshake, so 2q+1 records; send_bw adds
//     one after posting receives: 2q+2; the latency tests 4;
//   - after the traffic the bandwidth tests of the one-sided verbs exchange
//     one record and the bandwidth report (the server prints the client's
//     figures), then the closing record; send_bw, read_lat, send_lat and
//     atomic_lat only the closing record; write_lat nothing;
//   - read_lat and atomic_lat servers take no part in the traffic: they go
//     straight to the closing record;
//   - -a repeats the traffic per size (2..2^23, UD sends up to the MTU) with
//     the per-size handshakes of each program; -b adds a handshake before
//     the traffic and the report exchange after it;
//   - 6.06 sides write "done" when they close (over TCP only);
//   - with -R (create_rdma_cm_connection, called before set_up_connection)
//     a handshake of the still zeroed my_dest[0], the RDMA CM connection of
//     every QP, and another zeroed handshake come first; the records that
//     follow are the usual ones, the QPN and PSN in them unused.
func Plan(s Shape, local, peer Version) []Step {
	q := max(s.NumQPs, 1)
	steps := []Step{{Kind: StepVersion}, {Kind: StepSysData}, {Kind: StepMTU}}
	if Negotiates(local, peer) {
		steps = append(steps, Step{Kind: StepNegotiate})
	}
	if s.RDMACM {
		steps = append(steps, Step{Kind: StepRecord, Zero: true}, Step{Kind: StepCMConnect}, Step{Kind: StepRecord, Zero: true})
	}
	rec := func(n int) {
		for i := 0; i < n; i++ {
			qp := 0
			if n == q {
				qp = i
			}
			steps = append(steps, Step{Kind: StepRecord, QP: qp})
		}
	}
	if s.Test == SendBW || s.Test == SendLat {
		rec(q)
		rec(1)
		rec(q)
	} else {
		if !s.Test.BW() {
			rec(1)
		}
		rec(q)
		rec(q)
		rec(1)
	}
	traffic := func(size uint64) { steps = append(steps, Step{Kind: StepTraffic, Size: size}) }
	report := func() { steps = append(steps, Step{Kind: StepBWReport}) }
	sizes := []uint64{s.Size}
	infinite := s.Method == RunInfinitely
	if s.Method == RunAll {
		sizes = sizes[:0]
		top := 23
		if s.Conn == ConnUD && (s.Test == SendBW || s.Test == SendLat) && s.MTU > 0 {
			top = int(s.MTU) + 7 // log2 of the MTU in bytes
		}
		for i := 1; i <= top; i++ {
			sizes = append(sizes, 1<<i)
		}
	}
	done := func() []Step { return append(steps, Step{Kind: StepClose}) }

	switch s.Test {
	case WriteBW, ReadBW, AtomicBW:
		write := s.Test == WriteBW
		if s.Role == Server && !s.Duplex && (!write || !s.WriteImm) {
			// "For half duplex tests, server just waits for client to exit."
			steps = append(steps, Step{Kind: StepTraffic, Size: s.Size, Passive: true})
			rec(1)
			report()
			rec(1)
			return done()
		}
		if s.Test == AtomicBW && s.Method == RunAll {
			sizes = []uint64{s.Size} // atomic_bw runs -a as a single pass
		}
		pre := s.Duplex || (write && s.WriteImm)
		switch {
		case infinite:
			if write && s.WriteImm {
				rec(1)
			}
			traffic(s.Size)
			return steps
		case s.Method == RunAll && s.Test != AtomicBW:
			for _, size := range sizes {
				if pre {
					rec(1)
				}
				traffic(size)
				if pre {
					rec(1)
				}
				if s.Duplex && !(write && s.WriteImm && s.TestType == Duration) {
					report()
				}
			}
		default:
			if pre {
				rec(1)
			}
			traffic(s.Size)
			if s.Duplex && !(write && s.WriteImm && s.TestType == Duration) {
				report()
			}
		}
		if s.Role == Client && !s.Duplex && (!write || !s.WriteImm) {
			rec(1)
			report()
		}
		rec(1)
		return done()

	case SendBW:
		switch {
		case infinite:
			rec(1)
			traffic(s.Size)
			return steps
		case s.Method == RunAll:
			for _, size := range sizes {
				rec(1)
				traffic(size)
				if s.Duplex && s.TestType != Duration {
					report()
				}
				rec(1)
			}
		default:
			rec(1)
			traffic(s.Size)
			if s.Duplex && s.TestType != Duration {
				report()
			}
		}
		rec(1)
		return done()

	case WriteLat:
		for _, size := range sizes {
			if s.WriteImm {
				rec(1)
			}
			traffic(size)
		}
		return steps

	case ReadLat, AtomicLat:
		if s.Role == Server {
			steps = append(steps, Step{Kind: StepTraffic, Size: s.Size, Passive: true})
		} else {
			if s.Test == AtomicLat {
				sizes = []uint64{s.Size}
			}
			for _, size := range sizes {
				traffic(size)
			}
		}
		rec(1)
		return done()

	default: // SendLat
		for _, size := range sizes {
			rec(1)
			traffic(size)
		}
		rec(1)
		return done()
	}
}

// RecordCounts counts the records exchanged before and after the (first)
// traffic step, the figures the lab README lists per tool.
func RecordCounts(steps []Step) (before, after int) {
	seen := false
	for _, st := range steps {
		switch st.Kind {
		case StepTraffic:
			seen = true
		case StepRecord:
			if seen {
				after++
			} else {
				before++
			}
		}
	}
	return before, after
}
