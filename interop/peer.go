package interop

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
)

// Side is one end of every case: where its commands run and how its
// command line differs from the other end's.
type Side struct {
	// Who names the implementation for reports: "roced", "rxe0", "mlx5_0".
	Who    string
	Runner Runner // where the side's commands run (locally, over ssh, printed)
	// Roced is the roced binary on this side; empty: the real tools.
	Roced string
	// Dev is -d: an IB device for the real tools, a local address for roced.
	Dev string
	// GID is -g (pingpongs) or -x (perftest); negative: not given.
	GID int
	// Addr is what the other side connects to when this side serves.
	Addr string
	// Addr6 is the side's IPv6 address, for the IPv6 scenarios; empty:
	// it has none.
	Addr6 string
	// Strict sides must print finite figures. Real tools in a TCG guest
	// are not held to that: their clock calibration gives inf and nan
	// (perftest under qemu, see the lab README), which is no interop fault.
	Strict bool
	// Extra flags only this side gets (roced's --link, say).
	Extra []string
	// QPTimeout is the real perftest tools' -u on this side, the RC
	// local ACK timeout (4.096 us * 2^T); 0 leaves the tools' own (14).
	QPTimeout int
	// Prefix goes before each of this side's command lines: env with
	// LD_PRELOAD for the real tools over bin/libgoroce.so.
	Prefix []string
	// RdmaCore is the rdma-core release of the real tools of the case
	// ("44", "56"; empty: unknown), where a tool's exchange changed
	// across releases (cmtime): a roced client is told to speak it.
	RdmaCore string
	// CMWaiter, when set, sees this side's CM listeners, which live in
	// its processes (the real tools on libgoroce.so), where its Runner's
	// rdma(8) cannot: waitServer asks it rather than the Runner.
	CMWaiter CMListenWaiter
}

// Argv is this side's command line for a scenario; server is the host
// operand of a client, empty for a server.
func (s Side) Argv(sc Scenario, port int, server string) []string {
	if sc.Tool.Family == CM {
		return append(append([]string(nil), s.Prefix...), s.cmArgv(sc, port, server)...)
	}
	a := append([]string(nil), s.Prefix...)
	if s.Roced != "" {
		a = append(a, s.Roced, sc.Tool.Name)
	} else {
		a = append(a, sc.Tool.Binary)
	}
	if s.Dev != "" {
		a = append(a, "-d", s.Dev)
	}
	if s.GID >= 0 {
		a = append(a, sc.Tool.GIDFlag(), strconv.Itoa(s.GID))
	}
	a = append(a, sc.Args()...)
	if port != 0 && port != DefaultPort {
		a = append(a, "-p", strconv.Itoa(port))
	}
	a = append(a, s.Extra...)
	if s.Roced == "" && s.QPTimeout > 0 && sc.Tool.Family == Perftest {
		a = append(a, "-u", strconv.Itoa(s.QPTimeout))
	}
	if server != "" {
		a = append(a, server)
	}
	return a
}

