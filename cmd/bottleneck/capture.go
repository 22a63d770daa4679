package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/dcqcn/sim"
	"github.com/goroce/goroce/nic/impair"
)

// captureRun is bottleneck's -in/-out mode: a real bottleneck, read from
// its captures.
type captureRun struct {
	in, out, svg      string
	rate, line        float64
	kmin, kmax, limit int
	sample, settle    time.Duration
	rateSet           bool
	extra             int
}

func (c captureRun) check() error {
	switch {
	case c.in == "" || c.out == "":
		return errors.New("-in and -out go together: the captures where the packets enter the bottleneck and where they leave")
	case c.svg == "":
		return errors.New("-svg FILE is required")
	case !c.rateSet || c.rate <= 0:
		return errors.New("-rate MBPS, the bottleneck's rate, is required with -in")
	case c.sample <= 0 || c.settle < 0:
		return fmt.Errorf("-sample %v, -settle %v: want a positive period and a settling time of 0 or more", c.sample, c.settle)
	case c.kmin < 0 || c.kmax < c.kmin || c.limit < 0:
		return fmt.Errorf("-kmin %d -kmax %d -limit %d: want 0 <= kmin <= kmax, limit >= 0", c.kmin, c.kmax, c.limit)
	case c.extra > 0:
		return errors.New("no arguments are taken besides the flags")
	}
	return nil
}

func (c captureRun) run(stdout, stderr io.Writer) int {
	if err := c.check(); err != nil {
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 2
	}
	in, err := pcapfile.ReadFile(c.in)
	if err == nil {
		var out []pcapfile.Packet
		out, err = pcapfile.ReadFile(c.out)
		if err == nil {
			err = c.report(in, out, stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 1
	}
	return 0
}

func (c captureRun) report(in, out []pcapfile.Packet, stdout io.Writer) error {
	res, err := sim.FromCaptures(in, out, sim.CaptureConfig{RateMbps: c.rate, Sample: c.sample})
	if err != nil {
		return err
	}
	if len(res.Flows) < 2 {
		return fmt.Errorf("%d flow(s) left the bottleneck in %s: fairness needs two or more", len(res.Flows), c.out)
	}
	cfg := sim.Config{
		LineMbps:   c.line,
		Bottleneck: impair.Bottleneck{Rate: c.rate * 1e6, Kmin: c.kmin, Kmax: c.kmax, Limit: c.limit},
		Starts:     res.Starts,
		Duration:   res.Duration,
		Sample:     c.sample,
		Captured:   true,
		Settle:     c.settle,
	}
	// Judge the flows while all of them run: from settling after the
	// last one's start to the first one's end.
	cfg.Until = res.Duration
	for f := range res.Flows {
		cfg.Until = min(cfg.Until, res.Ends[f])
	}
	from, to := cfg.Judged()
	if to <= from {
		return fmt.Errorf("the flows ran together for %v, less than -settle %v", max(to-res.Starts[len(res.Starts)-1], 0), c.settle)
	}
	fmt.Fprintf(stdout, "Jain's index %.3f from %v to %v (all %d flows running); %.0f%% of %v periods at 0.9 or more\n",
		res.Jain(from, to), from.Round(time.Millisecond), to.Round(time.Millisecond), len(res.Flows),
		100*res.SampleJain(from, to, 0.9), c.sample)
	p50, n := res.QueueQuantile(0.5, from, to)
	p99, _ := res.QueueQuantile(0.99, from, to)
	fmt.Fprintf(stdout, "queue met by the %d packets then: p50 %d bytes, p99 %d (Kmin %d, Kmax %d; the least time in the bottleneck %v counted as none); %d left marked CE, %d entered and never left\n",
		n, p50, p99, c.kmin, c.kmax, res.MinDelay.Round(time.Microsecond), res.Marked, res.Dropped)
	for f, k := range res.Flows {
		fmt.Fprintf(stdout, "flow %d: %v -> %v QP 0x%06x, %.1f Mb/s, %d CNPs back\n", f, k.Src, k.Dst, k.DestQP, res.Mean(f, from, to), res.CNPs[f])
	}
	w, err := os.Create(c.svg)
	if err != nil {
		return err
	}
	if err := res.SVG(w, cfg); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", c.svg)
	return nil
}
