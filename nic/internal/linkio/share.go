package linkio

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Sharing port 4791 among processes, as one rxe device serves every
// process of a host. The sockets of a SO_REUSEPORT group are ordered: the
// kernel appends a socket at bind and, when one leaves the group, moves the
// last into its place (net/core/sock_reuseport.c, reuseport_detach_sock).
// A process that owns them all (so that each socket leaves only when the
// owner closes it, in an order it knows) can steer each packet to the
// socket of the process that owns its destination QP: QP numbers are
// handed out in blocks of QPNBlockSize, and the group's classic BPF program
// maps each owned block to its socket's index. Anything else (QP1's MADs,
// a QPN no process owns, a packet too short to name one) goes to socket 0.

// QPNBlockShift sets the size of the blocks of QP numbers a shared port
// hands out: 4096 QPs a block, 4096 blocks in the 24-bit QPN space.
const QPNBlockShift = 12

// QPNBlockSize is how many QP numbers a block holds.
const QPNBlockSize = 1 << QPNBlockShift

// maxShareRoutes bounds the routes of one program: two instructions each
// within classic BPF's 4096 (BPF_MAXINSNS), with room for the prologue.
const maxShareRoutes = 2000

// ShareRoute sends the packets for the QPs of one block to one socket of
// the group.
type ShareRoute struct {
	Block uint32 // the block: QPN >> QPNBlockShift
	Index uint32 // the socket's index in the group, in bind order
}

// ShareProgram is the classic BPF program that steers by routes: the
// BTH's destination QP (offset 4 of the UDP payload, where the kernel
// starts a UDP group's program) picks its block's socket, else socket 0.
func ShareProgram(routes []ShareRoute) ([]unix.SockFilter, error) {
	if len(routes) > maxShareRoutes {
		return nil, fmt.Errorf("linkio: %d routes: a program holds at most %d", len(routes), maxShareRoutes)
	}
	seen := make(map[uint32]bool, len(routes))
	for _, r := range routes {
		if r.Block >= 1<<(24-QPNBlockShift) {
			return nil, fmt.Errorf("linkio: block %d is past the 24-bit QPN space", r.Block)
		}
		if seen[r.Block] {
			return nil, fmt.Errorf("linkio: block %d routed twice", r.Block)
		}
		seen[r.Block] = true
	}
	sorted := slices.Clone(routes)
	slices.SortFunc(sorted, func(a, b ShareRoute) int { return int(a.Block) - int(b.Block) })
	prog := []unix.SockFilter{
		// A short packet makes the load fail and the program return 0:
		// socket 0, which counts it as malformed.
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0xffffff},
		{Code: unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K, K: QPNBlockShift},
	}
	for _, r := range sorted {
		// Equal: fall through to the return; else skip it. Two
		// instructions a route keep every jump within one.
		prog = append(prog,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: r.Block},
			unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: r.Index})
	}
	return append(prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0}), nil
}

// AttachShare attaches ShareProgram(routes) to the SO_REUSEPORT group of
// the socket fd, replacing the group's program.
func AttachShare(fd int, routes []ShareRoute) error {
	prog, err := ShareProgram(routes)
	if err != nil {
		return err
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// ShareLeave returns the group's order after the socket at index i left a
// group of n: the last socket takes its place, as the kernel moves it.
// order lists the group's members (any identity) by index.
func ShareLeave[T any](order []T, i int) []T {
	last := len(order) - 1
	order[i] = order[last]
	return order[:last]
}
