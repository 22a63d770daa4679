package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"
)

// BenchmarkMessageRate measures the 64 B SEND message rate over the
// in-memory link in ib_send_bw's shape: the client and the server are two
// goroutines, each with its own device, as perftest's are two processes.
// The client keeps txDepth SENDs in flight and polls its send CQ; the
// server reposts each receive as it polls its completion, with rxDepth
// posted (ib_send_bw's defaults: 128 and 512). BenchmarkEngine, by
// contrast, posts the receives and polls both CQs from one goroutine.
//
// poll puts both devices in poll mode (transport.Options.PollProgress):
// perftest busy-polls its CQs, and a poll on a device in poll mode
// receives and handles what has arrived on the polling goroutine, so each
// side's work runs on its own goroutine. wait leaves it to the devices'
// receive goroutines, the polls sleeping when their CQ is empty.
//
// Every completion is checked (status, and the server's byte count).
// acks/msg and rnr/msg say how many acknowledgements and RNR NAKs the
// server sent per message.
//
//	go test -run '^$' -bench MessageRate -benchtime 3000000x ./transport
func BenchmarkMessageRate(b *testing.B) {
	for _, m := range []struct {
		name string
		poll bool
	}{{"poll", true}, {"wait", false}} {
		b.Run(m.name, func(b *testing.B) { benchMessageRate(b, m.poll) })
	}
}

func benchMessageRate(b *testing.B, poll bool) {
	const size, txDepth, rxDepth = 64, 128, 512
	c, s, _ := testharness.MemPair(b, testharness.Options{MTU: transport.MTU4096, BufSize: rxDepth * size,
		SQDepth: txDepth, RQDepth: rxDepth, CQDepth: 2 * rxDepth, Window: 512, PollProgress: poll})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The server's receives: one slot of its buffer each, named by WRID.
	var rsgl [1]transport.SGE
	rwr := transport.RecvWR{SGL: rsgl[:]}
	repost := func(slot uint64) error {
		rsgl[0] = s.MR.SGE(int(slot)*size, size)
		rwr.WRID = slot
		return s.QP.PostRecv(&rwr)
	}
	for i := range uint64(rxDepth) {
		testharness.Must(b, repost(i))
	}
	server := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() {
		wc := make([]transport.WC, 64)
		for got := 0; got < b.N; {
			n, err := s.RCQ.PollWait(ctx, wc)
			if err != nil {
				server <- err
				return
			}
			for _, w := range wc[:n] {
				if w.Status != transport.Success || w.ByteLen != size {
					server <- &completionError{w}
					return
				}
				if err := repost(w.WRID); err != nil {
					server <- err
					return
				}
			}
			got += n
		}
		server <- nil
	}()

	var ssgl [1]transport.SGE
	swr := transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: ssgl[:]}
	wc := make([]transport.WC, 64)
	inflight, posted, done := 0, 0, 0
	for done < b.N {
		for ; inflight < txDepth && posted < b.N; posted++ {
			ssgl[0] = c.MR.SGE(posted%txDepth*size, size)
			testharness.Must(b, c.QP.PostSend(&swr))
			inflight++
		}
		n, err := c.SCQ.PollWait(ctx, wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range wc[:n] {
			if w.Status != transport.Success {
				b.Fatal(&completionError{w})
			}
		}
		done += n
		inflight -= n
	}
	if err := <-server; err != nil {
		b.Fatal(err)
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	ctr := s.Dev.Counters()
	b.ReportMetric(float64(b.N)/el/1e6, "Mpps")
	b.ReportMetric(float64(ctr.SentACKs.Load())/float64(b.N), "acks/msg")
	b.ReportMetric(float64(ctr.SendRNRErr.Load())/float64(b.N), "rnr/msg")
}

// completionError is a completion that should have succeeded.
type completionError struct{ wc transport.WC }

func (e *completionError) Error() string { return "completion " + e.wc.Status.String() }
