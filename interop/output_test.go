package interop

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParsePingpongGolden(t *testing.T) {
	for _, tc := range []struct {
		file        string
		bytes       int64
		iters       int64
		mbps, usec  float64
		remoteLines int
	}{
		{"bookworm/rc_pingpong_s64.client.txt", 640, 5, 0.49, 2086.60, 1},
		{"bookworm/ud_pingpong_s64.client.txt", 640, 5, 0.68, 1511.20, 1},
		// srq prints one remote line per QP (-q 2).
		{"bookworm/srq_pingpong_s64.server.txt", 640, 5, 1.96, 522.40, 2},
		{"trixie/rc_pingpong_s8192.client.txt", 81920, 5, 39.20, 3344.00, 1},
		{"trixie/uc_pingpong_s64.server.txt", 640, 5, 1.50, 683.60, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r, err := ParsePingpong(golden(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if r.Bytes != tc.bytes || r.Iters != tc.iters || r.Mbps != tc.mbps || r.UsecPerIter != tc.usec ||
				r.RemoteLines != tc.remoteLines || len(r.InvalidPages) != 0 {
				t.Errorf("got %+v, want bytes %d iters %d %v Mbit/s %v usec/iter %d remote lines",
					r, tc.bytes, tc.iters, tc.mbps, tc.usec, tc.remoteLines)
			}
		})
	}
}

func TestParsePingpongBroken(t *testing.T) {
	const ok = "  remote address: LID 0x0000, QPN 0x000011, PSN 0x344551, GID ::ffff:198.51.100.2\n" +
		"640 bytes in 0.01 seconds = 0.49 Mbit/sec\n5 iters in 0.01 seconds = 2086.60 usec/iter\n"
	for _, tc := range []struct {
		name, out, err string
		invalid        []int
	}{
		{name: "empty", out: "", err: "no result lines"},
		{name: "no iters line", out: "640 bytes in 0.01 seconds = 0.49 Mbit/sec\n", err: "usec/iter"},
		{name: "no bytes line", out: "5 iters in 0.01 seconds = 2086.60 usec/iter\n", err: "Mbit/sec"},
		{name: "only an error", out: "Couldn't connect to 192.0.2.1:18515\n", err: "no result lines"},
		{name: "invalid pages", out: ok + "invalid data in page 0\ninvalid data in page 3\n", invalid: []int{0, 3}},
		{name: "ok", out: ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParsePingpong(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.InvalidPages) != len(tc.invalid) {
				t.Fatalf("invalid pages %v, want %v", r.InvalidPages, tc.invalid)
			}
			for i := range tc.invalid {
				if r.InvalidPages[i] != tc.invalid[i] {
					t.Fatalf("invalid pages %v, want %v", r.InvalidPages, tc.invalid)
				}
			}
		})
	}
}

