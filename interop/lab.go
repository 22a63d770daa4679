package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Lab drives the rxe lab (lab/rxe-peer.sh, or RXE_PEER_DIR's): a qemu guest with
// rxe0 and the real tools, linked by a tap whose host side lives in a
// network namespace. Every setting comes from the same RXE_PEER_*
// environment the script reads, so the two agree on the instance.
type Lab struct {
	Dir    string // the lab directory holding rxe-peer.sh
	Script string // rxe-peer.sh's path
	// HostAddr and GuestAddr are the two tap addresses (no prefix length).
	HostAddr, GuestAddr string
	// HostAddr6 and GuestAddr6 are the IPv6 addresses EnableIPv6 gives
	// the tap and the guest's eth0 (the lab itself runs IPv4 only).
	HostAddr6, GuestAddr6 string
	Suite                 string // the guest's Debian suite (bookworm, trixie)
	NetNS, Tap            string // the host-side namespace and tap device
	MTU                   int    // of the tap
	// Capture, when true, records the tap's traffic around each case.
	Capture bool
	// GuestEvidence, when true, records the guest's side of each case too:
	// rxe0's hw_counters and kernel log, and a capture on its eth0, kept
	// for failed cases (guestBaseline, guestCaseEvidence).
	GuestEvidence bool
	session       *guestSession
	lock          *os.File
}

// FindLabDir returns the lab directory: dir if set, else $RXE_PEER_DIR,
// else the repository's own, lab/ under the module root above the working
// directory. It fails with a message saying where it looked.
func FindLabDir(dir string) (string, error) {
	var tried []string
	check := func(d string) (string, bool) {
		tried = append(tried, d)
		if st, err := os.Stat(filepath.Join(d, "rxe-peer.sh")); err == nil && !st.IsDir() {
			a, _ := filepath.Abs(d)
			return a, true
		}
		return "", false
	}
	if dir != "" {
		if d, ok := check(dir); ok {
			return d, nil
		}
	} else if env := os.Getenv("RXE_PEER_DIR"); env != "" {
		if d, ok := check(env); ok {
			return d, nil
		}
	} else if root, err := moduleRoot(); err == nil {
		if d, ok := check(filepath.Join(root, "lab")); ok {
			return d, nil
		}
	}
	if len(tried) == 0 {
		return "", errors.New("rxe lab not found: no -lab, no RXE_PEER_DIR and no module root above the working directory")
	}
	return "", fmt.Errorf("rxe lab not found: no rxe-peer.sh in %s (set RXE_PEER_DIR to a directory holding one)", strings.Join(tried, ", "))
}

// moduleRoot walks up from the working directory to the go.mod.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("no go.mod above the working directory")
		}
		d = up
	}
}

// NewLab describes the lab instance the environment selects.
func NewLab(dir string) *Lab {
	env := func(k, def string) string {
		if v, ok := os.LookupEnv(k); ok {
			return v
		}
		return def
	}
	strip := func(a string) string { return strings.SplitN(a, "/", 2)[0] }
	mtu, err := strconv.Atoi(env("RXE_PEER_MTU", "1500"))
	if err != nil || mtu <= 0 {
		mtu = 1500
	}
	return &Lab{
		Dir:        dir,
		Script:     filepath.Join(dir, "rxe-peer.sh"),
		HostAddr:   strip(env("RXE_PEER_HOST_ADDR", "192.0.2.1/24")),
		GuestAddr:  strip(env("RXE_PEER_GUEST_ADDR", "192.0.2.2/24")),
		HostAddr6:  LabHostAddr6,
		GuestAddr6: LabGuestAddr6,
		Suite:      env("RXE_PEER_SUITE", "bookworm"),
		NetNS:      env("RXE_PEER_NETNS", "rxepeer"),
		Tap:        env("RXE_PEER_TAP", "rxetap0"),
		MTU:        mtu,
	}
}

