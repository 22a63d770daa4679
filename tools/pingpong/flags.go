package pingpong

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/tools/internal/getopt"
)

// Link names how roced reaches the wire (a goroce-only flag).
type Link string

// The links.
const (
	LinkUDP      Link = "udp"
	LinkAFPacket Link = "afpacket"
	LinkAFXDP    Link = "afxdp"
)

// ParseLink validates a --link value.
func ParseLink(s string) (Link, error) {
	switch l := Link(s); l {
	case LinkUDP, LinkAFPacket, LinkAFXDP:
		return l, nil
	}
	return "", fmt.Errorf("invalid --link %q: want udp, afpacket or afxdp", s)
}

// Config is one tool's command line with the real tool's defaults
// (rdma-core 44/56).
type Config struct {
	Tool Tool // which program
	// ServerName is the host operand; empty means this side is the server.
	ServerName string

	Port     int    // -p, --port (18515)
	IBPort   int    // -i, --ib-port (1)
	Size     uint32 // -s, --size (4096; ud 1024)
	MTU      int    // -m, --mtu in bytes (1024); not ud
	RxDepth  uint32 // -r, --rx-depth (500)
	Iters    uint32 // -n, --iters (1000; srq: per QP)
	SL       int    // -l, --sl (0)
	Events   bool   // -e, --events: sleep on CQ events instead of polling
	GIDIndex int    // -g, --gid-idx (-1: no GID, LID routing)
	NumQP    uint32 // -q, --num-qp (srq only, 16)

	ODP        bool // -o, --odp (rc, srq)
	ImplicitOD bool // -O, --iodp (rc)
	Prefetch   bool // -P, --prefetch (rc)
	Timestamps bool // -t, --ts (rc)
	Check      bool // -c, --chk: validate received buffer
	DM         bool // -j, --dm: device memory (rc)
	NewSend    bool // -N, --new_send: new post send WR API (rc)

	// Device is -d. The real tools take an IB device name there; roced
	// takes the local interface or IP address to use. Empty means: the
	// interface that routes to the peer, or loopback for a server that has
	// no peer yet (resolved by the command layer).
	Device string
	// Link is goroce's --link (udp, afpacket or afxdp; default udp).
	Link Link
	// Pcap is goroce's --pcap FILE: every RoCEv2 frame sent and received
	// is written there.
	Pcap string
	// Faults are goroce's fault flags (--loss, --fault-rule...).
	Faults fault.Config
	// QPTimeout is goroce's --qp-timeout T: the RC local ACK timeout,
	// 4.096 us * 2^T. The real tools hard-code 14 (67 ms); 0 means that.
	// perftest's -u is the same knob.
	QPTimeout int
}

// IsServer reports whether this side waits for a client.
func (c Config) IsServer() bool { return c.ServerName == "" }

// ErrUsage is returned (wrapped) for command lines the real tool answers
// with its usage text and exit status 1.
var ErrUsage = errors.New("usage")

func options(t Tool) []getopt.Option {
	opts := []getopt.Option{
		{Short: 'p', Long: "port", Arg: getopt.RequiredArg},
		{Short: 'd', Long: "ib-dev", Arg: getopt.RequiredArg},
		{Short: 'i', Long: "ib-port", Arg: getopt.RequiredArg},
		{Short: 's', Long: "size", Arg: getopt.RequiredArg},
		{Short: 'r', Long: "rx-depth", Arg: getopt.RequiredArg},
		{Short: 'n', Long: "iters", Arg: getopt.RequiredArg},
		{Short: 'l', Long: "sl", Arg: getopt.RequiredArg},
		{Short: 'e', Long: "events", Arg: getopt.NoArg},
		{Short: 'g', Long: "gid-idx", Arg: getopt.RequiredArg},
		{Short: 'c', Long: "chk", Arg: getopt.NoArg},
		{Long: "link", Arg: getopt.RequiredArg},       // goroce
		{Long: "pcap", Arg: getopt.RequiredArg},       // goroce
		{Long: "qp-timeout", Arg: getopt.RequiredArg}, // goroce
	}
	for _, l := range fault.Flags { // goroce
		opts = append(opts, getopt.Option{Long: l, Arg: getopt.RequiredArg})
	}
	if t != UD {
		opts = append(opts, getopt.Option{Short: 'm', Long: "mtu", Arg: getopt.RequiredArg})
	}
	switch t {
	case RC:
		opts = append(opts,
			getopt.Option{Short: 'o', Long: "odp", Arg: getopt.NoArg},
			getopt.Option{Short: 'O', Long: "iodp", Arg: getopt.NoArg},
			getopt.Option{Short: 'P', Long: "prefetch", Arg: getopt.NoArg},
			getopt.Option{Short: 't', Long: "ts", Arg: getopt.NoArg},
			getopt.Option{Short: 'j', Long: "dm", Arg: getopt.NoArg},
			getopt.Option{Short: 'N', Long: "new_send", Arg: getopt.NoArg})
	case SRQ:
		opts = append(opts,
			getopt.Option{Short: 'q', Long: "num-qp", Arg: getopt.RequiredArg},
			getopt.Option{Short: 'o', Long: "odp", Arg: getopt.NoArg})
	}
	return opts
}

