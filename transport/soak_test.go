package transport_test

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

var soakMiB = flag.Int("soak-mib", 256, "MiB moved by each operation of the soak test")

// TestSoak moves 256 MiB with each of SEND, WRITE and READ across a path
// that loses 5%, reorders 5%, duplicates 1% and corrupts 0.1% of the
// packets in both directions, and checks every byte and every completion.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test: run without -short")
	}
	before := runtime.NumGoroutine()
	faults := mem.Faults{Loss: 0.05, Reorder: 0.05, Duplicate: 0.01, Corrupt: 0.001}
	const (
		msgMax   = 1 << 20
		inFlight = 4
	)
	// The three operations run side by side, each on its own pair: most
	// of a soak's time is its requester waiting out local ACK timeouts
	// (about 1,200 of 16.7 ms each), which they overlap. The group returns
	// when all three have, for the goroutine check below.
	t.Run("ops", func(t *testing.T) {
		for _, op := range []transport.WROpcode{transport.WRSend, transport.WRRDMAWrite, transport.WRRDMARead} {
			t.Run(op.String(), func(t *testing.T) {
				t.Parallel()
				ring := newTraceRing(400)
				defer func() {
					if t.Failed() {
						t.Logf("last packets:\n%s", ring)
					}
				}()
				a, b, net := testharness.MemPair(t, testharness.Options{MTU: transport.MTU4096, BufSize: 2 * inFlight * msgMax, Timeout: 12,
					Window: 64, Seed: uint64(op) + 42, PSN: 0xfff000, PSNB: 0xffff00, Trace: ring.hook})
				net.SetFaults(a.Addr, b.Addr, faults)
				net.SetFaults(b.Addr, a.Addr, faults)
				rng := rand.New(rand.NewPCG(7, uint64(op)))
				total := int64(*soakMiB) << 20
				start := time.Now()
				var moved int64
				var msgs, round int
				type slot struct {
					n    int
					seed byte
					src  int // READ: where in b's source area
				}
				slots := make([]slot, inFlight)
				if op == transport.WRRDMARead {
					// READ sources are written once: a duplicate READ can be
					// replayed after the requester completed it (its late
					// request reaches the responder after the responses it
					// asked for again), and b may not rewrite what such a
					// replay reads. Each message reads a different stretch.
					noise(b.Buf[:inFlight*msgMax])
				}
				for moved < total {
					// Post up to inFlight messages, each in its own region.
					k := 0
					for ; k < inFlight && moved < total; k++ {
						n := 1 + rng.IntN(msgMax)
						if int64(n) > total-moved {
							n = int(total - moved)
						}
						seed := byte(round*inFlight + k)
						src, dst := k*msgMax, inFlight*msgMax+k*msgMax
						if op == transport.WRRDMARead {
							src = rng.IntN(inFlight*msgMax - n + 1)
						}
						slots[k] = slot{n, seed, src}
						wr := transport.SendWR{WRID: uint64(k), Opcode: op, Flags: transport.Signaled}
						switch op {
						case transport.WRRDMARead: // a reads from b's source area into its destination area
							clear(a.Buf[dst : dst+n])
							wr.SGL = []transport.SGE{a.MR.SGE(dst, n)}
							wr.RemoteAddr, wr.RKey = b.MR.Addr()+uint64(src), b.MR.RKey()
						case transport.WRRDMAWrite:
							fill(a.Buf[src:src+n], seed)
							wr.SGL = []transport.SGE{a.MR.SGE(src, n)}
							wr.RemoteAddr, wr.RKey = b.MR.Addr()+uint64(dst), b.MR.RKey()
						default:
							fill(a.Buf[src:src+n], seed)
							testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(k), SGL: []transport.SGE{b.MR.SGE(dst, msgMax)}}))
							wr.SGL = []transport.SGE{a.MR.SGE(src, n)}
						}
						testharness.Must(t, a.QP.PostSend(&wr))
						moved += int64(n)
					}
					// Every message completes, in order, and its bytes are right.
					for i := range k {
						wc := testharness.Wait(t, a.SCQ, 60*time.Second)
						if wc.Status != transport.Success || wc.WRID != uint64(i) {
							t.Fatalf("round %d message %d: %+v\nA %v\nB %v", round, i, wc, a.Dev.Counters().List(), b.Dev.Counters().List())
						}
						if op == transport.WRSend {
							rc := testharness.Wait(t, b.RCQ, 60*time.Second)
							if rc.Status != transport.Success || rc.WRID != uint64(i) || rc.ByteLen != uint32(slots[i].n) {
								t.Fatalf("round %d receive %d: %+v", round, i, rc)
							}
						}
						n, dst := slots[i].n, inFlight*msgMax+i*msgMax
						want := make([]byte, n)
						fill(want, slots[i].seed)
						got := b.Buf[dst : dst+n]
						if op == transport.WRRDMARead {
							got, want = a.Buf[dst:dst+n], b.Buf[slots[i].src:slots[i].src+n]
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("round %d message %d (%d bytes): data differs", round, i, n)
						}
						msgs++
					}
					round++
				}
				if a.SCQ.Len()+b.RCQ.Len()+a.RCQ.Len()+b.SCQ.Len() != 0 {
					t.Fatal("completions left over")
				}
				el := time.Since(start)
				ca, cb := a.Dev.Counters(), b.Dev.Counters()
				la, _, _, _ := a.Mem.Injected()
				lb, _, _, _ := b.Mem.Injected()
				t.Logf("%v: %d MiB in %d messages, %.1fs (%.1f MB/s); lost %d+%d, icrc_err %d+%d, retransmitted %d+%d, timeouts %d+%d, seq NAKs %d",
					op, total>>20, msgs, el.Seconds(), float64(total)/el.Seconds()/1e6, la, lb,
					ca.ICRCErr.Load(), cb.ICRCErr.Load(), ca.RetransmittedPkts.Load(), cb.RetransmittedPkts.Load(),
					ca.Timeouts.Load(), cb.Timeouts.Load(), ca.RcvdSeqErr.Load())
				if ca.ICRCErr.Load()+cb.ICRCErr.Load() == 0 {
					t.Error("no corrupted packet was caught: the fault injection did not run")
				}
			})
		}
	})
	// No goroutine left behind once the devices are closed.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

var _ = fmt.Sprint

// noise fills b with bytes that do not repeat within it (xorshift), so a
// READ of the wrong stretch cannot match.
func noise(b []byte) {
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 32)
	}
}
