package interop

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goroce/goroce/tools/cmtime"
	"github.com/goroce/goroce/tools/rdmaserver"
	"github.com/goroce/goroce/tools/rping"
	"github.com/goroce/goroce/tools/ucmatose"
	"github.com/goroce/goroce/tools/udaddy"
)

// Family groups the tools by command line, exchange and output format.
type Family int

const (
	// Pingpong is rdma-core's libibverbs examples (ibv_*_pingpong).
	Pingpong Family = iota
	// Perftest is perftest's ib_* programs.
	Perftest
	// CM is librdmacm's tools, which connect through the RDMA connection
	// manager on QP1 rather than a TCP exchange (rping).
	CM
)

// String returns "pingpong", "perftest" or "cm".
func (f Family) String() string {
	switch f {
	case Pingpong:
		return "pingpong"
	case CM:
		return "cm"
	}
	return "perftest"
}

// Transport is an InfiniBand transport service.
type Transport string

// The transports roced implements.
const (
	RC Transport = "RC"
	UC Transport = "UC"
	UD Transport = "UD"
)

// Row says what a side of a perftest run prints after the traffic.
type Row int

const (
	// NoRow: the side prints no result row (read_lat and atomic_lat
	// servers take no part in the traffic).
	NoRow Row = iota
	// CountsRow: a row whose #bytes and #iterations must be right but whose
	// figures mean nothing (perftest 6.06's bandwidth servers print 0.00, a
	// send_bw server does not measure the peak).
	CountsRow
	// FullRow: the measuring side's row: counts right and figures positive.
	FullRow
)

// Tool is one of the thirteen programs roced stands in for, with what the
// matrix does with it.
type Tool struct {
	// Name is roced's command (roced rc_pingpong, roced write_bw).
	Name string
	// Binary is the real program (ibv_rc_pingpong, ib_write_bw).
	Binary string
	Family Family // which exchange and output the tool has
	// Transports lists the services the matrix runs it over: one for the
	// pingpongs (fixed by the program), those perftest's -c accepts for it.
	Transports []Transport
	// Atomic tools move 8 bytes and take no -s.
	Atomic bool
	// Latency tools print t_typical; the others a bandwidth.
	Latency bool
	// Iters is -n for the small sizes (up to MTU+1) and ItersLarge for the
	// several-MTU size. They are chosen so that a case costs about 2-3 s of
	// wall time with the real tool running under qemu TCG, where 64 KiB
	// round trips take milliseconds (see README.md for the budget).
	Iters, ItersLarge int
	// Extra are flags every scenario of the tool gets.
	Extra []string
	// Variants, when set, makes one scenario per flag set (atomic -A).
	Variants [][]string
	// FixedSizes, when set, are the tool's sizes whatever the MTU (rping's
	// -S has a minimum and a maximum of its own).
	FixedSizes []int
	// ServerRow and ClientRow say what perftest prints on each side.
	ServerRow, ClientRow Row
	// ClientName and ClientBinary are the client's roced command and real
	// program where they differ from the server's (rdma_client).
	ClientName, ClientBinary string
	// Exchange is what a CM tool does once connected.
	Exchange CMExchange
	// Port is the tool's default port where it is not DefaultPort (the
	// CM tools'): the README's lines leave it as it is.
	Port int
	// CMSizes are the sizes at which the tool's RC scenario runs once more
	// with -R: the exchange and the QPs connected through the RDMA CM.
	CMSizes []int
	// CMUD runs the tool's UD scenarios once more with -R: the QPs of the
	// UDP port space, resolved through SIDR (perftest's send programs).
	CMUD bool
	// BidirSizes are the sizes at which the tool's RC scenario runs once
	// more with -b: both sides post and complete at once (perftest's
	// run_iter_bi), so each QP's acknowledgements and its own requests
	// share the link, which one-way runs never make them do.
	BidirSizes []int
	// IPv6Sizes are the sizes at which a CM tool runs once more over IPv6
	// (MatrixOptions.IPv6): rdma_cm's IPv6 header in the CM's MADs, and
	// RoCEv2 over IPv6 with GIDs that are the addresses themselves.
	IPv6Sizes []int
	// FixedPort says the tool has no port flag (udaddy): every case uses
	// Port.
	FixedPort bool
}

// CMExchange is what a tool of the CM family does once connected.
type CMExchange int