// Guest runs commands in the VM (rxe-peer.sh exec); while a guest session
// runs it waits for listeners through the agent (guestRunner).
func (l *Lab) Guest() Runner {
	return guestRunner{lab: l, ShellRunner: &ShellRunner{Name: "guest " + l.Suite, Remote: true, Scratch: true, Backstop: 30 * time.Second,
		Wrap: func(s string) []string { return []string{l.Script, "exec", s} }}}
}

// Host runs commands on this host in the tap's namespace, where roced
// reaches the guest: ip netns exec, as rxe-peer.sh host-exec does, without
// the script's own start-up (0.4 s a call under load, against 0.04 s; a
// case makes several).
func (l *Lab) Host() *ShellRunner {
	name := "host netns " + l.NetNS
	if l.NetNS == "" {
		name = "host"
	}
	return &ShellRunner{Name: name, Backstop: 10 * time.Second,
		Wrap: func(s string) []string { return inNetNS(l.NetNS, "sh", "-c", s) }}
}

// inNetNS is argv run in network namespace ns (empty: this one).
func inNetNS(ns string, argv ...string) []string {
	if ns == "" {
		return argv
	}
	return append([]string{"ip", "netns", "exec", ns}, argv...)
}

// hostRun runs argv in the tap's namespace and returns its stdout.
func (l *Lab) hostRun(ctx context.Context, argv ...string) (string, error) {
	w := inNetNS(l.NetNS, argv...)
	cmd := exec.CommandContext(ctx, w[0], w[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %v: %s", strings.Join(w, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// run runs one rxe-peer.sh command and returns its stdout.
func (l *Lab) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, l.Script, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("rxe-peer.sh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Status returns rxe-peer.sh status as key=value pairs; ok false when the
// VM is down or still booting.
func (l *Lab) Status(ctx context.Context) (map[string]string, bool) {
	out, _ := l.run(ctx, "status")
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
	}
	return kv, kv["state"] == "ready"
}

// Up boots the VM unless it is ready (building the image when absent).
// A VM already up must be the suite asked for: rxe-peer.sh up only warns
// when it is not, and a run on the other guest would carry this suite's
// name and expectations (its rdma-core, its published verdicts).
func (l *Lab) Up(ctx context.Context) error {
	if kv, ok := l.Status(ctx); ok {
		if g := kv["guest_os"]; g != "" && g != l.Suite {
			return fmt.Errorf("the lab's running guest is %s, not %s (RXE_PEER_SUITE): bring it down (%s down) or set RXE_PEER_SUITE=%s", g, l.Suite, l.Script, g)
		}
		return nil
	}
	_, err := l.run(ctx, "up")
	return err
}

// Down powers the VM off.
func (l *Lab) Down(ctx context.Context) error {
	_, err := l.run(ctx, "down")
	return err
}

// Info describes the guest for the report: suite, kernel and the
// versions of the packages that hold the tools.
func (l *Lab) Info(ctx context.Context) map[string]string {
	kv, _ := l.Status(ctx)
	info := map[string]string{"lab_dir": l.Dir, "suite": l.Suite,
		"guest_kernel": kv["guest_kernel"], "guest_os": kv["guest_os"],
		"host_addr": l.HostAddr, "guest_addr": l.GuestAddr,
		"host_addr6": l.HostAddr6, "guest_addr6": l.GuestAddr6}
	out, err := l.run(ctx, "exec",
		`dpkg-query -W -f '${Package}=${Version}\n' ibverbs-utils perftest rdma-core 2>/dev/null; ib_write_bw --version 2>/dev/null | sed -n 's/^Version: */perftest_wire=/p'`)
	if err == nil {
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
				info[k] = v
			}
		}
	}
	return info
}

// Lock takes a lock of this lab instance (a file beside its state
// directory) for the process's lifetime, so that two runs never share a
// guest's rxe0 and mix their QPs and listeners. It waits up to wait.
func (l *Lab) Lock(wait time.Duration) error {
	state := os.Getenv("RXE_PEER_STATE")
	if state == "" {
		state = "/tmp/rxe-peer"
	}
	name := strings.TrimRight(state, "/") + ".interop.lock"
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			l.lock = f // held until the process exits
			return nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return fmt.Errorf("another interop run holds %s", name)
		}
		time.Sleep(time.Second)
	}
}