func TestParsePerftestGolden(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		file    string
		noRow   bool
		latency bool
		bytes   int64
		iters   int64
		unit    string
		fig     float64 // BW average or t_typical; NaN: not a number
	}{
		// perftest 6.06 under TCG printed zeros on both sides in this run
		// (and real figures in others): a reference tool's zero is no fault.
		{file: "bookworm/write_bw_s64.client.txt", bytes: 64, iters: 100, unit: "MB/sec", fig: 0},
		{file: "bookworm/write_bw_s64.server.txt", bytes: 64, iters: 100, unit: "MB/sec", fig: 0},
		{file: "bookworm/read_bw_s64.client.txt", bytes: 64, iters: 100, unit: "MB/sec", fig: 0.28},
		{file: "bookworm/atomic_bw_cas.client.txt", bytes: 8, iters: 100, unit: "MB/sec", fig: 0.05},
		{file: "bookworm/send_bw_ud_s64.client.txt", bytes: 64, iters: 100, unit: "MB/sec", fig: 0.16},
		{file: "bookworm/write_lat_s64.client.txt", latency: true, bytes: 64, iters: 100, fig: 35.56},
		{file: "bookworm/write_lat_s8192.client.txt", latency: true, bytes: 8192, iters: 20, fig: inf},
		{file: "trixie/write_bw_uc_s8192.client.txt", bytes: 8192, iters: 20, unit: "MiB/sec", fig: 37.11},
		{file: "trixie/send_bw_s64.server.txt", bytes: 64, iters: 100, unit: "MiB/sec", fig: 65.96},
		{file: "trixie/send_bw_rnr_s64.client.txt", bytes: 64, iters: 50, unit: "MiB/sec", fig: 0.02},
		{file: "pt629/pt629_read_lat_s64.client.txt", latency: true, bytes: 64, iters: 20, fig: 71.23},
		{file: "pt629/pt629_read_lat_s64.server.txt", noRow: true},
		{file: "pt629/pt629_write_bw_mismatch.client.txt", noRow: true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			row, ok, err := ParsePerftest(golden(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if ok == tc.noRow {
				t.Fatalf("row found %v, want %v", ok, !tc.noRow)
			}
			if tc.noRow {
				return
			}
			fig, _ := row.Figure()
			if row.Latency != tc.latency || row.Bytes != tc.bytes || row.Iters != tc.iters || row.BWUnit != tc.unit || fig != tc.fig {
				t.Errorf("got %+v (figure %v), want latency %v bytes %d iters %d unit %q figure %v",
					row, fig, tc.latency, tc.bytes, tc.iters, tc.unit, tc.fig)
			}
		})
	}
}

func TestParsePerftestNaN(t *testing.T) {
	// 6.06's 8192-byte write_lat row has inf everywhere and -nan as stdev.
	row, ok, err := ParsePerftest(golden(t, "bookworm/write_lat_s8192.server.txt"))
	if err != nil || !ok {
		t.Fatalf("ok %v err %v", ok, err)
	}
	if !math.IsNaN(row.TStdev) || !math.IsInf(row.TMin, 1) || !math.IsInf(row.P999, 1) {
		t.Errorf("got %+v, want inf figures and a NaN stdev", row)
	}
}

func TestParsePerftestBroken(t *testing.T) {
	const bwHeader = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
	const latHeader = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	for _, tc := range []struct{ name, out, err string }{
		{"header at the end", bwHeader, "without a row"},
		{"dashes instead of a row", bwHeader + "-----\n", "1 fields, want 5"},
		{"short bw row", bwHeader + " 64 100 0.63 0.61\n", "4 fields, want 5"},
		{"bw row under a lat header", latHeader + " 64 100 0.63 0.61 0.009939\n", "5 fields, want 9"},
		{"bytes not a number", bwHeader + " x 100 0.63 0.61 0.009939\n", "#bytes"},
		{"iterations not a number", bwHeader + " 64 1e2 0.63 0.61 0.009939\n", "#iterations"},
		{"figure not a number", bwHeader + " 64 100 0.63 fast 0.009939\n", "not a number"},
		{"unknown header", " #bytes #iterations  whatever\n 1 2 3\n", "neither bandwidth nor latency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ok, err := ParsePerftest(tc.out)
			if !ok || err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ok %v err %v, want a row error mentioning %q", ok, err, tc.err)
			}
		})
	}
}

// TestRpingMessage: rping.c's ping text, checked against rping's own
// at its edges: the letters' cycle from 'A' to 'z' and a size that cuts
// the "rdma-ping-N: " prefix.
func TestRpingMessage(t *testing.T) {
	for _, tc := range []struct {
		i, size int
		want    string
	}{
		{0, 64, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		{4, 64, "rdma-ping-4: EFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuv"},
		{57, 20, "rdma-ping-57: zABCD"},
		{58, 16, "rdma-ping-58: A"},
		{0, 1, ""},
		{123, 8, "rdma-pi"},
	} {
		if got := RpingMessage(tc.i, tc.size); got != tc.want {
			t.Errorf("RpingMessage(%d, %d) = %q, want %q", tc.i, tc.size, got, tc.want)
		}
	}
	if m := RpingMessage(7, 65535); len(m) != 65534 || !strings.HasPrefix(m, "rdma-ping-7: HIJ") {
		t.Errorf("RpingMessage(7, 65535): %d bytes, %q...", len(m), m[:20])
	}
}
