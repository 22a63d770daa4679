// Command offheap moves data by RDMA between buffers that all live
// outside the Go heap, as the course's lab D does with memory a program
// allocates itself (there, on a GPU): the initiator's source is anonymous
// memory (transport.MapAnonymous), the target's buffer a file mapped MAP_SHARED
// (transport.MapFile), and the initiator reads it back into anonymous memory, or
// hugepages with -huge (transport.MapHugePages). Each is registered with
// PD.Register like any buffer.
//
// The initiator WRITEs its source into the target's file mapping in
// several messages at once, the target checks every byte in the mapping
// and in the file (after msync), the initiator READs it all back and
// checks every byte; then each mapping is shown to refuse unmapping while
// its region is registered, and to unmap after Dereg.
//
//	offheap -link mem        # both devices on the in-memory link
//	offheap -link udp        # over kernel UDP on 127.0.0.1 and 127.0.0.2
//	offheap -link mem -huge  # READ back into hugepages (needs /proc/sys/vm/nr_hugepages)
//
// It lives in a module of its own that reaches goroce through a replace
// directive, as a user's would. It prints one line per step and exits 1
// with a one-line error at the first failure. make offheap builds and runs
// it both ways.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// wait bounds every wait for a completion: an upper bound on a hang, never
// how long an operation is expected to take.
const wait = 30 * time.Second

// chunks is how many messages each direction is split into, all posted
// at once.
const chunks = 16

func main() {
	link := flag.String("link", "mem", "mem or udp")
	size := flag.Int("size", 4<<20, "bytes to move each way (a multiple of 16)")
	huge := flag.Bool("huge", false, "READ back into hugepages")
	flag.Parse()
	if err := run(*link, *size, *huge); err != nil {
		fmt.Fprintf(os.Stderr, "offheap -link %s: %v\n", *link, err)
		os.Exit(1)
	}
}

// node is one side: a device, a protection domain, a completion queue and
// an RC QP.
type node struct {
	dev *transport.Device
	pd  *transport.PD
	cq  *transport.CQ
	qp  *transport.QP
	ep  transport.Endpoint
}

func openLinks(kind string) (a, b nic.Link, err error) {
	switch kind {
	case "mem":
		n := mem.NewNet(1)
		if a, err = n.Attach(netip.MustParseAddr("192.0.2.1"), mem.Options{}); err != nil {
			return nil, nil, err
		}
		b, err = n.Attach(netip.MustParseAddr("192.0.2.2"), mem.Options{})
	case "udp":
		if a, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			return nil, nil, err
		}
		b, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.2")})
	default:
		return nil, nil, fmt.Errorf("unknown link %q: want mem or udp", kind)
	}
	if err != nil {
		a.Close()
	}
	return a, b, err
}

func newNode(l nic.Link) (*node, error) {
	dev, err := transport.Open(l, transport.Options{})
	if err != nil {
		l.Close()
		return nil, err
	}
	pd := dev.AllocPD()
	c := dev.CreateCQ(2 * chunks)
	q, err := dev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: chunks, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err == nil {
		var ep transport.Endpoint
		if ep, err = dev.LocalEndpoint(q); err == nil {
			return &node{dev: dev, pd: pd, cq: c, qp: q, ep: ep}, nil
		}
	}
	dev.Close()
	return nil, err
}

// pattern is byte i of the data: a hash of its position, so that a chunk
// landing in the wrong place shows.
func pattern(i int) byte { return byte(uint32(i) * 2654435761 >> 24) }

// check returns an error naming the first byte of got that is not the
// pattern.
func check(what string, got []byte) error {
	for i, v := range got {
		if v != pattern(i) {
			return fmt.Errorf("%s: byte %d is %#x, want %#x", what, i, v, pattern(i))
		}
	}
	return nil
}