const (
	// RpingLoop is rping's: per ping a SEND, an RDMA READ, a SEND, an
	// RDMA WRITE and a SEND; -v prints every ping.
	RpingLoop CMExchange = iota
	// ExampleSends is librdmacm's rdma_server/rdma_client example: one
	// 16-byte SEND each way; each prints "NAME: start", "NAME: end 0".
	ExampleSends
	// CmatoseSends is ucmatose's: -c connections at once, -C SENDs of -S
	// bytes each way on each, the server first; each side prints its
	// phases (CmatoseLines).
	CmatoseSends
	// UdaddySends is udaddy's: -c UD services resolved through SIDR at
	// once, -C SENDs with immediate of -S bytes each way on each, the
	// client first; each side prints its phases (UdaddyLines).
	UdaddySends
	// CmtimeConnects is cmtime's: -c connections set up step by step and
	// torn down, no data; rdma-core 56 runs three rounds in lockstep over
	// a TCP socket and prints two tables a side, 44 has no socket, its
	// server prints nothing and runs until killed (Side.RdmaCore).
	CmtimeConnects
)

// Command is the side's program: roced's command (roced) or the real
// program's name, for the server or the client.
func (t *Tool) Command(server, roced bool) string {
	switch {
	case roced && !server && t.ClientName != "":
		return t.ClientName
	case roced:
		return t.Name
	case !server && t.ClientBinary != "":
		return t.ClientBinary
	}
	return t.Binary
}

// GIDFlag is the tool's GID index option.
func (t *Tool) GIDFlag() string {
	if t.Family == Pingpong {
		return "-g"
	}
	return "-x"
}

