// Package share lets several processes of a host use one RoCE address, as
// they share one rxe device: any number of programs (MPI ranks, the two
// processes of an rdmacm test, a forked server's children) each with its
// own QPs on the same address and UDP port 4791.
//
// A server (roced serve) owns port 4791 on each address its members ask
// for. A member (Join) gets a block of QP numbers, and with it of CM
// communication IDs; the server hands each member, over a unix socket
// pair, the packets addressed to the QPs of its block, the connection
// manager's MADs that name its communication IDs, and the connection
// requests for the services it listens on. Members send from sockets of
// their own (any source port serves RoCEv2), so only receiving goes
// through the server: one relay, one copy. A member that exits, however it
// exits, closes its control connection; the server then forgets its
// block and its services, and packets for its QPs are dropped as rxe drops
// packets for a QP that no longer exists. The others are not touched.
//
// A process that finds no server binds port 4791 itself, as before: the
// single-process path does not pass through the server.
package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/nic"
)

// Path returns the server's socket in dir (the directory both sides
// agree on: the user's goroce runtime directory, internal/endpoint's
// StatsDir) for the network namespace of the calling thread:
// share-INODE.sock, INODE that of the namespace (/proc/thread-self/ns/net).
// A unix socket bound to a path is reached from every network namespace
// that sees the file system, but a server can open port 4791 only on the
// addresses of its own namespace: with one socket per namespace, each
// namespace acting as a host (scripts/netns-hosts, a container) runs its
// own server, and a program joins the server of the namespace it runs
// in, never another's. The server keeps its namespace alive, so no other
// namespace takes the inode while it runs; a socket left by one that died
// is replaced as any stale socket is.
func Path(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", fmt.Errorf("share: which network namespace this is: %w", err)
	}
	return filepath.Join(dir, fmt.Sprintf("share-%d.sock", st.Ino)), nil
}

// BlockShift is the width of a block of QP numbers: block b holds QPNs
// b<<12 | 1..0xfff. Block 0 holds QP0, QP1 and nothing of a member's.
const BlockShift = 12

// Blocks is how many blocks the 24-bit QPN space holds.
const Blocks = 1 << (24 - BlockShift)

// FirstBlock is the first block a member gets: the blocks below hold the
// QPNs of a port's owner, a process that bound it itself before a server
// joined it (udp.Config.Owner, nic.MemberQPNBase).
const FirstBlock = nic.MemberQPNBase >> BlockShift

// memberBlocks is how many blocks members may have.
const memberBlocks = Blocks - FirstBlock

// CommIDShift places a block in a 32-bit CM communication ID (and SIDR
// request ID): block b's IDs are b<<20 | 0..0xfffff.
const CommIDShift = 20

// The control messages, member to server; each answer is an msgOK, or an
// msgErr with the reason in words.
const (
	msgJoin     = 'J' // + n addresses (netip binary forms, length-prefixed); the data socket rides along (SCM_RIGHTS)
	msgListen   = 'L' // + a service ID (8 bytes)
	msgUnlisten = 'U' // + a service ID; not answered
	msgOK       = 'K' // + the block (2 bytes) for a join
	msgErr      = 'E' // + why
)

// maxMsg bounds a control message: a join's addresses.
const maxMsg = 4096

// encodeJoin writes a join for addrs.
func encodeJoin(addrs []netip.Addr) ([]byte, error) {
	b := []byte{msgJoin}
	for _, a := range addrs {
		ab, err := a.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, byte(len(ab)))
		b = append(b, ab...)
	}
	if len(b) > maxMsg {
		return nil, fmt.Errorf("share: %d addresses do not fit one join", len(addrs))
	}
	return b, nil
}

// decodeJoin reads a join's addresses.
func decodeJoin(b []byte) ([]netip.Addr, error) {
	if len(b) == 0 || b[0] != msgJoin {
		return nil, errors.New("not a join")
	}
	var out []netip.Addr
	for b = b[1:]; len(b) > 0; {
		n := int(b[0])
		if n == 0 || len(b) < 1+n {
			return nil, errors.New("a join's address is cut short")
		}
		var a netip.Addr
		if err := a.UnmarshalBinary(b[1 : 1+n]); err != nil || !a.IsValid() {
			return nil, fmt.Errorf("a join's address: %v", err)
		}
		out = append(out, a.Unmap())
		b = b[1+n:]
	}
	if len(out) == 0 {
		return nil, errors.New("a join names no address")
	}
	return out, nil
}

// serviceMsg writes a listen or unlisten for a service ID.
func serviceMsg(kind byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kind}, id)
}