// cmArgv is a CM tool's command line. rping has no device or GID flag (its -d
// is debug output): a server binds its own address (-a Addr), a client
// connects to server's (-a) from its own (-I Addr), and the connection
// manager finds the device and GID from the addresses. The port is always
// given: a case's port is its own, never rping's default 7174. Of roced's
// extra flags only --link and --pcap are rping's; --qp-timeout is the
// pingpongs' and perftest's (rping's ACK timeout is the CM's to set).
func (s Side) cmArgv(sc Scenario, port int, server string) []string {
	s.Addr = s.AddrFor(sc)
	a := []string{sc.Tool.Command(server == "", s.Roced != "")}
	if s.Roced != "" {
		a = []string{s.Roced, a[0]}
	}
	if port == 0 {
		port = DefaultPort
	}
	switch {
	case sc.Tool.Exchange == CmatoseSends, sc.Tool.Exchange == UdaddySends, sc.Tool.Exchange == CmtimeConnects:
		// ucmatose, udaddy, cmtime: -b binds this side's address on
		// either side, -s is the client's server; udaddy's port is fixed
		// (7174), it has no -p. A roced cmtime client speaks the peer's
		// release (a roced server tells it from what comes first).
		if server != "" {
			a = append(a, "-s", server)
		}
		if s.Addr != "" {
			a = append(a, "-b", s.Addr)
		}
		if !sc.Tool.FixedPort {
			a = append(a, "-p", strconv.Itoa(port))
		}
		a = append(a, sc.Args()...)
		if sc.Tool.Exchange == CmtimeConnects && s.Roced != "" && server != "" && s.RdmaCore != "" {
			a = append(a, "--rdma-core", s.RdmaCore)
		}
	case sc.Tool.Exchange == ExampleSends:
		// rdma_server -s binds its address; rdma_client -s names the
		// server's and has no source address (the route chooses), but
		// roced's takes goroce's --dev.
		if server != "" {
			a = append(a, "-s", server)
			if s.Roced != "" && s.Addr != "" {
				a = append(a, "--dev", s.Addr)
			}
		} else if s.Addr != "" {
			a = append(a, "-s", s.Addr)
		}
		a = append(a, "-p", strconv.Itoa(port))
		a = append(a, sc.Args()...)
	default:
		if server == "" {
			a = append(a, "-s")
			if s.Addr != "" {
				a = append(a, "-a", s.Addr)
			}
		} else {
			a = append(a, "-c", "-a", server)
			if s.Addr != "" {
				a = append(a, "-I", s.Addr)
			}
		}
		a = append(a, "-p", strconv.Itoa(port))
		a = append(a, sc.Args()...)
		if server != "" {
			a = append(a, "-V") // the client checks the echo
		}
	}
	for i := 0; i < len(s.Extra); i++ {
		switch f := s.Extra[i]; {
		case strings.HasPrefix(f, "--qp-timeout"):
			if f == "--qp-timeout" {
				i++ // its value
			}
		default:
			a = append(a, f)
		}
	}
	return a
}

// AddrFor is the side's address for the scenario: Addr6 over IPv6.
func (s Side) AddrFor(sc Scenario) string {
	if sc.IPv6 {
		return s.Addr6
	}
	return s.Addr
}

// DefaultPort is the TCP port of both tool families.
const DefaultPort = 18515

// Peer is what roced is tested against: the side under test (normally
// roced) and the reference side, with optional setup and packet capture.
type Peer struct {
	Name string // the -peer name: "roced", "lab", "remote"
	// Subject is the side under test, Ref the reference implementation.
	Subject, Ref Side
	// Info describes the environment for the report.
	Info map[string]string
	// Lab, when set, captures each case on the tap (if Lab.Capture).
	Lab *Lab
	// Path, when set, impairs the path between roced and the lab's tap
	// (ImpairedPath), one seeded forwarder per case.
	Path *ImpairedPath
}

// SelfPeer is goroce against itself over loopback: two roced processes
// on two loopback addresses. No privilege, no VM, any machine.
func SelfPeer(roced, addrA, addrB string, extra []string) *Peer {
	mk := func(addr string) Side {
		return Side{Who: "roced", Runner: LocalRunner(), Roced: roced, Dev: addr, GID: 1, Addr: addr,
			Strict: true, Extra: extra}
	}
	return &Peer{Name: "self", Subject: mk(addrA), Ref: mk(addrB),
		Info: map[string]string{"subject_addr": addrA, "ref_addr": addrB}}
}