func run(kind string, size int, huge bool) error {
	if size <= 0 || size%chunks != 0 {
		return fmt.Errorf("-size %d: want a positive multiple of %d", size, chunks)
	}
	la, lb, err := openLinks(kind)
	if err != nil {
		return err
	}
	a, err := newNode(la)
	if err != nil {
		lb.Close()
		return err
	}
	defer a.dev.Close()
	b, err := newNode(lb)
	if err != nil {
		return err
	}
	defer b.dev.Close()
	// Each side lets the other READ and WRITE its regions that allow it.
	access := transport.ConnectOptions{Access: transport.RemoteRead | transport.RemoteWrite}
	if err := a.dev.Connect(a.qp, a.ep, b.ep, access); err != nil {
		return err
	}
	if err := b.dev.Connect(b.qp, b.ep, a.ep, access); err != nil {
		return err
	}

	// The buffers, none of them on the Go heap.
	src, err := transport.MapAnonymous(size, transport.MapOptions{})
	if err != nil {
		return err
	}
	mapBack, backKind := transport.MapAnonymous, "anonymous"
	if huge {
		mapBack, backKind = transport.MapHugePages, "hugepages"
	}
	back, err := mapBack(size, transport.MapOptions{})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "offheap")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "target")
	file, err := mapTarget(path, size)
	if err != nil {
		return err
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = pattern(i)
	}

	srcMR, err := a.pd.Register(src.Bytes(), 0)
	if err != nil {
		return err
	}
	backMR, err := a.pd.Register(back.Bytes(), transport.LocalWrite)
	if err != nil {
		return err
	}
	fileMR, err := b.pd.Register(file.Bytes(), transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead)
	if err != nil {
		return err
	}
	// b would send a fileMR's Addr and RKey over any channel; here they
	// are in the same process.
	remoteAddr, rkey := fileMR.Addr(), fileMR.RKey()

	start := time.Now()
	if err := transfer(a, transport.WRRDMAWrite, srcMR, remoteAddr, rkey, size); err != nil {
		return err
	}
	el := time.Since(start)
	if err := check("the target's mapping after the WRITEs", file.Bytes()); err != nil {
		return err
	}
	if err := file.Sync(); err != nil {
		return err
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := check("the target's file after the WRITEs", onDisk[os.Getpagesize():]); err != nil {
		return err
	}
	fmt.Printf("%-10s ok  %d bytes, anonymous -> file at offset %d, %d messages, %v; every byte checked in the mapping and the file\n",
		"RDMA WRITE", size, os.Getpagesize(), chunks, el.Round(time.Microsecond))

	start = time.Now()
	if err := transfer(a, transport.WRRDMARead, backMR, remoteAddr, rkey, size); err != nil {
		return err
	}
	el = time.Since(start)
	if err := check("the initiator's buffer after the READs", back.Bytes()); err != nil {
		return err
	}
	fmt.Printf("%-10s ok  %d bytes, file -> %s, %d messages, %v; every byte checked\n",
		"RDMA READ", size, backKind, chunks, el.Round(time.Microsecond))

	for _, u := range []struct {
		m *transport.Mapping
		r *transport.MR
	}{{src, srcMR}, {back, backMR}, {file, fileMR}} {
		if err := u.m.Close(); !errors.Is(err, transport.ErrInUse) {
			return fmt.Errorf("unmapping a registered mapping: %v, want %v", err, transport.ErrInUse)
		}
		if err := u.r.Dereg(); err != nil {
			return err
		}
		if err := u.m.Close(); err != nil {
			return err
		}
	}
	fmt.Printf("%-10s ok  each mapping refused while its region was registered, unmapped after Dereg\n", "unmap")
	return nil
}

// mapTarget creates a file one page longer than size and maps size bytes
// of it from its second page (an offset must be a multiple of the page
// size).
func mapTarget(path string, size int) (*transport.Mapping, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping keeps the file
	if err := f.Truncate(int64(os.Getpagesize() + size)); err != nil {
		return nil, err
	}
	return transport.MapFile(f, int64(os.Getpagesize()), size, transport.MapOptions{})
}

// transfer moves size bytes between local (from its start) and the
// remote region at remoteAddr in chunks messages of op, all posted at
// once, and waits for every completion.
func transfer(a *node, op transport.WROpcode, local *transport.MR, remoteAddr uint64, rkey uint32, size int) error {
	n := size / chunks
	for i := range chunks {
		err := a.qp.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: op, Flags: transport.Signaled,
			SGL:        []transport.SGE{local.SGE(i*n, n)},
			RemoteAddr: remoteAddr + uint64(i*n), RKey: rkey})
		if err != nil {
			return fmt.Errorf("%v %d: %w", op, i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	wc := make([]transport.WC, chunks)
	for done := 0; done < chunks; {
		got, err := a.cq.PollWait(ctx, wc)
		if err != nil {
			return fmt.Errorf("%v: waiting for completions (%d of %d): %w", op, done, chunks, err)
		}
		for _, w := range wc[:got] {
			if w.Status != transport.Success {
				return fmt.Errorf("%v %d: %v", op, w.WRID, w.Status)
			}
		}
		done += got
	}
	return nil
}