// DefaultTapQueueLen is the transmit queue length the harness gives the
// host side of the tap. qemu under TCG drains the tap far more slowly than
// roced fills it; at the kernel's default of 1000 a send_bw UC burst at
// 64 KiB (16 messages of 64 packets, sent back to back as an HCA sends
// them) overflowed it now and then, the guest never saw the dropped
// packets, UC does not retransmit, and ib_send_bw waited for messages that
// would never come. A switch port buffers such a burst; so does this queue.
const DefaultTapQueueLen = 10000

// SetTapQueueLen sets the transmit queue length of the tap (tun resizes
// its ring in place, so it takes effect on a running VM).
func (l *Lab) SetTapQueueLen(ctx context.Context, n int) error {
	_, err := l.hostRun(ctx, "ip", "link", "set", l.Tap, "txqueuelen", strconv.Itoa(n))
	return err
}

// TapDrops returns how many frames the tap has dropped on their way to
// the guest (its tx_dropped counter).
func (l *Lab) TapDrops(ctx context.Context) (uint64, error) {
	out, err := l.hostRun(ctx, "cat", "/sys/class/net/"+l.Tap+"/statistics/tx_dropped")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(out), 10, 64)
}

// The lab's IPv6 addresses (RFC 3849's documentation prefix, as the IPv4
// ones are TEST-NET-1): each lab instance has its tap in a namespace of
// its own, so every instance can use the same two.
const (
	LabHostAddr6  = "2001:db8:1::1"
	LabGuestAddr6 = "2001:db8:1::2"
)

// EnableIPv6 gives the tap and the guest's eth0 their IPv6 addresses
// (HostAddr6, GuestAddr6; rxe-peer.sh turns IPv6 off on the tap) and
// returns once rxe0's GID table holds the guest's, which rxe adds itself
// for every address of its netdev. Duplicate address detection is
// skipped, so both, and the tap's link-local address, are usable at once.
func (l *Lab) EnableIPv6(ctx context.Context) error {
	// Without duplicate address detection for the link-local address the
	// kernel makes as IPv6 comes on: usable at once, as GID 0 (the UD
	// endpoints of libfabric address their peers by it).
	if _, err := l.hostRun(ctx, "sysctl", "-qw", "net.ipv6.conf."+l.Tap+".accept_dad=0", "net.ipv6.conf."+l.Tap+".disable_ipv6=0"); err != nil {
		return fmt.Errorf("IPv6 on %s: %w", l.Tap, err)
	}
	if _, err := l.hostRun(ctx, "ip", "-6", "addr", "replace", l.HostAddr6+"/64", "dev", l.Tap, "nodad"); err != nil {
		return fmt.Errorf("IPv6 on %s: %w", l.Tap, err)
	}
	// The GID appears within milliseconds; 10 s bounds a guest that
	// never adds it (rxe's GID table is then not what the cases expect).
	script := fmt.Sprintf(`ip -6 addr replace %[1]s/64 dev eth0 nodad || exit 1
for i in $(seq 100); do
  ibv_devinfo -v -d rxe0 | grep -qF '%[1]s, RoCE v2' && exit 0
  sleep 0.1
done
echo "rxe0 has no GID for %[1]s" >&2; exit 1`, l.GuestAddr6)
	if _, err := l.run(ctx, "exec", script); err != nil {
		return fmt.Errorf("IPv6 in the guest: %w", err)
	}
	return nil
}

// Pair creates rxeA and rxeB on a veth pair in the guest (guest/rxe-pair.sh).
func (l *Lab) Pair(ctx context.Context) error {
	script, err := os.ReadFile(filepath.Join(l.Dir, "guest", "rxe-pair.sh"))
	if err != nil {
		return err
	}
	_, err = l.run(ctx, "exec", string(script))
	return err
}