// Tools is the matrix's tool table. The order is the order cases run in.
var Tools = []*Tool{
	// rdma-core examples: -c makes the receiver check the data ("invalid
	// data in page N" otherwise); UD messages must fit one MTU.
	{Name: "rc_pingpong", Binary: "ibv_rc_pingpong", Family: Pingpong, Transports: []Transport{RC},
		Iters: 50, ItersLarge: 8, Extra: []string{"-c"}},
	{Name: "uc_pingpong", Binary: "ibv_uc_pingpong", Family: Pingpong, Transports: []Transport{UC},
		Iters: 50, ItersLarge: 8, Extra: []string{"-c"}},
	{Name: "ud_pingpong", Binary: "ibv_ud_pingpong", Family: Pingpong, Transports: []Transport{UD},
		Iters: 50, ItersLarge: 8, Extra: []string{"-c"}},
	// Four QPs sharing one SRQ: more than one QP without the 16 default's
	// setup time under TCG.
	{Name: "srq_pingpong", Binary: "ibv_srq_pingpong", Family: Pingpong, Transports: []Transport{RC},
		Iters: 50, ItersLarge: 8, Extra: []string{"-c", "-q", "4"}},

	{Name: "write_bw", Binary: "ib_write_bw", Family: Perftest, Transports: []Transport{RC, UC},
		Iters: 100, ItersLarge: 16, ServerRow: CountsRow, ClientRow: FullRow,
		CMSizes: []int{LargeSize}, BidirSizes: []int{LargeSize}},
	{Name: "write_lat", Binary: "ib_write_lat", Family: Perftest, Transports: []Transport{RC, UC}, Latency: true,
		Iters: 100, ItersLarge: 16, ServerRow: FullRow, ClientRow: FullRow},
	{Name: "read_bw", Binary: "ib_read_bw", Family: Perftest, Transports: []Transport{RC},
		Iters: 100, ItersLarge: 16, ServerRow: CountsRow, ClientRow: FullRow,
		CMSizes: []int{LargeSize}},
	{Name: "read_lat", Binary: "ib_read_lat", Family: Perftest, Transports: []Transport{RC}, Latency: true,
		Iters: 100, ItersLarge: 16, ServerRow: NoRow, ClientRow: FullRow},
	{Name: "send_bw", Binary: "ib_send_bw", Family: Perftest, Transports: []Transport{RC, UC, UD},
		Iters: 100, ItersLarge: 16, ServerRow: CountsRow, ClientRow: FullRow,
		CMSizes: []int{LargeSize}, CMUD: true, BidirSizes: []int{LargeSize}},
	{Name: "send_lat", Binary: "ib_send_lat", Family: Perftest, Transports: []Transport{RC, UC, UD}, Latency: true,
		Iters: 100, ItersLarge: 16, ServerRow: FullRow, ClientRow: FullRow, CMUD: true},
	{Name: "atomic_bw", Binary: "ib_atomic_bw", Family: Perftest, Transports: []Transport{RC}, Atomic: true,
		Iters: 100, Variants: [][]string{{"-A", "FETCH_AND_ADD"}, {"-A", "CMP_AND_SWAP"}},
		ServerRow: CountsRow, ClientRow: FullRow},
	{Name: "atomic_lat", Binary: "ib_atomic_lat", Family: Perftest, Transports: []Transport{RC}, Atomic: true, Latency: true,
		Iters: 100, Variants: [][]string{{"-A", "FETCH_AND_ADD"}, {"-A", "CMP_AND_SWAP"}},
		ServerRow: NoRow, ClientRow: FullRow},

	// librdmacm: rping connects through the connection manager (REQ, REP,
	// RTU on QP1, DREQ and DREP at the end), then per ping SENDs, an RDMA
	// READ and an RDMA WRITE, on RC. -S runs from rping.c's
	// RPING_MIN_BUFSIZE (26) to RPING_BUFSIZE-1 (65535): a one-packet ping,
	// exactly one MTU, four packets, and the largest, 64 packets at MTU
	// 1024. -C 100 takes 3-5 s a case under TCG; -v on both sides prints
	// every ping, -V on the client checks the echo.
	{Name: "rping", Binary: "rping", Family: CM, Transports: []Transport{RC},
		Iters: 100, FixedSizes: []int{64, 1024, 4096, 65535}, IPv6Sizes: []int{65535}, Port: rping.DefaultPort},
	// librdmacm's smallest example: rdma_server and rdma_client connect,
	// the client SENDs 16 bytes and the server 16 back, both disconnect.
	// One exchange of a fixed size.
	{Name: "rdma_server", Binary: "rdma_server", ClientName: "rdma_client", ClientBinary: "rdma_client",
		Family: CM, Exchange: ExampleSends, Transports: []Transport{RC}, Iters: 1, FixedSizes: []int{rdmaserver.MsgLen},
		Port: rdmaserver.DefaultPort, IPv6Sizes: []int{rdmaserver.MsgLen}},
	// librdmacm's ucmatose: 50 RC connections set up at once (REQs, REPs
	// and RTUs crossing), then 10 SENDs of 100 bytes (its defaults) each
	// way on every one, and 50 disconnections.
	{Name: "ucmatose", Binary: "ucmatose", Family: CM, Exchange: CmatoseSends, Transports: []Transport{RC},
		Iters: ucmatose.DefaultCount, FixedSizes: []int{ucmatose.DefaultSize}, Extra: []string{"-c", "50"},
		Port: ucmatose.DefaultPort, IPv6Sizes: []int{ucmatose.DefaultSize}},
	// librdmacm's udaddy: 10 UD services resolved at once through SIDR
	// (SIDR_REQs and SIDR_REPs crossing), then 10 datagrams of 100 bytes
	// (its defaults) each way on every one. UD is unreliable, but the
	// tap loses nothing: a lost datagram would hang both sides.
	{Name: "udaddy", Binary: "udaddy", Family: CM, Exchange: UdaddySends, Transports: []Transport{UD},
		Iters: udaddy.DefaultCount, FixedSizes: []int{udaddy.DefaultSize}, Extra: []string{"-c", "10"},
		Port: udaddy.Port, FixedPort: true, IPv6Sizes: []int{udaddy.DefaultSize}},
	// librdmacm's cmtime: 50 RC connections set up step by step (REQs,
	// REPs and RTUs of all at once) and disconnected; 56 makes them three
	// times (a warm-up of one, 50 with QPs, 50 without). No data: size 0.
	// No IPv6 case: rdma-core 56's cmtime resolves its out-of-band socket
	// for IPv4 only ("getaddrinfo error: Address family for hostname not
	// supported" for -b 2001:db8:1::2 on trixie).
	{Name: "cmtime", Binary: "cmtime", Family: CM, Exchange: CmtimeConnects, Transports: []Transport{RC},
		Iters: 1, FixedSizes: []int{0}, Extra: []string{"-c", "50"}, Port: cmtime.DefaultPort},
}

// ToolByName finds a tool by roced command or real program name.
func ToolByName(name string) (*Tool, bool) {
	for _, t := range Tools {
		if t.Name == name || t.Binary == name || name != "" && (t.ClientName == name || t.ClientBinary == name) {
			return t, true
		}
	}
	return nil, false
}

// LargeSize is the several-MTU message size.
const LargeSize = 64 << 10

// AtomicSize is what an atomic operation moves.
const AtomicSize = 8

// Scenario is one command line pair: a tool, a transport, a message size
// and extra flags. Both sides get the same flags except the device, the
// GID index and the server operand.
type Scenario struct {
	Tool      *Tool     // the program pair
	Transport Transport // RC, UC, UD
	Size      int       // message size in bytes (-s)
	Iters     int       // iterations (-n)
	MTU       int       // path MTU in bytes (-m), 0: the tool's default
	Flags     []string  // the tool's Extra and the variant's flags
	// IPv6 runs the scenario between the sides' IPv6 addresses (Side.Addr6).
	IPv6 bool
}