// LabPeer is roced (in the tap's namespace on this host) against the real
// tools on the guest's rxe0. dev is roced's -d; empty: the tap's address.
// qpTimeout is the real perftest tools' -u (roced's --qp-timeout, among
// extra); 0 leaves theirs.
func LabPeer(ctx context.Context, l *Lab, roced, dev string, extra []string, qpTimeout int) *Peer {
	if dev == "" {
		// -d with an address gives roced rxe's GID table shape over that
		// address (index 0 link-local, 1 the address), so -g 1 means on
		// both sides what it means on rxe.
		dev = l.HostAddr
	}
	rc := suiteRdmaCore[l.Suite]
	// rxe's perftest gets roced's ACK timeout: its own 67 ms is shorter
	// than the emulated guest's own backlog (a bidirectional 64 KiB
	// write_bw's packets reached the guest's stack up to 111 ms after they
	// left the tap, roced in either mode, 2026-12-07). rxe's timer then
	// fired with the ACKs on their way, and its retry on trixie resent
	// the messages one PSN off behind a zero-length WRITE ONLY, which
	// roced NAKed as rxe's responder does (a CI failure of
	// write_bw/RC/s65536/b).
	return &Peer{
		Name: "lab-" + l.Suite,
		Subject: Side{Who: "roced", Runner: l.Host(), Roced: roced, Dev: dev, GID: 1,
			Addr: l.HostAddr, Addr6: l.HostAddr6, Strict: true, Extra: extra, RdmaCore: rc},
		Ref: Side{Who: "rxe0", Runner: l.Guest(), Dev: "rxe0", GID: 1, Addr: l.GuestAddr, Addr6: l.GuestAddr6, RdmaCore: rc,
			QPTimeout: qpTimeout},
		Info: l.Info(ctx),
		Lab:  l,
	}
}

// LibgoroceTools are the matrix's tools whose real programs run over
// bin/libgoroce.so today: the four rdma-core pingpongs, perftest as
// Debian bookworm ships it (4.5, which posts with ibv_post_send; later
// releases need the ibv_wr_* API, not there yet), and librdmacm's tools
// through the library's rdma_* functions.
var LibgoroceTools = []string{"rc_pingpong", "uc_pingpong", "ud_pingpong", "srq_pingpong",
	"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "send_lat",
	"rping", "rdma_server", "ucmatose", "udaddy", "cmtime"}

// LibgoroceCase selects the cases of LibgoroceTools that the libgoroce
// stage runs: every pingpong case, every librdmacm tool's (IPv6 ones
// too), and perftest's over RC at 64 KiB (atomics: 8 bytes,
// fetch-and-add), which exercise the library's verbs without the
// matrix's whole perftest set (the engine behind it is the same as
// roced's, which the matrix covers).
//
// Not perftest's -R ones (-run '/R@' runs them): perftest makes its data
// connection's listener only after the exchange before it, so whichever
// side is slower to get there decides the case. A client that comes
// first meets REJ 8, and perftest's client (4.5 on the host and on
// bookworm, 6.x on trixie) then retries on the cm_ids it has just
// destroyed: a general protection fault in rdma_resolve_addr, in
// libgoroce.so on the host as in librdmacm in the guest, whatever the
// library does.
func LibgoroceCase(c Case) bool {
	switch {
	case c.Tool.Family == Pingpong, c.Tool.Family == CM:
		return true
	case c.Tool.Family != Perftest || c.Transport != RC || c.ViaCM():
		return false
	case c.Tool.Atomic:
		return strings.Contains(c.Name(), "FETCH")
	}
	return c.Size == LargeSize
}

// LibgoroceSkip says why the libgoroce stage cannot run c against p's
// guest, or "": cmtime's exchange changed between rdma-core releases
// (56 synchronises over a TCP socket 44 has not), so the host's cmtime
// and the guest's talk only when they are of one release.
func LibgoroceSkip(c Case, p *Peer) string {
	if c.Tool.Exchange == CmtimeConnects && c.Tool.Family == CM && p.Subject.RdmaCore != p.Ref.RdmaCore {
		return fmt.Sprintf("the host's cmtime (rdma-core %s) and the guest's (rdma-core %s) speak different exchanges",
			orUnknown(p.Subject.RdmaCore), orUnknown(p.Ref.RdmaCore))
	}
	return ""
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// LibgoroceLabPeer is the host's own real tools over lib (bin/libgoroce.so,
// preloaded, GOROCE_NETDEV the tap: device goroce0 with rxe's GID table
// shape) against the same tools on the guest's rxe0. The side under test
// is libgoroce: "roced-server" in a case's ID means it serves. Its CM
// listeners are seen through the stats sockets of its processes
// (StatsCMWaiter); hostRdmaCore is the release of the host's tools.
func LibgoroceLabPeer(ctx context.Context, l *Lab, lib, hostRdmaCore string) *Peer {
	p := LabPeer(ctx, l, "", "", nil, 0)
	p.Name = "lab-libgoroce-" + l.Suite
	p.Subject = Side{Who: "libgoroce", Runner: l.Host(), Dev: "goroce0", GID: 1, Addr: l.HostAddr, Addr6: l.HostAddr6,
		Strict: true, Prefix: []string{"env", "LD_PRELOAD=" + lib, "GOROCE_NETDEV=" + l.Tap},
		RdmaCore: hostRdmaCore, CMWaiter: StatsCMWaiter{Netdev: l.Tap}}
	p.Info["subject"] = "the host's real tools over " + lib
	p.Info["subject_rdma_core"] = hostRdmaCore
	return p
}

// HostRdmaCore is the rdma-core release of this host's librdmacm tools
// (Debian's rdmacm-utils: "44" of 44.0-2), "" if dpkg does not know it.
func HostRdmaCore() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "rdmacm-utils").Output()
	if err != nil {
		return ""
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
	if _, err := strconv.Atoi(v); err != nil {
		return ""
	}
	return v
}

