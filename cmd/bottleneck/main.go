// Command bottleneck runs DCQCN flows through one ECN-marking bottleneck
// on a simulated clock (package dcqcn/sim: the reaction and notification
// points goroce's QPs run, the marking queue nic/impair applies to real
// packets) and writes each flow's rate over time, and the queue, as SVG.
//
// Usage:
//
//	go run ./cmd/bottleneck -svg docs/congestion-fairness.svg
//
// Flags: -svg FILE (required), -cc SETTINGS (GOROCE_CC's syntax: on,
// paper, name=value; default paper), -flows N (2), -stagger D (10ms:
// each flow starts this long after the one before), -duration D (200ms),
// -rate MBPS (the bottleneck, 10000), -line MBPS (each sender, 10000).
// It prints Jain's fairness index, each flow's mean rate and the mean
// queue from 10 ms after the last flow starts.
//
// With -in and -out it plots a real bottleneck instead, from two captures
// of its RoCEv2 traffic on one clock, where the packets enter it and where
// they leave (lab/cc-bottleneck.sh takes them around a kernel RED qdisc
// in the lab's guest; sim.FromCaptures):
//
//	go run ./cmd/bottleneck -in in.pcap -out out.pcap -rate 40 -kmin 10000 -kmax 60000 -svg FILE
//
// -rate is then the bottleneck's rate (required), -kmin, -kmax and
// -limit its marking ramp and limit in bytes (drawn on the plot), -line
// the rate panel's top, -sample the sampling period (100ms) and -settle
// how long after the second flow's first packet the fairness is judged
// from (1s).
package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/goroce/goroce/transport"
	"io"
	"os"
	"time"

	"github.com/goroce/goroce/dcqcn/sim"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bottleneck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	svg := fs.String("svg", "", "write the plot to this SVG file (required)")
	cc := fs.String("cc", "paper", "DCQCN parameters, as GOROCE_CC: on (mlx5's defaults), paper, name=value,...")
	flows := fs.Int("flows", 2, "number of flows")
	stagger := fs.Duration("stagger", 10*time.Millisecond, "each flow starts this long after the one before")
	duration := fs.Duration("duration", 200*time.Millisecond, "simulated time")
	rate := fs.Float64("rate", 10000, "bottleneck rate, Mb/s")
	line := fs.Float64("line", 10000, "each sender's line rate, Mb/s")
	in := fs.String("in", "", "capture of the packets entering a real bottleneck (with -out)")
	out := fs.String("out", "", "capture of the packets leaving it (with -in)")
	kmin := fs.Int("kmin", 0, "with -in: the bottleneck's Kmin, bytes")
	kmax := fs.Int("kmax", 0, "with -in: its Kmax, bytes")
	limit := fs.Int("limit", 0, "with -in: its limit, bytes")
	sample := fs.Duration("sample", 100*time.Millisecond, "with -in: the sampling period")
	settle := fs.Duration("settle", time.Second, "with -in: judge fairness from this long after the last flow starts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *in != "" || *out != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		c := captureRun{in: *in, out: *out, svg: *svg, rate: *rate, line: *line, kmin: *kmin, kmax: *kmax,
			limit: *limit, sample: *sample, settle: *settle, rateSet: set["rate"], extra: fs.NArg()}
		return c.run(stdout, stderr)
	}
	if err := check(*svg, *flows, fs.NArg()); err != nil {
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 2
	}
	o, err := transport.ParseCongestion(*cc)
	if err != nil || o.Off {
		fmt.Fprintf(stderr, "bottleneck: -cc %q: want DCQCN on (on, paper or name=value settings)%s\n", *cc, errSuffix(err))
		return 2
	}
	cfg := sim.Default()
	cfg.Params = *o.Params
	cfg.Duration, cfg.LineMbps = *duration, *line
	cfg.Bottleneck.Rate = *rate * 1e6
	cfg.Starts = nil
	for i := range *flows {
		cfg.Starts = append(cfg.Starts, time.Duration(i)**stagger)
	}
	res, err := sim.Run(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 2
	}
	f, err := os.Create(*svg)
	if err != nil {
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 1
	}
	if err := res.SVG(f, cfg); err != nil {
		f.Close()
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 1
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(stderr, "bottleneck:", err)
		return 1
	}
	from := cfg.JudgedFrom()
	fmt.Fprintf(stdout, "Jain's index %.3f from %v to %v; mean queue %.0f bytes (Kmin %d, Kmax %d); %d marked, %d dropped\n",
		res.Jain(from, cfg.Duration), from, cfg.Duration, res.MeanQueue(from, cfg.Duration),
		cfg.Bottleneck.Kmin, cfg.Bottleneck.Kmax, res.Marked, res.Dropped)
	for i := range res.Rates {
		fmt.Fprintf(stdout, "flow %d: %.0f Mb/s, %d CNPs\n", i, res.Mean(i, from, cfg.Duration), res.CNPs[i])
	}
	fmt.Fprintf(stdout, "wrote %s\n", *svg)
	return 0
}

func check(svg string, flows, extra int) error {
	switch {
	case svg == "":
		return errors.New("-svg FILE is required")
	case flows < 1 || flows > 6:
		return fmt.Errorf("-flows %d: want 1 to 6", flows)
	case extra > 0:
		return errors.New("no arguments are taken besides the flags")
	}
	return nil
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}
