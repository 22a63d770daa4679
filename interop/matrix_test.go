package interop

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestMatrixShape(t *testing.T) {
	cases, err := Matrix(MatrixOptions{MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	// 4 pingpongs: rc, uc, srq x 4 sizes, ud x 2; perftest RC: 6 tests x 4
	// sizes + 2 atomics x 2 variants; UC: write and send, bw and lat, x 4
	// sizes; UD: send bw and lat x 2 sizes; rping at 64, 1024, 4096 and
	// 65535 bytes;
	// rdma_server/rdma_client's one exchange; ucmatose's 50 connections;
	// write_bw, read_bw and send_bw at 64 KiB through the RDMA CM (-R),
	// send_bw and send_lat over UD through it at 1 B and the MTU;
	// udaddy's 10 UD services; cmtime's 50; write_bw and send_bw at 64 KiB
	// both ways at once (-b). Each in two directions.
	const scenarios = 3*4 + 2 + 6*4 + 2*2 + 4*4 + 2*2 + 4 + 1 + 1 + 3 + 2*2 + 1 + 1 + 2
	if len(cases) != 2*scenarios {
		t.Fatalf("%d cases, want %d", len(cases), 2*scenarios)
	}
	seen := map[string]bool{}
	perTool := map[string]int{}
	for _, c := range cases {
		if seen[c.ID()] {
			t.Errorf("duplicate case %s", c.ID())
		}
		seen[c.ID()] = true
		perTool[c.Tool.Name]++
		switch {
		case c.Tool.Atomic:
			if c.Size != AtomicSize || c.Transport != RC {
				t.Errorf("%s: atomics are RC, 8 bytes", c.ID())
			}
		case c.Tool.Exchange == CmtimeConnects:
			if c.Size != 0 || c.Transport != RC || strings.Join(c.Flags, " ") != "-c 50" {
				t.Errorf("%s: cmtime runs RC, -c 50", c.ID())
			}
		case c.Tool.Exchange == CmatoseSends:
			if c.Size != 100 || c.Transport != RC || c.Iters != 10 || strings.Join(c.Flags, " ") != "-c 50" {
				t.Errorf("%s: ucmatose runs RC, -c 50 -C 10 -S 100", c.ID())
			}
		case c.Tool.Exchange == UdaddySends:
			if c.Size != 100 || c.Transport != UD || c.Iters != 10 || strings.Join(c.Flags, " ") != "-c 10" {
				t.Errorf("%s: udaddy runs UD, -c 10 -C 10 -S 100", c.ID())
			}
		case c.Tool.Exchange == ExampleSends:
			if c.Size != 16 || c.Transport != RC || c.Iters != 1 {
				t.Errorf("%s: rdma_server/rdma_client run RC, one 16-byte exchange", c.ID())
			}
		case c.Tool.Family == CM:
			if c.Size != 64 && c.Size != 1024 && c.Size != 4096 && c.Size != 65535 || c.Transport != RC || c.Iters != 100 {
				t.Errorf("%s: rping runs RC, -S 64, 1024, 4096 or 65535, -C 100", c.ID())
			}
		case c.Transport == UD:
			if c.Size > c.MTU {
				t.Errorf("%s: a UD message larger than the MTU", c.ID())
			}
		default:
			if c.Size != 1 && c.Size != 1024 && c.Size != 1025 && c.Size != LargeSize {
				t.Errorf("%s: size %d is not 1, MTU, MTU+1 or 64 KiB", c.ID(), c.Size)
			}
		}
		if c.Bidir() {
			if c.Tool.Name != "write_bw" && c.Tool.Name != "send_bw" || c.Transport != RC || c.Size != LargeSize {
				t.Errorf("%s: -b runs write_bw and send_bw over RC at 64 KiB", c.ID())
			}
			if got := strings.Join(c.Args(), " "); got != "-s 65536 -n 16 -m 1024 -F -b" {
				t.Errorf("%s: shared flags %q", c.ID(), got)
			}
		}
		switch {
		case c.Tool.Family != Perftest || !c.ViaCM():
		case c.Transport == UD:
			if c.Tool.Name != "send_bw" && c.Tool.Name != "send_lat" || c.Size != 1 && c.Size != 1024 {
				t.Errorf("%s: -R over UD runs send_bw and send_lat at 1 B and the MTU", c.ID())
			}
			if got, want := strings.Join(c.Args(), " "), fmt.Sprintf("-s %d -n 100 -m 1024 -c UD -F -R", c.Size); got != want {
				t.Errorf("%s: shared flags %q, want %q", c.ID(), got, want)
			}
		default:
			if c.Transport != RC || c.Size != LargeSize || c.Tool.Latency || c.Tool.Atomic || c.Flags[len(c.Flags)-1] != "-R" {
				t.Errorf("%s: -R runs the RC bandwidth tools at 64 KiB", c.ID())
			}
			if got := strings.Join(c.Args(), " "); got != "-s 65536 -n 16 -m 1024 -F -R" {
				t.Errorf("%s: shared flags %q", c.ID(), got)
			}
		}
		if c.Tool.Family == Perftest && c.Iters < 5 {
			t.Errorf("%s: perftest refuses -n %d", c.ID(), c.Iters)
		}
		if (c.Tool.Name == "read_bw" || c.Tool.Name == "read_lat" || c.Tool.Atomic) && c.Transport != RC {
			t.Errorf("%s: perftest allows READ and atomics on RC only", c.ID())
		}
	}
	for _, tl := range Tools {
		if perTool[tl.Name] == 0 {
			t.Errorf("no case runs %s", tl.Name)
		}
	}
	for _, id := range []string{
		"rc_pingpong/RC/s1@roced-server", "srq_pingpong/RC/s65536@peer-server",
		"ud_pingpong/UD/s1024@peer-server", "send_lat/UD/s1024@roced-server",
		"write_bw/UC/s1025@peer-server", "atomic_lat/RC/s8/A=CMP_AND_SWAP@peer-server",
		"atomic_bw/RC/s8/A=FETCH_AND_ADD@roced-server", "read_lat/RC/s65536@roced-server",
		"rping/RC/s64@roced-server", "rping/RC/s65535@peer-server",
		"write_bw/RC/s65536/R@roced-server", "read_bw/RC/s65536/R@peer-server",
		"send_bw/RC/s65536/R@peer-server", "send_bw/UD/s1/R@roced-server", "send_lat/UD/s1024/R@peer-server",
		"write_bw/RC/s65536/b@roced-server", "send_bw/RC/s65536/b@peer-server",
	} {
		if !seen[id] {
			t.Errorf("missing case %s", id)
		}
	}
}

func TestMatrixOptions(t *testing.T) {
	cases, err := Matrix(MatrixOptions{MTU: 4096, Directions: []Direction{PeerServer}, Tools: []string{"ib_send_bw", "ud_pingpong"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cases {
		ids = append(ids, c.ID())
	}
	want := []string{
		"ud_pingpong/UD/s1@peer-server", "ud_pingpong/UD/s4096@peer-server",
		"send_bw/RC/s1@peer-server", "send_bw/RC/s4096@peer-server", "send_bw/RC/s4097@peer-server", "send_bw/RC/s65536@peer-server",
		"send_bw/RC/s65536/R@peer-server", "send_bw/RC/s65536/b@peer-server",
		"send_bw/UC/s1@peer-server", "send_bw/UC/s4096@peer-server", "send_bw/UC/s4097@peer-server", "send_bw/UC/s65536@peer-server",
		"send_bw/UD/s1@peer-server", "send_bw/UD/s4096@peer-server",
		"send_bw/UD/s1/R@peer-server", "send_bw/UD/s4096/R@peer-server",
	}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(ids, "\n"), strings.Join(want, "\n"))
	}

	for _, bad := range []MatrixOptions{{MTU: 1500}, {MTU: 1024, Tools: []string{"ib_write_bww"}}} {
		if _, err := Matrix(bad); err == nil {
			t.Errorf("Matrix(%+v) accepted", bad)
		}
	}
}

func TestIters(t *testing.T) {
	rc, _ := ToolByName("rc_pingpong")
	wb, _ := ToolByName("write_bw")
	for _, tc := range []struct {
		tool        *Tool
		size, mtu   int
		scale       float64
		want        int
		description string
	}{
		{rc, 1, 1024, 0, 50, "small size, table value"},
		{rc, 1025, 1024, 0, 50, "one byte over the MTU is still small"},
		{rc, LargeSize, 1024, 0, 8, "64 KiB takes ItersLarge"},
		{rc, LargeSize, 1024, 0.01, 1, "a pingpong needs one"},
		{wb, 1, 1024, 0.01, 5, "perftest needs five"},
		{wb, 1024, 1024, 2, 200, "scaled"},
		{wb, 2048, 1024, 0, 16, "two MTUs is large"},
	} {
		if got := iters(tc.tool, tc.size, tc.mtu, tc.scale); got != tc.want {
			t.Errorf("%s: iters(%s, %d, %d, %v) = %d, want %d", tc.description, tc.tool.Name, tc.size, tc.mtu, tc.scale, got, tc.want)
		}
	}
}

func TestArgv(t *testing.T) {
	roced := Side{Roced: "/bin/roced", Dev: "198.18.15.1", GID: 1, Extra: []string{"--link", "afpacket"}}
	rxe := Side{Dev: "rxe0", GID: 1}
	hca := Side{Dev: "mlx5_0", GID: -1}
	rocedLab := Side{Roced: "/bin/roced", Dev: "rxetap0", GID: 1, Addr: "198.18.15.1", Addr6: "2001:db8:1::1",
		Extra: []string{"--qp-timeout=17", "--qp-timeout", "17", "--link", "afpacket"}}
	rxeLab := Side{Dev: "rxe0", GID: 1, Addr: "198.18.15.2", Addr6: "2001:db8:1::2"}
	v6 := func(s Scenario) Scenario { s.IPv6 = true; return s }
	lib := Side{Dev: "goroce0", GID: 1, Addr: "198.18.15.1",
		Prefix: []string{"env", "LD_PRELOAD=/lib/libgoroce.so", "GOROCE_NETDEV=rxetap0"}}
	rocedLab44 := rocedLab
	rocedLab44.RdmaCore = "44"
	rxeLabTO := rxeLab
	rxeLabTO.QPTimeout = 17
	sc := func(tool string, tr Transport, size, iters int, flags ...string) Scenario {
		s := scenario(t, tool, tr, size, iters)
		tl, _ := ToolByName(tool)
		s.Flags = append(append([]string(nil), tl.Extra...), flags...)
		return s
	}
	for _, tc := range []struct {
		name   string
		side   Side
		sc     Scenario
		port   int
		server string
		want   string
	}{
		{"roced rc server", roced, sc("rc_pingpong", RC, 1025, 50), 0, "",
			"/bin/roced rc_pingpong -d 198.18.15.1 -g 1 -s 1025 -n 50 -m 1024 -c --link afpacket"},
		{"rxe rc client", rxe, sc("rc_pingpong", RC, 1025, 50), 18515, "198.18.15.1",
			"ibv_rc_pingpong -d rxe0 -g 1 -s 1025 -n 50 -m 1024 -c 198.18.15.1"},
		// The real tool over libgoroce: its own command line after the prefix.
		{"libgoroce uc client", lib, sc("uc_pingpong", UC, 65536, 8), 18530, "192.0.2.2",
			"env LD_PRELOAD=/lib/libgoroce.so GOROCE_NETDEV=rxetap0 ibv_uc_pingpong -d goroce0 -g 1 -s 65536 -n 8 -m 1024 -c -p 18530 192.0.2.2"},
		{"ud pingpong has no -m", rxe, sc("ud_pingpong", UD, 1024, 50), 0, "",
			"ibv_ud_pingpong -d rxe0 -g 1 -s 1024 -n 50 -c"},
		{"srq with four QPs", rxe, sc("srq_pingpong", RC, 1, 50), 0, "",
			"ibv_srq_pingpong -d rxe0 -g 1 -s 1 -n 50 -m 1024 -c -q 4"},
		{"perftest UC on another port", rxe, sc("write_lat", UC, 1, 100), 20000, "10.0.0.1",
			"ib_write_lat -d rxe0 -x 1 -s 1 -n 100 -m 1024 -c UC -F -p 20000 10.0.0.1"},
		{"roced perftest UD", roced, sc("send_bw", UD, 1024, 100), 0, "192.0.2.2",
			"/bin/roced send_bw -d 198.18.15.1 -x 1 -s 1024 -n 100 -m 1024 -c UD -F --link afpacket 192.0.2.2"},
		// rxe's perftest takes roced's ACK timeout in the lab (LabPeer);
		// the pingpongs and the CM tools have no such flag.
		{"rxe perftest with roced's timeout", rxeLabTO, sc("write_bw", RC, 65536, 8), 0, "198.18.15.1",
			"ib_write_bw -d rxe0 -x 1 -s 65536 -n 8 -m 1024 -F -u 17 198.18.15.1"},
		{"rxe pingpong without it", rxeLabTO, sc("rc_pingpong", RC, 1025, 50), 0, "",
			"ibv_rc_pingpong -d rxe0 -g 1 -s 1025 -n 50 -m 1024 -c"},
		{"rxe rping without it", rxeLabTO, sc("rping", RC, 65535, 10), 18521, "198.18.15.1",
			"rping -c -a 198.18.15.1 -I 198.18.15.2 -p 18521 -v -C 10 -S 65535 -V"},
		{"atomic takes no -s", hca, sc("atomic_lat", RC, 8, 100, "-A", "CMP_AND_SWAP"), 0, "",
			"ib_atomic_lat -d mlx5_0 -n 100 -m 1024 -F -A CMP_AND_SWAP"},
		// rping: no -d (its debug flag) or GID; addresses, the case's port,
		// -V on the client; roced's --qp-timeout left out, --link kept.
		{"roced rping server", rocedLab, sc("rping", RC, 64, 10), 18520, "",
			"/bin/roced rping -s -a 198.18.15.1 -p 18520 -v -C 10 -S 64 --link afpacket"},
		{"rxe rping client", rxeLab, sc("rping", RC, 65535, 10), 18521, "198.18.15.1",
			"rping -c -a 198.18.15.1 -I 198.18.15.2 -p 18521 -v -C 10 -S 65535 -V"},
		{"roced rping client", rocedLab, sc("rping", RC, 64, 10), 0, "198.18.15.2",
			"/bin/roced rping -c -a 198.18.15.2 -I 198.18.15.1 -p 18515 -v -C 10 -S 64 -V --link afpacket"},
		// Over IPv6 the same lines with the sides' IPv6 addresses.
		{"roced rping server ipv6", rocedLab, v6(sc("rping", RC, 65535, 10)), 18520, "",
			"/bin/roced rping -s -a 2001:db8:1::1 -p 18520 -v -C 10 -S 65535 --link afpacket"},
		{"rxe rping client ipv6", rxeLab, v6(sc("rping", RC, 65535, 10)), 18520, "2001:db8:1::1",
			"rping -c -a 2001:db8:1::1 -I 2001:db8:1::2 -p 18520 -v -C 10 -S 65535 -V"},
		// rdma_server/rdma_client: -s is the server's address (bound or
		// connected to), -p the case's port; the real client has no
		// source address, roced's takes --dev.
		{"roced rdma_server", rocedLab, sc("rdma_server", RC, 16, 1), 18522, "",
			"/bin/roced rdma_server -s 198.18.15.1 -p 18522 --link afpacket"},
		{"rxe rdma_client", rxeLab, sc("rdma_server", RC, 16, 1), 18522, "198.18.15.1",
			"rdma_client -s 198.18.15.1 -p 18522"},
		{"rxe rdma_server", rxeLab, sc("rdma_server", RC, 16, 1), 18523, "",
			"rdma_server -s 198.18.15.2 -p 18523"},
		{"roced rdma_client", rocedLab, sc("rdma_client", RC, 16, 1), 18523, "198.18.15.2",
			"/bin/roced rdma_client -s 198.18.15.2 --dev 198.18.15.1 -p 18523 --link afpacket"},
		// ucmatose: -b binds either side's address, -s names the server.
		{"roced ucmatose server", rocedLab, sc("ucmatose", RC, 100, 10), 18524, "",
			"/bin/roced ucmatose -b 198.18.15.1 -p 18524 -C 10 -S 100 -c 50 --link afpacket"},
		{"rxe ucmatose client", rxeLab, sc("ucmatose", RC, 100, 10), 18524, "198.18.15.1",
			"ucmatose -s 198.18.15.1 -b 198.18.15.2 -p 18524 -C 10 -S 100 -c 50"},
		// udaddy: as ucmatose, without -p (its port is fixed).
		{"roced udaddy server", rocedLab, sc("udaddy", UD, 100, 10), 7174, "",
			"/bin/roced udaddy -b 198.18.15.1 -C 10 -S 100 -c 10 --link afpacket"},
		{"rxe udaddy client", rxeLab, sc("udaddy", UD, 100, 10), 7174, "198.18.15.1",
			"udaddy -s 198.18.15.1 -b 198.18.15.2 -C 10 -S 100 -c 10"},
		// cmtime: -b on either side, -s names the server; a roced client
		// is told the peer's rdma-core, a roced server finds it out.
		{"roced cmtime server", rocedLab44, sc("cmtime", RC, 0, 1), 18525, "",
			"/bin/roced cmtime -b 198.18.15.1 -p 18525 -c 50 --link afpacket"},
		{"roced cmtime client", rocedLab44, sc("cmtime", RC, 0, 1), 18525, "198.18.15.2",
			"/bin/roced cmtime -s 198.18.15.2 -b 198.18.15.1 -p 18525 -c 50 --rdma-core 44 --link afpacket"},
		{"rxe cmtime client", rxeLab, sc("cmtime", RC, 0, 1), 18525, "198.18.15.1",
			"cmtime -s 198.18.15.1 -b 198.18.15.2 -p 18525 -c 50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(tc.side.Argv(tc.sc, tc.port, tc.server), " "); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestMatrixIPv6: MatrixOptions.IPv6 adds rping at 65535, rdma_server,
// ucmatose and udaddy over IPv6, in both directions, and nothing else.
func TestMatrixIPv6(t *testing.T) {
	base, err := Matrix(MatrixOptions{MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	all, err := Matrix(MatrixOptions{MTU: 1024, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range all {
		if c.IPv6 {
			ids = append(ids, c.ID())
		}
	}
	want := []string{"rping/RC/s65535/ipv6@roced-server", "rping/RC/s65535/ipv6@peer-server",
		"rdma_server/RC/s16/ipv6@roced-server", "rdma_server/RC/s16/ipv6@peer-server",
		"ucmatose/RC/s100/ipv6@roced-server", "ucmatose/RC/s100/ipv6@peer-server",
		"udaddy/UD/s100/ipv6@roced-server", "udaddy/UD/s100/ipv6@peer-server"}
	if len(all) != len(base)+len(want) || !reflect.DeepEqual(ids, want) {
		t.Errorf("%d cases (IPv4 only: %d), IPv6 ones %q; want %q", len(all), len(base), ids, want)
	}
}

// TestRunIPv6WithoutAddresses: an IPv6 case between sides without IPv6
// addresses is not run (and so fails the run), never run over IPv4.
func TestRunIPv6WithoutAddresses(t *testing.T) {
	cases, err := Matrix(MatrixOptions{MTU: 1024, IPv6: true, Tools: []string{"rping"}})
	if err != nil {
		t.Fatal(err)
	}
	var v6 []Case
	for _, c := range cases {
		if c.IPv6 {
			v6 = append(v6, c)
		}
	}
	rep := Run(context.Background(), SelfPeer("/nonexistent/roced", testAddrA, testAddrB, nil), v6, Options{})
	if rep.NotRun != 2 || rep.OK() || !strings.Contains(strings.Join(rep.Results[0].Reasons, ""), "no IPv6 address") {
		t.Errorf("not run %d, OK %v, reasons %q", rep.NotRun, rep.OK(), rep.Results[0].Reasons)
	}
}

func TestScenarioName(t *testing.T) {
	s := scenario(t, "atomic_bw", RC, 8, 100)
	s.Flags = []string{"-A", "CMP_AND_SWAP"}
	if got := s.Name(); got != "atomic_bw/RC/s8/A=CMP_AND_SWAP" {
		t.Errorf("got %s", got)
	}
	s = scenario(t, "srq_pingpong", RC, 1, 50)
	s.Flags = []string{"-c", "-q", "4"}
	if got := s.Name(); got != "srq_pingpong/RC/s1" {
		t.Errorf("got %s", got)
	}
}

func TestParseDirections(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Direction
	}{
		{"both", []Direction{RocedServer, PeerServer}},
		{"", []Direction{RocedServer, PeerServer}},
		{"roced-server", []Direction{RocedServer}},
		{"peer-server", []Direction{PeerServer}},
	} {
		got, err := ParseDirections(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseDirections(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseDirections("server"); err == nil {
		t.Error("ParseDirections(server) accepted")
	}
}

// TestLibgoroceCases: the libgoroce stage runs every pingpong case,
// perftest over RC at 64 KiB (atomics: fetch-and-add), -b too, but not with -R,
// and every librdmacm tool's case, IPv6 ones too; cmtime only where the
// host's rdma-core and the guest's are one release (LibgoroceSkip).
func TestLibgoroceCases(t *testing.T) {
	cases, err := Matrix(MatrixOptions{MTU: 1024, Tools: LibgoroceTools, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	pingpongs, picked := 0, 0
	for _, c := range cases {
		if !LibgoroceCase(c) {
			continue
		}
		picked++
		if c.Tool.Family == Pingpong {
			pingpongs++
			continue
		}
		ids = append(ids, c.Name())
	}
	want := []string{"write_bw/RC/s65536", "write_bw/RC/s65536/b", "write_lat/RC/s65536", "read_bw/RC/s65536",
		"send_bw/RC/s65536", "send_bw/RC/s65536/b", "send_lat/RC/s65536", "atomic_bw/RC/s8/A=FETCH_AND_ADD",
		"rping/RC/s64", "rping/RC/s1024", "rping/RC/s4096", "rping/RC/s65535", "rping/RC/s65535/ipv6", "rdma_server/RC/s16", "rdma_server/RC/s16/ipv6",
		"ucmatose/RC/s100", "ucmatose/RC/s100/ipv6", "udaddy/UD/s100", "udaddy/UD/s100/ipv6", "cmtime/RC/s0"}
	var got []string
	for i, id := range ids {
		if i%2 == 0 { // both directions
			got = append(got, id)
		}
	}
	if pingpongs != 28 || picked != 68 || !reflect.DeepEqual(got, want) {
		t.Errorf("%d cases, %d pingpong ones, the others %q; want 68, 28 and %q", picked, pingpongs, got, want)
	}

	mk := func(subject, ref string) *Peer {
		return &Peer{Subject: Side{RdmaCore: subject}, Ref: Side{RdmaCore: ref}}
	}
	for _, c := range cases {
		same, other := LibgoroceSkip(c, mk("44", "44")), LibgoroceSkip(c, mk("44", "56"))
		switch {
		case same != "":
			t.Errorf("%s left out between two rdma-core 44s: %s", c.ID(), same)
		case c.Tool.Name == "cmtime" && !strings.Contains(other, "rdma-core 56"):
			t.Errorf("%s between 44 and 56: %q, want it left out", c.ID(), other)
		case c.Tool.Name != "cmtime" && other != "":
			t.Errorf("%s left out between 44 and 56: %s", c.ID(), other)
		}
	}
}