// StartCapture starts tcpdump on the host side of the tap, writing
// RoCEv2 and the tools' TCP exchange on port to dest; Stop on the
// returned Proc ends it (SIGTERM: tcpdump flushes and exits).
//
// The harness runs tcpdump itself rather than through rxe-peer.sh pcap
// start/stop --host: the script's stop signals the background subshell,
// which ignores SIGINT, so tcpdump kept running and every stop waited 5 s.
func (l *Lab) StartCapture(ctx context.Context, dest string, port int) (Proc, error) {
	argv := []string{"tcpdump", "-i", l.Tap, "-n", "-s", strconv.Itoa(l.MTU + 64), "-B", "16384",
		"-U", "--immediate-mode", "-w", dest, fmt.Sprintf("udp port 4791 or tcp port %d", port)}
	p := l.Host().Start(ctx, argv, time.Hour)
	// tcpdump creates the file once the interface is open and filtering.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(dest); err == nil {
			return p, nil
		}
		select {
		case <-p.Done():
			o := p.Wait()
			return nil, fmt.Errorf("tcpdump on %s: exit %d: %s", l.Tap, o.Exit, strings.TrimSpace(o.Stderr))
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.Stop()
	return nil, fmt.Errorf("tcpdump on %s did not start in 10s", l.Tap)
}

// GuestEvidence is the guest's side of a case: rxe0's hw_counters that
// moved, the kernel log lines the case added and, for a failed case, a
// capture taken on the guest's eth0 (what rxe really saw and sent, after
// the tap and virtio, which the host-side capture cannot show).
type GuestEvidence struct {
	Counters map[string]int64 `json:"hw_counters,omitempty"` // after minus before, moved ones only
	Dmesg    []string         `json:"dmesg,omitempty"`       // kernel log lines the case added
	Pcap     string           `json:"guest_pcap,omitempty"`  // the guest capture's file, for a failed case
	Err      string           `json:"error,omitempty"`       // why evidence is missing, if it is
}

// guestSession is the guest's side of a whole run. One tcpdump on eth0
// runs from the first case to the end, and one snapshot of rxe0's
// counters, the kernel log's length and the guest's clock ends each case
// and is the next case's "before" (cases run one after the other). Per
// case tcpdump's start and stop and a second snapshot cost about 2.6 s of
// TCG guest time; a failed case's capture is cut out of the session's by
// the two snapshots' clocks instead.
type guestSession struct {
	last  guestSnap
	agent *guestAgent
}

// guestSnap is one snapshot of the guest.
type guestSnap struct {
	counters map[string]int64
	dmesg    int64
	clock    time.Time // the guest's, the clock its capture stamps packets with
}

// The session capture: a ring of guestRingFiles files of guestRingMB
// (tcpdump -C -W) in the guest's /tmp, a tmpfs in its 1 GiB of memory.
// The largest case moves a few MB; a ring that wrapped within one case is
// reported.
const (
	guestPcap      = "/tmp/goroce-guest.pcap"
	guestRingFiles = 8
	guestRingMB    = 8
)

// guestShell holds the shell functions the guest scripts use. capstart
// (re)starts the session's tcpdump and waits until it listens; capstop
// ends it (SIGINT: it flushes its file). tcpdump buffers (no -U, no
// immediate mode): waking it for every packet slows the TCG guest; -p:
// promiscuous mode would add two kernel log lines. The agent's own
// connection is left out.
func (l *Lab) guestShell() string {
	return fmt.Sprintf(`f=%[1]s
capstop() { local p; p=$(cat $f.pid 2>/dev/null) || return 0; kill -INT $p 2>/dev/null; for i in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.05; done; rm -f $f.pid; }
capstart() { capstop; rm -f $f[0-9]* $f.log; tcpdump -p -i eth0 -n -s %[3]d -B 16384 -C %[4]d -W %[5]d -w $f 'udp port 4791 or (tcp and not port %[2]d)' >$f.log 2>&1 & echo $! >$f.pid; for i in $(seq 200); do grep -q 'listening on' $f.log && return 0; sleep 0.05; done; cat $f.log >&2; return 1; }
`, guestPcap, guestAgentPort, l.MTU+64, guestRingMB, guestRingFiles)
}

