// Package nic is the link interface: what goroce sends and receives
// RoCEv2 packets through (Link, Frame, Info, Stats), and Multi, one link
// over several. It imports only the standard library, bth and inet, so a
// package that needs the interface (qp) builds without the links. The
// links are its subpackages:
//
//   - nic/udp: the kernel UDP socket, the default; no privilege needed.
//   - nic/afpacket: whole Ethernet frames through AF_PACKET sockets.
//   - nic/afxdp: an AF_XDP socket fed by an XDP program.
//   - nic/mem: an in-memory network with deterministic fault injection.
//   - nic/tap: a pcap tap that wraps any link.
//   - nic/fault: a wrapper that makes any link misbehave on purpose.
//
// nic/netdev reads a network interface through netlink: its GID table,
// indexed as rxe indexes it, and the next hops of the Ethernet links.
//
// Every link moves IP datagrams: the IP header through the ICRC. The engine
// builds the IP and UDP headers itself because the ICRC covers them; a link
// that talks Ethernet prepends its header in the frame's headroom, and the
// UDP link hands the kernel only the UDP payload after checking that the
// kernel will build the same headers (and, on receive, rebuilds the headers
// the kernel stripped, verifying the ICRC as it recovers the IPv4 ID, and
// hands the frame up decoded and verified, Frame.Verified).
package nic

import (
	"errors"
	"net"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
)

// Headroom is the free space every transmit buffer keeps before the IP
// header: an Ethernet header and one 802.1Q tag.
const Headroom = 14 + 4

// MaxFrame is the largest IP datagram goroce builds: an IPv6 header, UDP,
// the longest transport headers, a 4096-byte payload, pad and ICRC.
const MaxFrame = 40 + 8 + 12 + 4 + 28 + 4096 + 3 + 4

// BufSize is the size of a buffer holding one frame with its headroom.
const BufSize = Headroom + MaxFrame

// Frame is one packet in a buffer: B[Off:] is the IP datagram (IP header
// through ICRC) and B[:Off] is headroom a link may write its own header into.
type Frame struct {
	B   []byte // the buffer: headroom, then the datagram
	Off int    // where the datagram starts in B

	// Verified says that the link has done the receive checks already:
	// Decoded is the datagram decoded (bth.DecodeIP, which checks the IPv4
	// header checksum) and its ICRC verified, so the device takes Decoded
	// as it is rather than decoding and computing the ICRC a second time
	// (gVisor's RXChecksumValidated). Links that only move bytes leave it
	// false; a wrapper that changes a frame's bytes hands on a new Frame.
	// Only received frames carry it.
	Verified bool
	Decoded  bth.Frame // valid when Verified

	// Sealed says, on a frame handed to Send, that this process's engine
	// built the datagram and sealed it (IPv4 header checksum and ICRC
	// computed over the bytes as they are). A link that hands exactly
	// these bytes to a receiver without them leaving memory (nic/mem) may
	// hand them up Verified, as gVisor's loopback marks what the stack
	// sent it (TXChecksumOffload, RXChecksumValidated): nothing can have
	// changed them. Frames built by anything else (a test's scripted peer,
	// a fault that changed bytes) leave it false and are checked.
	Sealed bool
}

// Datagram returns the IP datagram.
func (f Frame) Datagram() []byte { return f.B[f.Off:] }

// Src returns the datagram's IP source address (IPv4-mapped ones
// unmapped), or false when it holds no IP header.
func (f Frame) Src() (netip.Addr, bool) {
	dg := f.Datagram()
	switch {
	case len(dg) >= inet.IPv4HeaderLen && inet.IPv4(dg).Version() == 4:
		return inet.IPv4(dg).Src(), true
	case len(dg) >= inet.IPv6HeaderLen && inet.IPv6(dg).Version() == 6:
		return inet.IPv6(dg).Src().Unmap(), true
	}
	return netip.Addr{}, false
}

// Link is a network path for RoCEv2 packets.
//
// Send may be called from many goroutines at once; Recv from one goroutine
// at a time. Close makes a blocked Recv return net.ErrClosed.
//
// A link sends each datagram with the IPv4 TOS or IPv6 traffic class the
// engine wrote in it, and a received datagram carries the one it arrived
// with: its ECN bits are congestion control's signal (ECT(0) out, CE
// from a congested queue in; docs/congestion.md). Links that move whole
// datagrams do so by nature; the UDP link passes them per packet
// (IP_TOS/IPV6_TCLASS out, IP_RECVTOS/IPV6_RECVTCLASS in).
type Link interface {
	// Send transmits frames in order and returns how many it accepted. It
	// may write into each frame's headroom but retains nothing after it
	// returns: the caller may reuse the buffers at once. A frame the link
	// cannot deliver (no route, no neighbour) is counted and dropped, not
	// returned as an error; an error means the link itself failed.
	Send(frames []Frame) (int, error)

	// Recv blocks until at least one frame has arrived and fills frames
	// with up to len(frames) of them. The frames' bytes belong to the link
	// and stay valid until the next call to Recv (which is also how long
	// the receiver holds the queue; see Poller).
	Recv(frames []Frame) (int, error)

	// Info describes the link.
	Info() Info

	// SrcPort returns the UDP source port to use for a queue pair's
	// packets. HCAs spread flows by hashing the QP number; a link may only
	// be able to send from some ports (the UDP link sends from the ports it
	// has sockets on).
	SrcPort(qpn uint32) uint16

	// Stats returns the link's counters.
	Stats() Stats

	// Close releases the link's sockets and makes Send and Recv fail.
	Close() error
}

