package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Lab drives the rxe lab (shared/rxe-peer/rxe-peer.sh): a qemu guest with
// rxe0 and the real tools, linked by a tap whose host side lives in a
// network namespace. Every setting comes from the same RXE_PEER_*
// environment the script reads, so the two agree on the instance.
type Lab struct {
	Dir    string // the lab directory holding rxe-peer.sh
	Script string
	// HostAddr and GuestAddr are the two tap addresses (no prefix length).
	HostAddr, GuestAddr string
	Suite               string
	NetNS, Tap          string
	MTU                 int // of the tap
	// Capture, when true, records the tap's traffic around each case.
	Capture bool
	// GuestEvidence, when true, records the guest's side of each case too:
	// rxe0's hw_counters and kernel log, and a capture on its eth0, kept
	// for failed cases (StartGuestEvidence).
	GuestEvidence bool
	lock          *os.File
}

// FindLabDir returns the lab directory: dir if set, else $RXE_PEER_DIR,
// else ../shared/rxe-peer beside the module root above the working
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
		if d, ok := check(filepath.Join(root, "..", "shared", "rxe-peer")); ok {
			return d, nil
		}
	}
	if len(tried) == 0 {
		return "", errors.New("rxe lab not found: no -lab, no RXE_PEER_DIR and no module root above the working directory")
	}
	return "", fmt.Errorf("rxe lab not found: no rxe-peer.sh in %s (set RXE_PEER_DIR to the rxe-peer directory)", strings.Join(tried, ", "))
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
		Dir:       dir,
		Script:    filepath.Join(dir, "rxe-peer.sh"),
		HostAddr:  strip(env("RXE_PEER_HOST_ADDR", "192.0.2.1/24")),
		GuestAddr: strip(env("RXE_PEER_GUEST_ADDR", "192.0.2.2/24")),
		Suite:     env("RXE_PEER_SUITE", "bookworm"),
		NetNS:     env("RXE_PEER_NETNS", "rxepeer"),
		Tap:       env("RXE_PEER_TAP", "rxetap0"),
		MTU:       mtu,
	}
}

// Guest runs commands in the VM (rxe-peer.sh exec).
func (l *Lab) Guest() *ShellRunner {
	return &ShellRunner{Name: "guest " + l.Suite, Remote: true, Scratch: true, Backstop: 30 * time.Second,
		Wrap: func(s string) []string { return []string{l.Script, "exec", s} }}
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
func (l *Lab) Up(ctx context.Context) error {
	if _, ok := l.Status(ctx); ok {
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
		"host_addr": l.HostAddr, "guest_addr": l.GuestAddr}
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
	Dmesg    []string         `json:"dmesg,omitempty"`
	Pcap     string           `json:"guest_pcap,omitempty"`
	Err      string           `json:"error,omitempty"`
}

// guestCapture is a case's evidence in progress.
type guestCapture struct {
	tag    string
	before map[string]int64
	dmesg  int64
}

const hwCounters = "/sys/class/infiniband/rxe0/ports/1/hw_counters"

// guestState is the shell that prints rxe0's counters and the kernel
// log's length as key=value lines.
// One grep reads every counter: a fork per counter cost a second per
// snapshot under TCG.
const guestState = `(cd ` + hwCounters + ` && grep . * | sed 's/^/hw./; s/:/=/'); echo "dmesg=$(dmesg | wc -l)"`

// StartGuestEvidence snapshots the counters and the kernel log and starts
// tcpdump on the guest's eth0 (RoCEv2 and the tools' TCP exchange on
// port), in one round trip into the guest. tcpdump buffers (no -U, no
// immediate mode): the file is read only after SIGINT has flushed it, and
// waking tcpdump for every packet slows the TCG guest during the case.
// -p: eth0 sees what is addressed to it anyway, and promiscuous mode would
// add two kernel log lines to every case's dmesg.
func (l *Lab) StartGuestEvidence(ctx context.Context, port int) (*guestCapture, error) {
	g := &guestCapture{tag: fmt.Sprintf("gc%d", port)}
	f := "/tmp/" + g.tag
	script := guestState + fmt.Sprintf(`; rm -f %[1]s.pcap; tcpdump -p -i eth0 -n -s %[2]d -B 16384 -w %[1]s.pcap 'udp port 4791 or tcp port %[3]d' >%[1]s.log 2>&1 & echo $! >%[1]s.pid; for i in $(seq 200); do grep -q 'listening on' %[1]s.log && exit 0; sleep 0.05; done; cat %[1]s.log >&2; exit 1`,
		f, l.MTU+64, port)
	out, err := l.run(ctx, "exec", script)
	g.before, g.dmesg = parseGuestState(out)
	return g, err
}

// Finish stops the capture and returns what moved. With keep the guest
// capture is copied to dest (through the lab's 9p share); else dropped.
func (g *guestCapture) Finish(ctx context.Context, l *Lab, dest string, keep bool) *GuestEvidence {
	f := "/tmp/" + g.tag
	script := fmt.Sprintf(`p=$(cat %[1]s.pid 2>/dev/null) && { kill -INT $p; for i in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.05; done; }; `, f) + guestState +
		fmt.Sprintf(`; echo ---; dmesg | tail -n +%d; `, g.dmesg+1)
	share := ""
	if keep {
		share = "/mnt/host/pcap/" + g.tag + ".pcap"
		script += fmt.Sprintf(`mkdir -p /mnt/host/pcap; cp %s.pcap %s; `, f, share)
	}
	script += fmt.Sprintf(`rm -f %[1]s.pcap %[1]s.log %[1]s.pid`, f)
	out, err := l.run(ctx, "exec", script)
	ev := &GuestEvidence{}
	if err != nil {
		ev.Err = err.Error()
	}
	state, log, _ := strings.Cut(out, "---\n")
	after, _ := parseGuestState(state)
	for k, v := range after {
		if d := v - g.before[k]; d != 0 {
			if ev.Counters == nil {
				ev.Counters = map[string]int64{}
			}
			ev.Counters[k] = d
		}
	}
	for _, line := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if line != "" {
			ev.Dmesg = append(ev.Dmesg, line)
		}
	}
	if keep && dest != "" {
		src := filepath.Join(l.StateDir(), "share", "pcap", g.tag+".pcap")
		if b, err := os.ReadFile(src); err == nil {
			if os.WriteFile(dest, b, 0o644) == nil {
				ev.Pcap = dest
			}
			os.Remove(src)
		}
	}
	return ev
}

// StateDir is the lab instance's state directory (RXE_PEER_STATE).
func (l *Lab) StateDir() string {
	if s := os.Getenv("RXE_PEER_STATE"); s != "" {
		return s
	}
	return "/tmp/rxe-peer"
}

// parseGuestState reads guestState's output.
func parseGuestState(out string) (map[string]int64, int64) {
	m := map[string]int64{}
	var dmesg int64
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		if name, ok := strings.CutPrefix(k, "hw."); ok {
			m[name] = n
		} else if k == "dmesg" {
			dmesg = n
		}
	}
	return m, dmesg
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