// Name identifies the scenario: tool/transport/size[/flags], e.g.
// "send_bw/UD/s1024" or "atomic_lat/RC/s8/A=CMP_AND_SWAP".
func (s Scenario) Name() string {
	n := fmt.Sprintf("%s/%s/s%d", s.Tool.Name, s.Transport, s.Size)
	if v := variantLabel(s.Flags); v != "" {
		n += "/" + v
	}
	if s.IPv6 {
		n += "/ipv6"
	}
	return n
}

// ViaCM reports whether the scenario connects through the RDMA CM: a tool
// of the CM family, or perftest's -R. Its server then listens on QP1, not
// on a TCP socket.
func (s Scenario) ViaCM() bool {
	if s.Tool.Family == CM {
		return true
	}
	for _, f := range s.Flags {
		if f == "-R" {
			return true
		}
	}
	return false
}

// Bidir reports whether the scenario is perftest's -b: both sides send,
// and both measure.
func (s Scenario) Bidir() bool { return slices.Contains(s.Flags, "-b") }

// variantLabel names the flags that are not the tool's defaults for every
// scenario (-c, -q 4 are in every name of the tool, so they are left out).
func variantLabel(flags []string) string {
	var parts []string
	for i := 0; i < len(flags); i++ {
		f := flags[i]
		switch {
		case f == "-A" && i+1 < len(flags):
			parts = append(parts, "A="+flags[i+1])
			i++
		case f == "-R":
			parts = append(parts, "R")
		case f == "-b":
			parts = append(parts, "b")
		}
	}
	return strings.Join(parts, ",")
}

// Args are the flags both sides share, in the order the lab's reference
// runs use: size, iterations, MTU, transport, then the extra flags. rping
// shares -v, its count and its size (the MTU is the CM's to choose).
func (s Scenario) Args() []string {
	if s.Tool.Family == CM {
		switch s.Tool.Exchange {
		case ExampleSends, CmtimeConnects:
			return s.Flags // nothing to choose: one 16-byte SEND each way; cmtime's -c
		case CmatoseSends, UdaddySends:
			return append([]string{"-C", strconv.Itoa(s.Iters), "-S", strconv.Itoa(s.Size)}, s.Flags...)
		}
		return append([]string{"-v", "-C", strconv.Itoa(s.Iters), "-S", strconv.Itoa(s.Size)}, s.Flags...)
	}
	var a []string
	if !s.Tool.Atomic {
		a = append(a, "-s", strconv.Itoa(s.Size))
	}
	a = append(a, "-n", strconv.Itoa(s.Iters))
	// ibv_ud_pingpong has no -m: its messages must fit the port MTU.
	if s.Tool.Name != "ud_pingpong" {
		a = append(a, "-m", strconv.Itoa(s.MTU))
	}
	if s.Tool.Family == Perftest {
		if s.Transport != RC {
			a = append(a, "-c", string(s.Transport))
		}
		// -F: no cpufreq warning (a virtual CPU has no scaling driver).
		a = append(a, "-F")
	}
	return append(a, s.Flags...)
}

// Sizes are the message sizes for a transport at a path MTU: one byte,
// exactly one MTU, one byte over (a second packet of one byte) and several
// MTUs; UD messages stop at one MTU.
func Sizes(t *Tool, tr Transport, mtu int) []int {
	switch {
	case len(t.FixedSizes) > 0:
		return t.FixedSizes
	case t.Atomic:
		return []int{AtomicSize}
	case tr == UD:
		return []int{1, mtu}
	}
	return []int{1, mtu, mtu + 1, LargeSize}
}

// Direction says which side is the server.
type Direction int

const (
	// RocedServer: roced listens, the peer's tool connects.
	RocedServer Direction = iota
	// PeerServer: the peer's tool listens, roced connects.
	PeerServer
)

// String returns "roced-server" or "peer-server", what ParseDirections reads.
func (d Direction) String() string {
	if d == RocedServer {
		return "roced-server"
	}
	return "peer-server"
}

// ParseDirections reads "both", "roced-server" or "peer-server".
func ParseDirections(s string) ([]Direction, error) {
	switch s {
	case "both", "":
		return []Direction{RocedServer, PeerServer}, nil
	case "roced-server":
		return []Direction{RocedServer}, nil
	case "peer-server":
		return []Direction{PeerServer}, nil
	}
	return nil, fmt.Errorf("direction %q: want both, roced-server or peer-server", s)
}