// MultiQueue is a link with several receive queues, as an HCA has one
// completion vector and one receive queue per core. Every packet of a QP
// arrives on one queue, QueueOf(its destination QPN, RxQueues()), so a
// device runs one receive goroutine per queue and a QP's packets are never
// handled by two at once. Recv is RecvQueue(0, ...).
type MultiQueue interface {
	// RxQueues returns how many receive queues the link has.
	RxQueues() int
	// RecvQueue is Recv on queue i, 0 <= i < RxQueues(). Each queue may
	// be received from by its own goroutine, one at a time per queue.
	RecvQueue(i int, frames []Frame) (int, error)
}

// Poller is a link whose receive queues can also be polled by a goroutine
// that is not the queue's receiver. A device uses it to let a goroutine
// that polls an empty completion queue receive and handle what has
// arrived itself, on its own core (run to completion, an HCA driver's
// poll mode), rather than wait for the receive goroutine to wake, handle
// the packet and wake it in turn.
//
// A queue's frames are handled by one goroutine at a time, in the order
// they arrived: whoever holds the queue. The receiver holds it from
// Recv's (or RecvQueue's) return until its next call, and waits for the
// socket without it; a poller holds it from a PollQueue that returned
// frames until EndPoll. Recv returns no frames and no error, rather than
// wait, when it finds none and pollers took frames since its last return:
// they are active, and a receiver that stands aside while they are does
// not wake, only to find nothing, for every packet they take.
type Poller interface {
	// PollQueue receives what has arrived on queue i without blocking
	// (RecvQueue for a link without queues: i is 0). It returns 0 when
	// nothing has, or when another goroutine holds the queue (what
	// arrives goes to that one). n > 0 leaves the caller holding queue i,
	// the frames valid, until EndPoll(i).
	PollQueue(i int, frames []Frame) int
	// EndPoll releases queue i after a PollQueue that returned frames.
	EndPoll(i int)
	// EndRecv releases queue i when the receiver holds it (its last Recv
	// returned frames), for a receiver that will not call Recv again for
	// a while: until then the pollers could not take the queue. Only the
	// receiver calls it.
	EndRecv(i int)
}

// FDPoller is a Poller whose arrivals show on file descriptors, so that
// a poller outside Go (libgoroce.so's C ibv_poll_cq in poll mode) can
// learn that a PollQueue would find nothing with one poll(2) and no call
// into Go: none of PollFDs readable, and no frame held in the link's
// memory since a poll last found every queue empty.
type FDPoller interface {
	Poller
	// PollFDs returns the descriptors of the sockets every receive queue
	// reads, readable while something has arrived; nil when the link
	// has none to give (a PollQueue must then be called to know).
	PollFDs() []int
	// OnHeld sets f, called each time the link comes to hold received
	// frames that no descriptor shows and PollQueue would return, after
	// they are there: a joined link's receivers hand over batches so.
	// Frames a PollQueue or a receiver's Recv returned and left are not
	// reported (the caller knows of them). Set before the first Recv
	// or PollQueue.
	OnHeld(f func())
}

// NetpollLeaver is a link whose sockets can leave the Go runtime's
// network poller. The poller's thread wakes for every event on a socket
// it watches, whether or not a goroutine waits there, when the runtime
// has a P to spare: for each packet that poll mode's pollers take
// themselves, when they are C threads (libgoroce.so), a wake-up of a
// third thread on the cores they spin on. A device in poll mode asks
// for it when it opens (transport.Open) if told to
// (transport.Options.LeaveNetpoll), before anything else uses the link.
type NetpollLeaver interface {
	// LeaveNetpoll takes the link's sockets out of the network poller;
	// a wait then blocks its thread in the kernel instead. Called before
	// the link is first used; a link already out of it does nothing.
	LeaveNetpoll() error
}

// MemberQPNBase splits the QPN space of a port several processes share
// (package share): the process that bound the port itself (its owner)
// numbers its QPs below it and its CM communication IDs below 1<<31;
// the processes a share server serves have their blocks above, their
// communication IDs at 1<<31 and up. A link's steering program (udp.Config
// Owner) hands the kernel's packets to the owner or the server by it.
const MemberQPNBase = 1 << 23

// MaxOwnerServices bounds the CM services an owner's steering program
// names (udp.Link.SetServices): the connection requests for them go to the
// owner, every other one to the share server.
const MaxOwnerServices = 64