// StatsCMWaiter sees the CM listeners of roced's tools and of the
// programs on libgoroce.so on Netdev: each such process lists its
// listening cm_ids on its stats socket (endpoint.CMID, what "roced stats"
// prints), as rdma(8) lists the kernel's.
type StatsCMWaiter struct {
	// Netdev is the interface the device is on (the library's
	// GOROCE_NETDEV); empty: any.
	Netdev string
	// Addrs, if any, are the server's addresses: a listener bound to
	// another (another process's on the same port) is not the one.
	// One bound to the unspecified address is anyone's.
	Addrs []string
}

// WaitCMListen returns once a process lists a LISTEN cm_id on port of a
// device on w.Netdev.
func (w StatsCMWaiter) WaitCMListen(ctx context.Context, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond) // the poll interval
	defer t.Stop()
	for {
		if all, err := endpoint.AllStats(0); err == nil && w.listensOn(all, port) {
			return nil
		}
		select {
		case <-ctx.Done():
			on := "port " + strconv.Itoa(port)
			if w.Netdev != "" {
				on = w.Netdev + " " + on
			}
			return fmt.Errorf("nothing listened on %s within %v (roced stats)", on, timeout)
		case <-t.C:
		}
	}
}

// boundTo reports whether addr is one of w.Addrs, or w names none (empty
// entries, a side with no address of that family, do not count).
func (w StatsCMWaiter) boundTo(addr netip.Addr) bool {
	named := false
	for _, a := range w.Addrs {
		if a == "" {
			continue
		}
		named = true
		if want, err := netip.ParseAddr(a); err == nil && want.Unmap() == addr.Unmap() {
			return true
		}
	}
	return !named
}

// listensOn reports whether a process lists a LISTEN cm_id on port, of
// a device on w.Netdev, bound to one of w.Addrs or to any address.
func (w StatsCMWaiter) listensOn(all []endpoint.StatsReply, port int) bool {
	for _, r := range all {
		for _, c := range r.CMIDs {
			ap, err := netip.ParseAddrPort(c.Src)
			if err != nil || c.State != "LISTEN" || w.Netdev != "" && c.Netdev != w.Netdev || int(ap.Port()) != port {
				continue
			}
			if ap.Addr().IsUnspecified() || w.boundTo(ap.Addr()) {
				return true
			}
		}
	}
	return false
}

// suiteRdmaCore is the rdma-core release of each lab guest: Debian's in
// that suite (bookworm 44.0, trixie 56.1), which lab/rxe-peer.sh installs.
var suiteRdmaCore = map[string]string{"bookworm": "44", "trixie": "56"}

// ImpairedLabPeer is LabPeer with roced behind path (built already):
// roced runs in the path's namespace on its address.
func ImpairedLabPeer(ctx context.Context, l *Lab, path *ImpairedPath, roced string, extra []string, qpTimeout int) *Peer {
	p := LabPeer(ctx, l, roced, path.RocedAddr, extra, qpTimeout)
	p.Subject.Runner, p.Subject.Addr = path.Runner(), path.RocedAddr
	p.Path = path
	f := path.Faults
	p.Info["impair"] = fmt.Sprintf("both directions: loss %g, reorder %g (held %v), base seed %#x; roced %s in netns %s, forwarder in netns %s",
		f.Loss, f.Reorder, f.ReorderDelay, path.Seed, path.RocedAddr, path.RocedNS, path.MiddleNS)
	return p
}