// Defaults returns the real tool's defaults, plus goroce's --link udp.
func Defaults(t Tool) Config {
	c := Config{
		Tool: t, Port: DefaultPort, IBPort: 1, Size: 4096, MTU: 1024,
		RxDepth: 500, Iters: 1000, GIDIndex: -1, Link: LinkUDP,
	}
	if t == UD {
		// ud_pingpong's usage text says 2048, but its code starts at 1024
		// (rdma-core 44 and 56: "-n 2" without -s moves 4096 bytes).
		c.Size, c.MTU = 1024, 0
	}
	if t == SRQ {
		c.NumQP = 16
	}
	return c
}

// mtuBytes accepts what pp_mtu_to_enum accepts.
func mtuBytes(v int64) bool {
	switch v {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// ParseFlags parses args (without the program name) as tool would. Numbers
// are read like the C code's strtol(optarg, NULL, 0): hex with 0x, octal
// with a leading 0, and trailing garbage ignored; the range checks are the
// tool's own. Errors the tool answers with its usage text wrap ErrUsage.
func ParseFlags(tool Tool, args []string) (Config, error) {
	c := Defaults(tool)
	found, operands, err := getopt.Parse(args, options(tool))
	if err != nil {
		return c, fmt.Errorf("%s: %w: %w", tool.Binary(), ErrUsage, err)
	}
	usage := func(why string) (Config, error) {
		return c, fmt.Errorf("%s: %w: %s", tool.Binary(), ErrUsage, why)
	}
	for _, m := range found {
		n, ok := getopt.Strtol(m.Value)
		// strtol reads "abc" as 0, which the C tools take silently (-n abc
		// left a server waiting forever): a number flag with no digit is
		// refused instead.
		if m.Option.Short != 0 && m.Option.Short != 'd' && m.Option.Arg == getopt.RequiredArg && !ok {
			return usage(fmt.Sprintf("-%c %q: not a number", m.Option.Short, m.Value))
		}
		// The C tools keep these in unsigned ints, where strtol's value
		// wraps silently (-s 99999999999 became 1215752191 bytes): refuse
		// what does not fit instead.
		if strings.IndexByte("snrq", m.Option.Short) >= 0 && (n < 0 || n > math.MaxUint32) {
			return usage(fmt.Sprintf("-%c %s out of range (0 to %d)", m.Option.Short, m.Value, uint32(math.MaxUint32)))
		}
		switch m.Option.Short {
		case 'p':
			if n < 0 || n > 65535 {
				return usage(fmt.Sprintf("port %s out of range", m.Value))
			}
			c.Port = int(n)
		case 'd':
			c.Device = m.Value
		case 'i':
			if n < 1 {
				return usage(fmt.Sprintf("ib-port %s < 1", m.Value))
			}
			c.IBPort = int(n)
		case 's':
			c.Size = uint32(n)
			if tool == SRQ && c.Size < 1 {
				return usage("size < 1")
			}
		case 'm':
			if !mtuBytes(n) {
				return usage(fmt.Sprintf("invalid MTU %s (256, 512, 1024, 2048 or 4096)", m.Value))
			}
			c.MTU = int(n)
		case 'r':
			c.RxDepth = uint32(n)
		case 'n':
			c.Iters = uint32(n)
		case 'l':
			c.SL = int(n)
		case 'e':
			c.Events = true
		case 'g':
			c.GIDIndex = int(n)
		case 'q':
			c.NumQP = uint32(n)
		case 'c':
			c.Check = true
		case 'o':
			c.ODP = true
		case 'O':
			c.ImplicitOD = true
		case 'P':
			c.Prefetch = true
		case 't':
			c.Timestamps = true
		case 'j':
			c.DM = true
		case 'N':
			c.NewSend = true
		case 0: // long-only goroce options
			switch m.Option.Long {
			case "link":
				l, err := ParseLink(m.Value)
				if err != nil {
					return c, fmt.Errorf("%s: %w", tool.Binary(), err)
				}
				c.Link = l
			case "pcap":
				c.Pcap = m.Value
			case "qp-timeout":
				t, err := strconv.Atoi(m.Value)
				if err != nil || t < 1 || t > 31 {
					return c, fmt.Errorf("%s: --qp-timeout %q: want 1 to 31 (4.096 us * 2^T)", tool.Binary(), m.Value)
				}
				c.QPTimeout = t
			default:
				if err := c.Faults.SetFlag(m.Option.Long, m.Value); err != nil {
					return c, fmt.Errorf("%s: %w", tool.Binary(), err)
				}
			}
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		c.ServerName = operands[0]
	default:
		return usage("more than one host: " + strings.Join(operands, " "))
	}
	if tool == SRQ {
		// The tool's own checks and words, in its order.
		if c.NumQP > c.RxDepth {
			return c, fmt.Errorf("%s: rx_depth %d is too small for %d QPs -- must have at least one receive per QP.", tool.Binary(), c.RxDepth, c.NumQP)
		}
		if c.NumQP >= MaxQP {
			return c, fmt.Errorf("%s: num_qp %d must be less than %d", tool.Binary(), c.NumQP, MaxQP-1)
		}
		// The C tool runs with no QP and waits forever; refuse instead.
		if c.NumQP < 1 {
			return c, fmt.Errorf("%s: -q %d: at least one QP", tool.Binary(), c.NumQP)
		}
	}
	return c, nil
}