// MaxRxQueues bounds a link's receive queues.
const MaxRxQueues = 64

// QueueOf returns the receive queue that packets to QP qpn arrive on, of
// n: qpn mod n. Links steer by it, and a device runs a QP's deferred work
// on the same queue's goroutine.
func QueueOf(qpn uint32, n int) int {
	if n <= 1 {
		return 0
	}
	return int(qpn&0xffffff) % n
}

// Info describes a link.
type Info struct {
	Name  string           // e.g. "udp 127.0.0.1", "afpacket veth0", "mem 10.0.0.1"
	MTU   int              // largest IP datagram the path carries
	Addrs []netip.Addr     // local addresses, in the order the GID table lists them
	MAC   net.HardwareAddr // for the link-local GID; nil when the link has none

	// DirectSend says that Send hands frames over by a function call: no
	// system call, ring kick or wire whose cost a batch would share (the
	// in-memory link). A device in poll mode then sends a burst's
	// acknowledgements when the poll that received the burst ends,
	// rather than hold them for the application's reply to carry, which
	// would save nothing and delay the peer's completion.
	DirectSend bool

	// PollNoSyscall says that a poll of an empty queue (Poller.PollQueue)
	// reads memory and makes no system call (afxdp's rx ring indexes, the
	// in-memory link's queue). A goroutine busy-polling such a link yields
	// the processor less often where each yield costs a system call
	// (internal/spin); one whose every poll is a system call already pays
	// as much per poll.
	PollNoSyscall bool

	// Offload is what the link does to packets on the engine's behalf,
	// so that the engine does none of it twice.
	Offload Offload
}

// Offload is a set of things a link does to packets for the engine.
type Offload uint8

const (
	// OffloadGSO: Send hands a run of equal-sized packets to one
	// destination to the kernel or device as one segmentation offload
	// send, so the engine passes a message's packets in one Send call
	// rather than cut the run itself.
	OffloadGSO Offload = 1 << iota
	// OffloadGRO: the link receives coalesced packets and splits them
	// into frames itself.
	OffloadGRO
	// OffloadRxVerify: received frames come up Verified (decoded, ICRC
	// checked) where the link could verify them (Frame.Verified).
	OffloadRxVerify
)

// Has reports whether every offload in f is in o.
func (o Offload) Has(f Offload) bool { return o&f == f }

// String lists the offloads, e.g. "gso|gro".
func (o Offload) String() string {
	s := ""
	for i, n := range [...]string{"gso", "gro", "rx-verify"} {
		if o&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// Stats are a link's counters. Packets and bytes count IP datagrams (IP
// header through ICRC), whatever framing the link adds.
type Stats struct {
	TxPackets, TxBytes uint64 // datagrams sent and their bytes
	RxPackets, RxBytes uint64 // datagrams received and their bytes
	TxDropped          uint64 // could not be sent (no route, no neighbour, queue full)
	RxDropped          uint64 // received but not RoCEv2 for us, or malformed framing

	// TxBatches and RxBatches count system calls (or ring kicks) that
	// moved at least one packet: Packets/Batches is the batching achieved.
	TxBatches, RxBatches uint64
	// TxGSOSegments counts packets sent as segments of a UDP GSO send of
	// two or more; RxGROSegments packets that arrived coalesced: by GRO
	// on a UDP socket, or as a GSO super-frame cut by an AF_PACKET link.
	TxGSOSegments, RxGROSegments uint64
	// TxGSORefused counts send sockets on which the kernel refused a
	// segmentation offload send (a route or device without it): each then
	// sends one datagram per packet. RxGROCopies counts coalesced packets
	// the link had to copy or move to split them (a segment size other
	// than the one its receive buffers were laid out for).
	TxGSORefused, RxGROCopies uint64
	// TxNoNeighbour counts frames dropped because the next hop's MAC was
	// still unresolved (links that build Ethernet headers).
	TxNoNeighbour uint64
	// RxIDUnsolved counts IPv4 packets received through a UDP socket whose
	// ICRC no IPv4 identification explains: corrupt. They are delivered
	// anyway; the engine's ICRC check rejects and counts them.
	RxIDUnsolved uint64
	// RxKernelDrops counts packets the kernel dropped before the link saw
	// them (socket buffer or ring full), where the kernel reports it.
	RxKernelDrops uint64
}

// ErrClosed is returned by a closed link.
var ErrClosed = net.ErrClosed

// ErrTooBig is returned for a frame larger than the link's MTU.
var ErrTooBig = errors.New("nic: frame larger than the link MTU")

// RoCEv2SrcPort returns the source port Linux rxe uses for a QP:
// 0xC000 plus 14 bits of a hash of the QP number.
func RoCEv2SrcPort(qpn uint32) uint16 {
	h := qpn * 0x9e3779b1 // Fibonacci hashing spreads consecutive QPNs
	return 0xc000 | uint16(h>>18)&0x3fff
}