// LabPairPeer runs the real tools on both ends inside the guest (rxeA
// against rxeB over a veth pair): the harness's own check, and the
// reference figures, with no roced involved.
func LabPairPeer(ctx context.Context, l *Lab) (*Peer, error) {
	if err := l.Pair(ctx); err != nil {
		return nil, fmt.Errorf("creating rxeA/rxeB in the guest: %w", err)
	}
	p := pairPeer(l)
	p.Info = l.Info(ctx)
	p.Info["subject"], p.Info["ref"] = "rxeA ("+pairAddrA+")", "rxeB ("+pairAddrB+")"
	return p, nil
}

// The addresses of the guest's vethA and vethB (guest/rxe-pair.sh).
const (
	pairAddrA = "198.51.100.1"
	pairAddrB = "198.51.100.2"
)

// pairPeer is LabPairPeer without the set-up and the report's details.
func pairPeer(l *Lab) *Peer {
	g := l.Guest()
	return &Peer{
		Name:    "lab-pair-" + l.Suite,
		Subject: Side{Who: "rxeA", Runner: g, Dev: "rxeA", GID: 1, Addr: pairAddrA, RdmaCore: suiteRdmaCore[l.Suite]},
		Ref:     Side{Who: "rxeB", Runner: g, Dev: "rxeB", GID: 1, Addr: pairAddrB, RdmaCore: suiteRdmaCore[l.Suite]},
	}
}

// RemoteConfig names a host with a real HCA.
type RemoteConfig struct {
	// Host is the ssh destination ([user@]host) or, with Print, just a name.
	Host string
	// Addr is the HCA's IP address roced talks to (default: Host's).
	Addr string
	// Dev and GID are the peer tools' -d and -g/-x (mlx5_0, 3).
	Dev string
	GID int // see Dev
	// SSHOpts are extra ssh options (-i key, -p port).
	SSHOpts []string
	// Print prints the peer's commands instead of running them over ssh.
	Print *PrintRunner
	// LocalDev is roced's -d; default: the local address that routes to Addr.
	LocalDev string
}

// RemotePeer is roced on this host against the real tools on a remote
// host, run over ssh or by hand.
func RemotePeer(roced string, rc RemoteConfig, extra []string) (*Peer, error) {
	if rc.Host == "" {
		return nil, fmt.Errorf("remote peer: --peer-host is required")
	}
	addr := rc.Addr
	if addr == "" {
		h := rc.Host
		if i := strings.LastIndex(h, "@"); i >= 0 {
			h = h[i+1:]
		}
		ips, err := net.LookupHost(h)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("remote peer: cannot resolve %s (give --peer-addr): %v", h, err)
		}
		addr = ips[0]
	}
	local := rc.LocalDev
	if local == "" {
		// A UDP "connect" picks the source address the kernel would use
		// towards the peer, without sending anything.
		c, err := net.Dial("udp", net.JoinHostPort(addr, "4791"))
		if err != nil {
			return nil, fmt.Errorf("remote peer: no route to %s: %v", addr, err)
		}
		local = c.LocalAddr().(*net.UDPAddr).IP.String()
		c.Close()
	}
	var run Runner = SSHRunner(rc.Host, rc.SSHOpts)
	if rc.Print != nil {
		rc.Print.Name = rc.Host
		run = rc.Print
	}
	who := rc.Dev
	if who == "" {
		who = "peer"
	}
	return &Peer{
		Name:    "remote-" + rc.Host,
		Subject: Side{Who: "roced", Runner: LocalRunner(), Roced: roced, Dev: local, GID: 1, Addr: local, Strict: true, Extra: extra},
		Ref:     Side{Who: who, Runner: run, Dev: rc.Dev, GID: rc.GID, Addr: addr, Strict: true},
		Info: map[string]string{"peer_host": rc.Host, "peer_addr": addr, "peer_dev": rc.Dev,
			"peer_gid": strconv.Itoa(rc.GID), "roced_addr": local},
	}, nil
}
