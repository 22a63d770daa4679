package sim

import (
	"bufio"
	"fmt"
	"io"
	"time"
)

// Plot geometry, in pixels.
const (
	plotW, plotH       = 720, 300 // the rate panel's area
	queueH             = 120      // the queue panel's
	plotLeft, plotTop  = 70, 40
	plotGap, plotBelow = 50, 40
)

var flowColors = []string{"#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f"}

// SVG draws the run: each flow's delivered rate over time (Mb/s) and,
// below, the bottleneck's queue with its marking ramp (Kmin, Kmax).
func (r *Result) SVG(w io.Writer, cfg Config) error {
	b := bufio.NewWriter(w)
	height := plotTop + plotH + plotGap + queueH + plotBelow
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n",
		plotLeft+plotW+150, height)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="14">DCQCN: %d flows through one ECN-marking bottleneck of %.0f Mb/s (Jain %.3f after %v)</text>`+"\n",
		plotLeft, len(r.Rates), cfg.Bottleneck.Rate/1e6, r.Jain(cfg.Judged()), tick(cfg.JudgedFrom(), cfg.Duration))
	end := cfg.Duration.Seconds()
	x := func(t time.Duration) float64 { return plotLeft + t.Seconds()/end*plotW }
	// The rate panel, 0 to the sender's line rate.
	top := cfg.LineMbps
	y := func(v float64) float64 { return plotTop + plotH - min(v/top, 1)*plotH }
	axes(b, plotTop, plotH, cfg.Duration)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", plotLeft-6, y(v)+4, v)
	}
	fmt.Fprintf(b, `<text x="14" y="%d" transform="rotate(-90 14 %d)">rate, Mb/s</text>`+"\n", plotTop+plotH/2+30, plotTop+plotH/2)
	for f, rates := range r.Rates {
		c := flowColors[f%len(flowColors)]
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, c)
		for i, t := range r.Times {
			fmt.Fprintf(b, "%.1f,%.1f ", x(t), y(rates[i]))
		}
		fmt.Fprintln(b, `"/>`)
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">flow %d (starts %v)</text>`+"\n", plotLeft+plotW+10, plotTop+16+18*f, c, f, tick(cfg.Starts[f], cfg.Duration))
	}
	qt := plotTop + plotH + plotGap
	// The queue panel, 0 to the queue's limit (at most 4 Kmax, NewQueue's
	// default, so that a deep queue's ramp stays visible), with the
	// ramp's ends.
	qtop := float64(cfg.Bottleneck.Limit)
	if k := 4 * float64(cfg.Bottleneck.Kmax); qtop <= 0 || qtop > k {
		qtop = k
	}
	qy := func(v float64) float64 { return float64(qt) + queueH - min(v/qtop, 1)*queueH }
	axes(b, qt, queueH, cfg.Duration)
	for _, k := range []struct {
		name string
		v    int
	}{{"Kmin", cfg.Bottleneck.Kmin}, {"Kmax", cfg.Bottleneck.Kmax}} {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", plotLeft, plotLeft+plotW, qy(float64(k.v)), qy(float64(k.v)))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" fill="#777">%s %d KB</text>`+"\n", plotLeft+plotW+10, qy(float64(k.v))+4, k.name, k.v/1000)
	}
	fmt.Fprintf(b, `<text x="14" y="%d" transform="rotate(-90 14 %d)">queue</text>`+"\n", qt+queueH/2+20, qt+queueH/2)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%.0f KB</text>`+"\n", plotLeft-6, qy(qtop)+4, qtop/1000)
	fmt.Fprintf(b, `<polyline fill="none" stroke="#444" stroke-width="1" points="`)
	for i, t := range r.Times {
		fmt.Fprintf(b, "%.1f,%.1f ", x(t), qy(float64(r.Queue[i])))
	}
	fmt.Fprintln(b, `"/>`)
	clock := "simulated"
	if cfg.Captured {
		clock = "captured; the queue estimated from each packet's time in the bottleneck"
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">time (%s), sampled every %v</text>`+"\n", plotLeft+plotW/2, height-8, clock, cfg.Sample)
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

// axes draws a panel's frame and its time ticks.
func axes(b *bufio.Writer, top, h int, d time.Duration) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#000"/>`+"\n", plotLeft, top, plotW, h)
	for i := 0; i <= 10; i++ {
		t := d * time.Duration(i) / 10
		xx := plotLeft + float64(plotW)*float64(i)/10
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000"/>`+"\n", xx, xx, top+h, top+h+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%v</text>`+"\n", xx, top+h+16, tick(t, d))
	}
}

// tick rounds a time on a plot of d to the power of ten at or below a
// hundredth of d (a captured run's times are the capture's, to the
// nanosecond).
func tick(t, d time.Duration) time.Duration {
	u := time.Duration(1)
	for u*10 <= d/100 {
		u *= 10
	}
	return t.Round(u)
}

// JudgedFrom is when the fairness is measured from: cfg.Settle (10 ms,
// as TestFairShare's window, unless set) after the last flow starts.
func (cfg Config) JudgedFrom() time.Duration {
	var last time.Duration
	for _, s := range cfg.Starts {
		last = max(last, s)
	}
	d := cfg.Settle
	if d == 0 {
		d = 10 * time.Millisecond
	}
	return min(last+d, cfg.Duration)
}

// Judged is the window the fairness is judged over: from JudgedFrom to
// cfg.Until, or the end.
func (cfg Config) Judged() (from, to time.Duration) {
	to = cfg.Duration
	if cfg.Until > 0 {
		to = min(cfg.Until, to)
	}
	return cfg.JudgedFrom(), to
}
