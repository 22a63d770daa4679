package interop

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os/exec"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/impair"
	vns "github.com/vishvananda/netns"
)

// ImpairedPath puts nic/impair between roced and the lab's tap:
//
//	roced ns (203.0.113.1) r0 <-veth-> mr  [middle ns: impair]  mt <-veth-> rximp0 (203.0.113.2) lab ns <- tap -> guest (192.0.2.2)
//
// roced lives in a namespace of its own; the middle namespace bridges its
// two veths through the forwarder, which loses and reorders RoCEv2
// packets (UDP 4791) and passes everything else (ARP, the tools' TCP
// exchange) untouched; the lab's namespace routes between that veth and
// the tap, and the guest gets a route to roced's subnet through the tap's
// host address. The tap and its address stay as they are, so captures
// and drop counters on it keep working.
type ImpairedPath struct {
	Lab *Lab // the lab whose tap the path reroutes
	// RocedNS and MiddleNS are the two named namespaces this path adds.
	RocedNS, MiddleNS string
	// RocedAddr is roced's address; LabAddr the lab namespace's end.
	RocedAddr, LabAddr string
	// Faults apply in both directions; every case gets its own seed,
	// Seed mixed with the case's ID, so that one case run alone meets the
	// same decisions for the same packet sequence as in the whole run.
	Faults impair.Faults
	Seed   uint64 // the run's seed

	fwd    *impair.Forwarder
	seed   uint64
	middle vns.NsHandle
}

// ImpairedCases selects the cases CI runs on the impaired path (-impair
// without -run): perftest's RC bandwidth and latency tests whose traffic
// is a stream of messages, each direction: write_bw, read_bw (go-back-N on
// WRITE requests and on READ responses), send_bw and send_lat (SENDs into
// posted receives, RNR in between), at 1 byte and one MTU, and read_bw at
// 64 KiB: 20 cases, where rxe's requester never sends a multi-packet
// WRITE or SEND. That is where rxe renumbers a request it goes back over
// (interop/README.md, "rxe renumbers a WRITE it goes back over"): 64
// KiB WRITEs and SENDs from rxe are impaired only in roced's direction
// (write_bw and send_bw at 64 KiB with rxe serving), and send_lat's 64
// KiB ping-pong, both sides requesters, is left to the clean matrix. 64
// KiB READs from rxe stay: their responses are roced's. perftest keeps
// both QPs until a final TCP handshake, so a lost last ACK is
// retransmitted and answered like any other.
//
// Not in it, both measured (README.md): the pingpongs, because rdma-core's
// examples have no final handshake: the side that receives the last message
// exits right after acknowledging it, and when that ACK is lost the other
// side retries into a QP that no longer exists (1% loss, one case in the
// first two failed so); and UD, whose tools (ibv_ud_pingpong, ib_send_lat
// and ib_send_bw's receiver in iteration mode) wait forever for a lost
// datagram: UD has no retransmission and they have no timeout.
const ImpairedCases = `^((write_bw|send_bw)/RC/s(1|1024)@|(write_bw|send_bw)/RC/s65536@peer-server|read_bw/RC/s(1|1024|65536)@|send_lat/RC/s(1|1024)@)`

// Impaired-path addressing: TEST-NET-3 (RFC 5737), nothing else in the
// lab uses it.
const (
	impairRocedAddr = "203.0.113.1"
	impairLabAddr   = "203.0.113.2"
	impairSubnet    = "203.0.113.0/24"
	impairLabLink   = "rximp0"
)

// NewImpairedPath describes the path for the lab instance; Setup builds it.
// The namespaces are named NETNS_roced and NETNS_impair: an underscore,
// because rxe-peer.sh finds its namespace with grep -w, and NETNS-roced
// would pass for NETNS there.
func NewImpairedPath(l *Lab, f impair.Faults, seed uint64) *ImpairedPath {
	base := l.NetNS
	if base == "" {
		base = "rxepeer"
	}
	return &ImpairedPath{Lab: l, RocedNS: base + "_roced", MiddleNS: base + "_impair",
		RocedAddr: impairRocedAddr, LabAddr: impairLabAddr, Faults: f, Seed: seed, middle: -1}
}

// Runner runs commands in roced's namespace.
func (p *ImpairedPath) Runner() *ShellRunner {
	ns := p.RocedNS
	return &ShellRunner{Name: "host netns " + ns, Backstop: 10 * time.Second,
		Wrap: func(s string) []string { return inNetNS(ns, "sh", "-c", s) }}
}

