// Package impair is netem in user space: a forwarder between two Ethernet
// interfaces that loses, duplicates, reorders, delays and corrupts the
// RoCEv2 packets crossing it, in each direction on its own terms, with
// every decision drawn from a seeded random source.
//
// It exists because the kernel may have no netem (CONFIG_NET_SCH_NETEM),
// and the tc actions that could stand in for it (act_gact's random drop,
// a cls_bpf program cloning and dropping) cannot reorder or delay without
// netem or sch_fq either. A forwarder can do all of it on any kernel with
// AF_PACKET, and it is a useful tool in its own right: put it between a
// goroce host and an HCA (a machine with two ports, or a namespace with
// two veths as the tests do) and the HCA meets a peer on a bad path.
//
// The forwarder reads each interface with an AF_PACKET socket and writes
// what it keeps to the other one. Frames are bridged unchanged, so the
// hosts on either side see one Ethernet segment (ARP and neighbour
// discovery cross it untouched). Faults apply only to RoCEv2 frames (UDP
// destination port 4791) unless Faults.AllFrames is set. A UDP GSO
// super-frame from a Linux sender is cut into its datagrams first, and a
// partial checksum completed (nic/vnet), so that faults fall on
// packets, as on a wire.
package impair

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Faults are what happens to the packets crossing in one direction.
// Probabilities are per packet, in [0, 1].
type Faults struct {
	Loss      float64 // dropped
	Duplicate float64 // sent twice
	Reorder   float64 // held back for ReorderDelay, so later packets overtake it
	Corrupt   float64 // one bit of the UDP payload flipped (UDP checksum fixed up, so only the ICRC tells)
	// Delay is added to every packet, plus a uniform random Jitter.
	Delay, Jitter time.Duration
	// ReorderDelay is how long a reordered packet is held back; 0 means
	// 500 µs, which on a veth lets tens of packets overtake it.
	ReorderDelay time.Duration
	// Bottleneck, if set, sends the packets through a congested egress
	// that queues them at its rate and marks them CE as the queue grows
	// (after the delay above); Stats.Marked counts the marks.
	Bottleneck *Bottleneck
	// AllFrames applies the faults to every frame, not only RoCEv2.
	AllFrames bool
	// Filter, if set, sees each packet the faults apply to before the
	// random faults and may drop or duplicate it: scripted misbehaviour
	// ("lose the third READ response"). It runs on the forwarding
	// goroutine and must not keep the slice.
	Filter func(frame []byte) Verdict
}

// Verdict is what a Filter decides for one packet.
type Verdict uint8

// Filter verdicts.
const (
	Pass      Verdict = iota // random faults still apply
	Drop                     // lose it
	Duplicate                // send it twice
)

// Config names the two interfaces and the faults each way.
type Config struct {
	A, B       string // the two interfaces the forwarder joins
	AtoB, BtoA Faults // the faults of each direction
	// Seed makes a run's fault decisions repeatable: the same packets in
	// the same order meet the same fate.
	Seed uint64
	// Queue bounds the packets held back (delayed or reordered) per
	// direction; 0 means 1024. Past it, packets are dropped and counted.
	Queue int
}

// Stats count what happened in one direction.
type Stats struct {
	Frames     uint64 // frames read
	Packets    uint64 // packets after cutting GSO super-frames
	Impaired   uint64 // packets the faults were drawn for: RoCEv2 ones, or all with AllFrames
	Forwarded  uint64 // packets written (a duplicate counts twice)
	Lost       uint64 // packets dropped on purpose
	Duplicated uint64 // packets sent twice
	Reordered  uint64 // packets held back behind later ones
	Delayed    uint64 // packets held for the configured delay
	Corrupted  uint64 // packets with a bit flipped
	Segmented  uint64 // GSO super-frames cut into packets
	Marked     uint64 // packets marked Congestion Experienced by the Bottleneck
	Dropped    uint64 // could not be forwarded: too big, queue full, send failed
}

// Forwarder bridges two interfaces with faults.
type Forwarder struct {
	fds  [2]int // AF_PACKET sockets on A and B
	wake int    // eventfd that ends the forwarding loops
	dirs [2]*direction
	wg   sync.WaitGroup
	once sync.Once
}

// Open starts a forwarder. It must be called in the network namespace that
// holds both interfaces, and needs CAP_NET_RAW.
func Open(cfg Config) (*Forwarder, error) {
	if cfg.A == "" || cfg.B == "" || cfg.A == cfg.B {
		return nil, fmt.Errorf("impair: two different interfaces needed, got %q and %q", cfg.A, cfg.B)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	f := &Forwarder{fds: [2]int{-1, -1}, wake: -1}
	var ifs [2]*net.Interface
	for i, name := range []string{cfg.A, cfg.B} {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("impair: %w", err)
		}
		ifs[i] = ifc
		if f.fds[i], err = packetSocket(ifc.Index); err != nil {
			f.Close()
			return nil, fmt.Errorf("impair: %s: %w", name, err)
		}
	}
	var err error
	if f.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		f.Close()
		return nil, fmt.Errorf("impair: eventfd: %w", err)
	}
	for i, fl := range []Faults{cfg.AtoB, cfg.BtoA} {
		out := ifs[1-i]
		d, err := newDirection(f.fds[i], f.fds[1-i], f.wake, out.MTU, cfg.Queue, cfg.Seed, uint64(i))
		if err != nil {
			f.Close()
			return nil, err
		}
		d.faults.Store(&fl)
		f.dirs[i] = d
	}
	f.wg.Add(2)
	for _, d := range f.dirs {
		go func() {
			defer f.wg.Done()
			d.run()
		}()
	}
	return f, nil
}

// packetSocket opens an AF_PACKET socket on one interface that receives
// every frame arriving there (not those it sends) with a virtio_net_hdr in
// front, and sends frames the same way, bypassing the qdisc.
func packetSocket(ifindex int) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("AF_PACKET needs CAP_NET_RAW: %w", err)
		}
		return -1, err
	}
	for _, o := range []struct{ level, opt, val int }{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1},
		{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1},
		{unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16 << 20},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16 << 20},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("setsockopt %d/%d: %w", o.level, o.opt, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// SetFaults changes the faults of both directions; packets already held
// back keep their release time.
func (f *Forwarder) SetFaults(aToB, bToA Faults) {
	f.dirs[0].faults.Store(&aToB)
	f.dirs[1].faults.Store(&bToA)
}

// Stats returns the counters of the A-to-B and B-to-A directions.
func (f *Forwarder) Stats() (aToB, bToA Stats) {
	return f.dirs[0].ctr.snapshot(), f.dirs[1].ctr.snapshot()
}

// Close stops forwarding (packets still held back are dropped) and closes
// the sockets.
func (f *Forwarder) Close() error {
	f.once.Do(func() {
		if f.wake >= 0 {
			var one = [8]byte{1}
			unix.Write(f.wake, one[:])
		}
		f.wg.Wait()
		for _, fd := range append(f.fds[:], f.wake) {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	})
	return nil
}

// counters is the atomic form of Stats.
type counters struct {
	frames, packets, impaired, forwarded, lost atomic.Uint64
	duplicated, reordered, delayed, corrupted  atomic.Uint64
	segmented, dropped, marked                 atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{Frames: c.frames.Load(), Packets: c.packets.Load(), Impaired: c.impaired.Load(), Forwarded: c.forwarded.Load(),
		Lost: c.lost.Load(), Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load(),
		Delayed: c.delayed.Load(), Corrupted: c.corrupted.Load(), Segmented: c.segmented.Load(),
		Dropped: c.dropped.Load(), Marked: c.marked.Load()}
}
