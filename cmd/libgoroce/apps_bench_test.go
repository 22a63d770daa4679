package main

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/interop"
)

// BenchmarkApps prints real software's figures over goroce beside roced's
// own tools in the same run, across one veth pair (UCX takes no loopback
// device: its GID 0 is empty): ucx_perftest tag_lat (8 bytes; its 50th
// and 99th percentiles, -R) and tag_bw (64 KiB, overall MB/s) over
// rc_verbs and ud_verbs through the library; qperf rc_lat and rc_bw over
// the RDMA CM (-cm1, 2 s each; qperf prints only a mean latency, so the
// median and the worst of the rounds' means); and roced send_lat (8
// bytes: t_typical and the 99% percentile) and send_bw (64 KiB: BW
// average).
// Each runs rounds times, alternating, so that a change in the machine's
// load falls on all; the figures are the medians. A benchmark, not a
// timed test: nothing here fails on a figure. Needs root (namespaces).
//
//	go test -run '^$' -bench Apps -benchtime 1x ./cmd/libgoroce
func BenchmarkApps(b *testing.B) {
	perftest, err := exec.LookPath("ucx_perftest")
	if err != nil {
		b.Skipf("ucx_perftest is not installed (Debian's ucx-utils): %v", err)
	}
	netns.Privileged(b)
	p := netns.New(b, netns.Config{Subnet: 44})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const rounds = 3
	fig := func(f []string, i int) float64 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			b.Fatalf("ucx_perftest's Final: line %q: %v", f, err)
		}
		return v
	}
	ucx := func(tls string, tc ucxCase) []string {
		out, _, err := runUCXPerftest(ctx, b, p, perftest, tls, tc)
		if err != nil {
			b.Fatal(err)
		}
		f := ucxFinal(out)
		if f == nil {
			b.Fatalf("no Final: line:\n%s", out)
		}
		return f
	}
	for _, tr := range ucxTransports {
		b.Run(tr.name, func(b *testing.B) {
			var p50, p99, bw []float64
			for range rounds {
				p50 = append(p50, fig(ucx(tr.tls, ucxCase{test: "tag_lat", size: 8, n: 5000}), 2))
				p99 = append(p99, fig(ucx(tr.tls, ucxCase{test: "tag_lat", size: 8, n: 5000, args: []string{"-R", "99"}}), 2))
				bw = append(bw, fig(ucx(tr.tls, ucxCase{test: "tag_bw", size: 65536, n: 500}), 6))
			}
			b.ReportMetric(median(p50), "tag_lat-p50-usec")
			b.ReportMetric(median(p99), "tag_lat-p99-usec")
			b.ReportMetric(median(bw), "tag_bw-MB/s")
			b.ReportMetric(0, "ns/op")
			b.Logf("tag_lat p50 %v, p99 %v usec; tag_bw %v MB/s (%d rounds)", p50, p99, bw, rounds)
		})
	}
	b.Run("qperf", func(b *testing.B) {
		q := startQperf(ctx, b, p, qperfPath(b))
		var lat, bw []float64
		for range rounds {
			lat = append(lat, qperfFigure(ctx, b, q, "rc_lat"))
			bw = append(bw, qperfFigure(ctx, b, q, "rc_bw"))
		}
		b.ReportMetric(median(lat), "rc_lat-median-usec")
		b.ReportMetric(slices.Max(lat), "rc_lat-worst-usec")
		b.ReportMetric(median(bw), "rc_bw-MB/s")
		b.ReportMetric(0, "ns/op")
		b.Logf("rc_lat %v usec (each a run's mean); rc_bw %v MB/s (%d rounds)", lat, bw, rounds)
	})
	b.Run("roced", func(b *testing.B) {
		var lat, lat99, bw []float64
		for range rounds {
			r := rocedPair(ctx, b, p, "send_lat", "-s", "8", "-n", "5000")
			lat, lat99 = append(lat, r.TTypical), append(lat99, r.P99)
			bw = append(bw, rocedPair(ctx, b, p, "send_bw", "-s", "65536", "-n", "500").BWAvg)
		}
		b.ReportMetric(median(lat), "send_lat-typical-usec")
		b.ReportMetric(median(lat99), "send_lat-p99-usec")
		b.ReportMetric(median(bw), "send_bw-MB/s")
		b.ReportMetric(0, "ns/op")
		b.Logf("send_lat t_typical %v, 99%% %v usec; send_bw %v (%d rounds)", lat, lat99, bw, rounds)
	})
}

// rocedPair runs a roced perftest tool across the pair, the server on A,
// and returns the client's result row.
func rocedPair(ctx context.Context, b *testing.B, p *netns.Pair, tool string, args ...string) interop.PerftestRow {
	b.Helper()
	port := strconv.Itoa(freePort(b))
	var srvOut, cliOut bytes.Buffer
	srv := exec.CommandContext(ctx, roced, append([]string{tool, "-d", p.A.IPv4.String(), "-x", "1", "-p", port}, args...)...)
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := p.A.Do(srv.Start); err != nil {
		b.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	n, _ := strconv.Atoi(port)
	if err := waitListening(ctx, srv.Process.Pid, n, srvDone); err != nil {
		b.Fatalf("roced %s server: %v\n%s", tool, err, srvOut.String())
	}
	cli := exec.CommandContext(ctx, roced, append(append([]string{tool, "-d", p.B.IPv4.String(), "-x", "1", "-p", port}, args...), p.A.IPv4.String())...)
	cli.Stdout, cli.Stderr = &cliOut, &cliOut
	cerr := p.B.Do(cli.Run)
	serr := <-srvDone
	if cerr != nil || serr != nil {
		b.Fatalf("roced %s: client %v, server %v\nclient:\n%s\nserver:\n%s", tool, cerr, serr, cliOut.String(), srvOut.String())
	}
	row, ok, err := interop.ParsePerftest(cliOut.String())
	if !ok || err != nil {
		b.Fatalf("roced %s: no result row (%v):\n%s", tool, err, cliOut.String())
	}
	return row
}

// qperfPath is Debian's qperf, or skips.
func qperfPath(b *testing.B) string {
	path, err := exec.LookPath("qperf")
	if err != nil {
		b.Skipf("qperf is not installed (.ci/run installs it): %v", err)
	}
	return path
}

// qperfFigure runs one qperf RC test over the RDMA CM against q for 2 s
// and returns its figure: a latency in microseconds or a bandwidth in
// MB/s, whatever unit qperf chose to print.
func qperfFigure(ctx context.Context, b *testing.B, q *qperfServer, test string) float64 {
	want := "bw"
	if strings.HasSuffix(test, "_lat") {
		want = "latency"
	}
	out, err := q.run(ctx, "2", "-cm1", test)
	reasons, figs, _ := interop.JudgeQperf(interop.QperfTest{Name: test, CM: true, Want: want}, interop.Output{Stdout: out})
	if err != nil || len(reasons) > 0 || len(figs) != 1 {
		b.Fatalf("qperf -cm1 %s: %v %v\n%s", test, err, reasons, out)
	}
	scale := map[string]float64{"ns": 1e-3, "us": 1, "ms": 1e3, "sec": 1e6,
		"KB/sec": 1e-3, "MB/sec": 1, "GB/sec": 1e3}[figs[0].Unit]
	if scale == 0 {
		b.Fatalf("qperf -cm1 %s: unit %q", test, figs[0].Unit)
	}
	return figs[0].Value * scale
}