// Case is a scenario run in one direction.
type Case struct {
	Scenario
	Dir Direction // which side serves
	// Rep numbers the repetitions of a case run several times (-count);
	// 0 for a single run.
	Rep int
}

// ID is the case's name and direction, unique in a matrix; a repetition
// adds #N.
func (c Case) ID() string {
	id := c.Name() + "@" + c.Dir.String()
	if c.Rep > 0 {
		id += "#" + strconv.Itoa(c.Rep)
	}
	return id
}

// Repeat runs every case n times, one after the other: each run is a case
// of its own, reported and judged alone (a failure is never retried away).
func Repeat(cases []Case, n int) []Case {
	if n <= 1 {
		return cases
	}
	out := make([]Case, 0, len(cases)*n)
	for _, c := range cases {
		for i := 1; i <= n; i++ {
			c.Rep = i
			out = append(out, c)
		}
	}
	return out
}

// MatrixOptions shape the matrix.
type MatrixOptions struct {
	// MTU is the path MTU in bytes given to both sides (-m) and the unit
	// of the sizes: 1024 is what rxe uses on a 1500-byte link.
	MTU int
	// Directions to run each scenario in.
	Directions []Direction
	// Tools restricts the matrix to these tool names; empty: all.
	Tools []string
	// ItersScale multiplies every -n (0 or 1: as in the tool table);
	// perftest's minimum of 5 still holds.
	ItersScale float64
	// IPv6 adds the tools' IPv6Sizes scenarios, for peers whose sides
	// both have an IPv6 address (the lab's, Lab.EnableIPv6).
	IPv6 bool
}

// ValidMTU reports whether n is an InfiniBand MTU.
func ValidMTU(n int) bool {
	switch n {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// Matrix expands the tool table into cases: every tool, transport, size and
// variant, each in every direction asked for.
func Matrix(o MatrixOptions) ([]Case, error) {
	if !ValidMTU(o.MTU) {
		return nil, fmt.Errorf("MTU %d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	dirs := o.Directions
	if len(dirs) == 0 {
		dirs = []Direction{RocedServer, PeerServer}
	}
	want := map[string]bool{}
	for _, n := range o.Tools {
		t, ok := ToolByName(n)
		if !ok {
			return nil, fmt.Errorf("no tool %q (have %s)", n, strings.Join(toolNames(), ", "))
		}
		want[t.Name] = true
	}
	var cases []Case
	for _, t := range Tools {
		if len(want) > 0 && !want[t.Name] {
			continue
		}
		variants := t.Variants
		if len(variants) == 0 {
			variants = [][]string{nil}
		}
		for _, tr := range t.Transports {
			// add makes the scenario of one size with the tool's extra
			// flags and more, in every direction.
			add := func(size int, ipv6 bool, more ...string) {
				sc := Scenario{Tool: t, Transport: tr, Size: size, MTU: o.MTU,
					Iters: iters(t, size, o.MTU, o.ItersScale), IPv6: ipv6,
					Flags: append(append([]string(nil), t.Extra...), more...)}
				for _, d := range dirs {
					cases = append(cases, Case{Scenario: sc, Dir: d})
				}
			}
			for _, size := range Sizes(t, tr, o.MTU) {
				for _, v := range variants {
					add(size, false, v...)
				}
			}
			if o.IPv6 {
				for _, size := range t.IPv6Sizes {
					add(size, true)
				}
			}
			// perftest's -R: RC at the tool's CMSizes, UD at its sizes
			// (UC is not in librdmacm).
			cmSizes := t.CMSizes
			switch {
			case tr == UD && t.CMUD:
				cmSizes = Sizes(t, tr, o.MTU)
			case tr != RC:
				cmSizes = nil
			}
			for _, size := range cmSizes {
				add(size, false, "-R")
			}
			if tr == RC {
				for _, size := range t.BidirSizes {
					add(size, false, "-b")
				}
			}
		}
	}
	return cases, nil
}

func iters(t *Tool, size, mtu int, scale float64) int {
	n := t.Iters
	if size > mtu+1 && t.ItersLarge > 0 {
		n = t.ItersLarge
	}
	if scale > 0 {
		n = int(float64(n)*scale + 0.5)
	}
	// perftest refuses fewer than 5 iterations; a pingpong needs one.
	min := 1
	if t.Family == Perftest {
		min = 5
	}
	if n < min {
		n = min
	}
	return n
}

func toolNames() []string {
	var n []string
	for _, t := range Tools {
		n = append(n, t.Name)
	}
	sort.Strings(n)
	return n
}