// guestBaseline starts the guest's side of the run, once: its agent and
// tcpdump in one round trip (those a previous run left in the guest are
// ended first), then the first snapshot.
func (l *Lab) guestBaseline(ctx context.Context) error {
	if l.session != nil {
		return nil
	}
	if _, err := l.run(ctx, "exec", l.agentStart()+l.guestShell()+"capstart"); err != nil {
		return err
	}
	l.session = &guestSession{}
	a, err := l.agent(ctx)
	if err == nil {
		// From far ahead: the log's records so far are no case's.
		l.session.last, _, err = a.snap(ctx, 1<<53)
	}
	if err != nil {
		l.dropSession()
		return err
	}
	return nil
}

// dropSession forgets the session after a failure: the next case starts
// a new one (agent and capture included).
func (l *Lab) dropSession() {
	if s := l.session; s != nil && s.agent != nil {
		s.agent.conn.Close()
	}
	l.session = nil
}

// guestCaseEvidence ends a case on the guest's side: one snapshot, whose
// difference to the last one is the case's. With keep the case's window of
// the session capture is written to dest: tcpdump is stopped (which
// flushes it), the ring files written since the case began are copied
// through the lab's 9p share, and tcpdump starts again for the next case.
func (l *Lab) guestCaseEvidence(ctx context.Context, dest string, keep bool) *GuestEvidence {
	ev := &GuestEvidence{}
	if l.session == nil {
		ev.Err = "no guest session"
		return ev
	}
	before := l.session.last
	a, err := l.agent(ctx)
	var after guestSnap
	if err == nil {
		after, ev.Dmesg, err = a.snap(ctx, before.dmesg)
	}
	if err != nil {
		ev.Err = err.Error()
		l.dropSession()
		return ev
	}
	l.session.last = after
	for k, v := range after.counters {
		if d := v - before.counters[k]; d != 0 {
			if ev.Counters == nil {
				ev.Counters = map[string]int64{}
			}
			ev.Counters[k] = d
		}
	}
	if !keep {
		return ev
	}
	share := fmt.Sprintf("/mnt/host/pcap/goroce-%d", time.Now().UnixNano())
	// Ring files last written before the case began hold none of it.
	script := l.guestShell() + fmt.Sprintf(`capstop; touch -d @%.6f $f.t0; mkdir -p %[2]s; for x in $f[0-9]*; do [ "$x" -nt $f.t0 ] && cp "$x" %[2]s/; done; capstart >&2`,
		float64(before.clock.UnixMicro())/1e6, share)
	var errs []string
	if _, err := l.run(ctx, "exec", script); err != nil {
		errs = append(errs, err.Error())
		l.dropSession() // the capture may not run: start over
	}
	src := filepath.Join(l.StateDir(), "share", "pcap", filepath.Base(share))
	wrapped, err := cutPcap(src, dest, before.clock, after.clock, guestRingFiles)
	os.RemoveAll(src)
	switch {
	case err != nil:
		errs = append(errs, "guest capture: "+err.Error())
	case wrapped:
		ev.Pcap = dest
		errs = append(errs, "guest capture: the ring wrapped during the case, its first packets are gone")
	default:
		ev.Pcap = dest
	}
	ev.Err = strings.Join(errs, "; ")
	return ev
}

// EndGuestEvidence ends the run's guest evidence: its agent and tcpdump in
// the guest, whose files it removes.
func (l *Lab) EndGuestEvidence(ctx context.Context) error {
	if l.session == nil {
		return nil
	}
	if a := l.session.agent; a != nil {
		a.close()
	}
	l.session = nil
	_, err := l.run(ctx, "exec", l.guestShell()+"capstop; rm -f $f[0-9]* $f.log $f.t0")
	return err
}