// Setup builds the namespaces, veths, addresses and routes (removing what
// a crashed run left first).
func (p *ImpairedPath) Setup(ctx context.Context) error {
	if p.Lab.NetNS == "" {
		return errors.New("impaired path: the lab's tap must live in a namespace (RXE_PEER_NETNS)")
	}
	p.Teardown(ctx)
	lab, r, m := p.Lab.NetNS, p.RocedNS, p.MiddleNS
	steps := [][]string{
		{"ip", "netns", "add", r},
		{"ip", "netns", "add", m},
		{"ip", "link", "add", "r0", "netns", r, "mtu", fmt.Sprint(p.Lab.MTU), "type", "veth", "peer", "name", "mr", "netns", m},
		{"ip", "link", "add", "mt", "netns", m, "mtu", fmt.Sprint(p.Lab.MTU), "type", "veth", "peer", "name", impairLabLink, "netns", lab},
		// The middle sends nothing of its own: every frame there is roced's
		// or the lab's.
		{"ip", "netns", "exec", m, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "-n", m, "link", "set", "mr", "up"},
		{"ip", "-n", m, "link", "set", "mt", "up"},
		{"ip", "-n", r, "link", "set", "lo", "up"},
		{"ip", "-n", r, "addr", "add", p.RocedAddr + "/24", "dev", "r0"},
		{"ip", "-n", r, "link", "set", "r0", "up"},
		{"ip", "-n", r, "route", "add", "default", "via", p.LabAddr},
		{"ip", "-n", lab, "addr", "add", p.LabAddr + "/24", "dev", impairLabLink},
		{"ip", "-n", lab, "link", "set", impairLabLink, "up"},
		{"ip", "netns", "exec", lab, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			p.Teardown(ctx)
			return fmt.Errorf("impaired path: %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if _, err := p.Lab.run(ctx, "exec", "ip route replace "+impairSubnet+" via "+p.Lab.HostAddr); err != nil {
		p.Teardown(ctx)
		return fmt.Errorf("impaired path: guest route: %w", err)
	}
	h, err := vns.GetFromName(m)
	if err != nil {
		p.Teardown(ctx)
		return fmt.Errorf("impaired path: %s: %w", m, err)
	}
	p.middle = h
	return nil
}

// Teardown removes what Setup built; deleting the namespaces removes their
// veths, and with them the lab namespace's end.
func (p *ImpairedPath) Teardown(ctx context.Context) {
	p.stop()
	if p.middle >= 0 {
		p.middle.Close()
		p.middle = -1
	}
	for _, ns := range []string{p.RocedNS, p.MiddleNS} {
		exec.CommandContext(ctx, "ip", "netns", "del", ns).Run()
	}
	if p.Lab.NetNS != "" {
		exec.CommandContext(ctx, "ip", "-n", p.Lab.NetNS, "link", "del", impairLabLink).Run()
	}
	p.Lab.run(ctx, "exec", "ip route del "+impairSubnet+" 2>/dev/null; true")
}

// Left says what a run that was killed left of this path (nothing: nil):
// its namespaces, its veth end in the lab's namespace. Left there, that
// veth is a second addressed interface beside the tap, and roced run
// without -d, as the README's lines run it, refuses to choose between them
// (CI once failed the README's cases so, after a run killed in its
// impaired stage). Call it, and Teardown, only under the lab's lock.
func (p *ImpairedPath) Left(ctx context.Context) []string {
	var left []string
	if out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && (f[0] == p.RocedNS || f[0] == p.MiddleNS) {
				left = append(left, "namespace "+f[0])
			}
		}
	}
	if p.Lab.NetNS != "" && exec.CommandContext(ctx, "ip", "-n", p.Lab.NetNS, "link", "show", impairLabLink).Run() == nil {
		left = append(left, impairLabLink+" in namespace "+p.Lab.NetNS)
	}
	return left
}

// ImpairStats is what the forwarder did during one case, per direction.
type ImpairStats struct {
	Seed    uint64       `json:"seed"`     // the case's own seed
	ToGuest impair.Stats `json:"to_guest"` // roced to rxe
	ToRoced impair.Stats `json:"to_roced"` // rxe to roced
}

// Begin starts a forwarder for one case, seeded from the case's ID.
func (p *ImpairedPath) Begin(caseID string) error {
	p.stop()
	h := fnv.New64a()
	h.Write([]byte(caseID))
	p.seed = p.Seed ^ h.Sum64()
	cfg := impair.Config{A: "mr", B: "mt", AtoB: p.Faults, BtoA: p.Faults, Seed: p.seed}
	var fwd *impair.Forwarder
	err := netns.Do(p.middle, func() (err error) { fwd, err = impair.Open(cfg); return })
	if err != nil {
		return fmt.Errorf("impair forwarder in %s: %w", p.MiddleNS, err)
	}
	p.fwd = fwd
	return nil
}

// End stops the case's forwarder and returns what it did.
func (p *ImpairedPath) End() *ImpairStats {
	if p.fwd == nil {
		return nil
	}
	toGuest, toRoced := p.fwd.Stats()
	p.stop()
	return &ImpairStats{Seed: p.seed, ToGuest: toGuest, ToRoced: toRoced}
}

func (p *ImpairedPath) stop() {
	if p.fwd != nil {
		p.fwd.Close()
		p.fwd = nil
	}
}

// Text is the one-line account of a case's impairment for the notes.
func (s *ImpairStats) Text() string {
	d := func(x impair.Stats) string {
		return fmt.Sprintf("%d packets, %d lost, %d reordered", x.Packets, x.Lost, x.Reordered)
	}
	return fmt.Sprintf("impair (seed %#x): roced->guest %s; guest->roced %s", s.Seed, d(s.ToGuest), d(s.ToRoced))
}

// Short is the table column: lost/reordered packets each way.
func (s *ImpairStats) Short() string {
	return fmt.Sprintf("lost %d/%d reordered %d/%d (to guest/to roced)",
		s.ToGuest.Lost, s.ToRoced.Lost, s.ToGuest.Reordered, s.ToRoced.Reordered)
}

// add sums another case's counts into s (the run's totals).
func (s *ImpairStats) add(o *ImpairStats) {
	for _, d := range []struct{ to, from *impair.Stats }{{&s.ToGuest, &o.ToGuest}, {&s.ToRoced, &o.ToRoced}} {
		d.to.Packets += d.from.Packets
		d.to.Forwarded += d.from.Forwarded
		d.to.Lost += d.from.Lost
		d.to.Reordered += d.from.Reordered
		d.to.Dropped += d.from.Dropped
	}
}