// cutPcap writes to dest the packets of the pcap files in dir stamped
// from t0 to t1, in time order. wrapped: every file of a ring of ring
// files began after t0, so the ring may have overwritten the window's
// start.
func cutPcap(dir, dest string, t0, t1 time.Time, ring int) (wrapped bool, err error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return false, err
	}
	if len(names) == 0 {
		return false, errors.New("no capture file written during the case")
	}
	type rec struct {
		ci   gopacket.CaptureInfo
		data []byte
	}
	var recs []rec
	var link layers.LinkType
	var snap uint32
	first := t1
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			return false, err
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			f.Close()
			if errors.Is(err, io.EOF) {
				continue // a file tcpdump opened but wrote nothing to yet
			}
			return false, fmt.Errorf("%s: %v", filepath.Base(n), err)
		}
		link, snap = r.LinkType(), r.Snaplen()
		for i := 0; ; i++ {
			data, ci, err := r.ReadPacketData()
			if err != nil {
				// A file cut short by the ring's rotation ends mid-record.
				break
			}
			if i == 0 && ci.Timestamp.Before(first) {
				first = ci.Timestamp
			}
			if !ci.Timestamp.Before(t0) && !ci.Timestamp.After(t1) {
				recs = append(recs, rec{ci, data})
			}
		}
		f.Close()
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].ci.Timestamp.Before(recs[j].ci.Timestamp) })
	out, err := os.Create(dest)
	if err != nil {
		return false, err
	}
	w := pcapgo.NewWriter(out)
	if snap == 0 {
		snap = 65535
	}
	if link == 0 {
		link = layers.LinkTypeEthernet
	}
	err = w.WriteFileHeader(snap, link)
	for _, r := range recs {
		if err == nil {
			err = w.WritePacket(r.ci, r.data)
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return len(names) >= ring && first.After(t0), err
}

// installInGuest puts the executable file local at guest in the guest,
// through the lab's 9p share (the guest's /mnt/host): roced for the guest
// bench, the qperf shim for the applications stage.
func (l *Lab) installInGuest(ctx context.Context, local, guest string) error {
	dir, err := os.MkdirTemp(filepath.Join(l.StateDir(), "share"), "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := copyFile(local, filepath.Join(dir, filepath.Base(local))); err != nil {
		return err
	}
	if _, err := l.run(ctx, "exec", fmt.Sprintf("install -m 755 /mnt/host/%s/%s %s", filepath.Base(dir), filepath.Base(local), guest)); err != nil {
		return fmt.Errorf("installing %s in the guest: %w", filepath.Base(local), err)
	}
	return nil
}

// StateDir is the lab instance's state directory (RXE_PEER_STATE).
func (l *Lab) StateDir() string {
	if s := os.Getenv("RXE_PEER_STATE"); s != "" {
		return s
	}
	return "/tmp/rxe-peer"
}

// Text is the evidence in one line for a report's notes.
func (e *GuestEvidence) Text() string {
	keys := make([]string, 0, len(e.Counters))
	for k := range e.Counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("rxe0 hw_counters moved:")
	for _, k := range keys {
		fmt.Fprintf(&b, " %s+%d", k, e.Counters[k])
	}
	if len(keys) == 0 {
		b.WriteString(" none")
	}
	if e.Err != "" {
		b.WriteString(" (" + e.Err + ")")
	}
	return b.String()
}

// LabQPTimeout is the RC local ACK timeout roced gets in the lab's matrix
// (--qp-timeout, perftest's -u): 4.096 us * 2^17 = 537 ms, so 4.3 s of
// silence with retry_cnt 7, against the tools' 67 ms (0.54 s). The guest
// is emulated (qemu TCG) on a host it shares: under load its vCPUs stop
// for longer than half a second, and roced, which counts retry_cnt 7 as
// seven retries as the IBA and mlx5 do, then ends the run with
// IBV_WC_RETRY_EXC_ERR (CI on 2026-11-25: write_lat 64 KiB on trixie,
// status 12 after 1.2 s; reproduced by stopping qemu for 0.8 s). rxe
// itself never gives up there: it takes retry_cnt 7 as infinite. The
// README's own command lines keep the tools' timeout, as written.
const LabQPTimeout = 17
