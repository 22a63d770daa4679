package share_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/share"
	"github.com/goroce/goroce/transport"
)

// Addresses of this package's own: other packages' tests bind 127.0.0.1
// and .2 as these run.
var (
	sharedAddr = netip.MustParseAddr("127.0.21.1")
	remoteAddr = netip.MustParseAddr("127.0.21.2")
)

// startServer runs a server on a socket in a temporary directory.
// listenAt listens for share's control connections at path.
func listenAt(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func startServer(t *testing.T) (*share.Server, string) {
	t.Helper()
	path, err := share.Path(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln := listenAt(t, path)
	s := share.NewServer(ln, func(a netip.Addr) (nic.Link, error) { return udp.Open(udp.Config{Addr: a}) })
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, path
}

// node is a device with its connection manager.
type node struct {
	dev *transport.Device
	m   *cm.Manager
	mem *share.Member // nil: the node binds port 4791 itself
}

// joinNode opens a device on the shared address through the server.
func joinNode(t *testing.T, path string) *node {
	t.Helper()
	mem, err := share.Join(path, []netip.Addr{sharedAddr})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := udp.Open(udp.Config{Addr: sharedAddr, NoRx: true})
	if err != nil {
		mem.Close()
		t.Fatal(err)
	}
	return openNode(t, share.NewLink(mem, tx), mem)
}

func openNode(t *testing.T, l nic.Link, mem *share.Member) *node {
	t.Helper()
	dev, err := transport.Open(l, transport.Options{Share: sharerOf(mem)})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	m, err := cm.New(dev, cm.Options{})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	n := &node{dev: dev, m: m, mem: mem}
	t.Cleanup(n.close)
	return n
}

// sharerOf keeps a nil *Member from becoming a non-nil interface.
func sharerOf(m *share.Member) transport.Sharer {
	if m == nil {
		return nil
	}
	return m
}

func (n *node) close() {
	n.m.Close()
	n.dev.Close()
}

// conn is one side of an RC connection with a registered buffer.
type conn struct {
	c   *cm.Conn
	cq  *transport.CQ
	buf *transport.MR
}

func (n *node) qpConfig(t *testing.T) (cm.QPConfig, *transport.CQ, *transport.MR) {
	pd := n.dev.AllocPD()
	buf, err := pd.Register(make([]byte, 64<<10), transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	c := n.dev.CreateCQ(64)
	return cm.QPConfig{PD: pd, Init: transport.QPInitAttr{SendCQ: c, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}}, c, buf
}

// connect makes an RC connection from client to the server node's port.
func connect(t *testing.T, ctx context.Context, client, server *node, port uint16) (cli, srv conn) {
	t.Helper()
	sqc, scq, sbuf := server.qpConfig(t)
	l, err := server.m.Listen(netip.AddrPortFrom(sharedAddr, port), cm.ListenConfig{QP: sqc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cqc, ccq, cbuf := client.qpConfig(t)
	accepted := make(chan *cm.Conn, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			t.Errorf("accept on port %d: %v", port, err)
		}
		accepted <- c
	}()
	c, err := client.m.Dial(ctx, netip.AddrPortFrom(remoteAddr, 0), netip.AddrPortFrom(sharedAddr, port), cqc,
		cm.ConnParams{ACKTimeout: 14}) // 67 ms: a WRITE to a member that left gives up within a second
	if err != nil {
		t.Fatalf("dial port %d: %v", port, err)
	}
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	return conn{c, ccq, cbuf}, conn{s, scq, sbuf}
}

// write writes n bytes of pattern from cli into srv's buffer and checks
// them there, once the receive the WRITE's immediate data consumes has
// completed at srv (which orders the check after the engine's copy).
func write(t *testing.T, ctx context.Context, cli, srv conn, n int, pattern byte) {
	t.Helper()
	if err := srv.c.QP().PostRecv(&transport.RecvWR{WRID: 9}); err != nil {
		t.Fatal(err)
	}
	b := cli.buf.Bytes()[:n]
	for i := range b {
		b[i] = pattern + byte(i)
	}
	err := cli.c.QP().PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.Signaled,
		SGL: []transport.SGE{cli.buf.SGE(0, n)}, RemoteAddr: srv.buf.Addr(), RKey: srv.buf.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]transport.WC, 1)
	if k, err := cli.cq.PollWait(ctx, wc); k != 1 || err != nil || wc[0].Status != transport.Success {
		t.Fatalf("WRITE completion %+v (%d, %v)", wc, k, err)
	}
	if k, err := srv.cq.PollWait(ctx, wc); k != 1 || err != nil || wc[0].Status != transport.Success || wc[0].WRID != 9 {
		t.Fatalf("the responder's completion %+v (%d, %v)", wc, k, err)
	}
	got := srv.buf.Bytes()[:n]
	for i := range got {
		if got[i] != pattern+byte(i) {
			t.Fatalf("byte %d: %#x, want %#x", i, got[i], pattern+byte(i))
		}
	}
}

// TestSharedPort: two members on one address, each with its own device,
// QPs and CM, both connected to by a remote device through the RDMA CM
// and written to (64 KiB, several MTUs); then one leaves, and the other
// still works while the left one's block is forgotten.
func TestSharedPort(t *testing.T) {
	s, path := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := joinNode(t, path), joinNode(t, path)
	if a.mem.Block() == b.mem.Block() || a.mem.Block() == 0 || b.mem.Block() == 0 {
		t.Fatalf("blocks %d and %d", a.mem.Block(), b.mem.Block())
	}
	rl, err := udp.Open(udp.Config{Addr: remoteAddr})
	if err != nil {
		t.Fatal(err)
	}
	remote := openNode(t, rl, nil)

	ca, sa := connect(t, ctx, remote, a, 7001)
	cb, sb := connect(t, ctx, remote, b, 7002)
	for i, c := range []conn{sa, sb} {
		mem := []*share.Member{a.mem, b.mem}[i]
		if got := c.c.QP().QPN() >> share.BlockShift; got != mem.Block() {
			t.Fatalf("member %d's QP 0x%06x is outside its block %d", i, c.c.QP().QPN(), mem.Block())
		}
	}
	write(t, ctx, ca, sa, 64<<10, 1)
	write(t, ctx, cb, sb, 64<<10, 2)

	// A REQ for a port no member listens on is refused as the kernel's
	// CM refuses it: REJ 8, invalid service ID, at once.
	nqc, _, _ := remote.qpConfig(t)
	_, err = remote.m.Dial(ctx, netip.AddrPortFrom(remoteAddr, 0), netip.AddrPortFrom(sharedAddr, 7099), nqc, cm.ConnParams{})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID || s.Stats().Refused != 1 {
		t.Fatalf("a REQ for no one's port: %v (refused %d); want REJ 8", err, s.Stats().Refused)
	}

	// A second listener on a port one member listens on is refused.
	qc, _, _ := b.qpConfig(t)
	if _, err := b.m.Listen(netip.AddrPortFrom(sharedAddr, 7001), cm.ListenConfig{QP: qc}); err == nil {
		t.Fatal("a second process listened on a port another listens on")
	}

	// a leaves as a process that exits leaves: its device and member
	// close. b's connection still carries data.
	blockA := a.mem.Block()
	a.close()
	a.mem.Close()
	write(t, ctx, cb, sb, 4096, 3)
	// What comes for a's QP now is dropped by the server, not handed
	// to anyone: a WRITE to it exhausts its retries.
	before := s.Stats().NoMember
	err = ca.c.QP().PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{ca.buf.SGE(0, 8)}, RemoteAddr: sa.buf.Addr(), RKey: sa.buf.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]transport.WC, 1)
	if k, err := ca.cq.PollWait(ctx, wc); k != 1 || err != nil || wc[0].Status == transport.Success {
		t.Fatalf("a WRITE to a member that left: %+v (%d, %v)", wc, k, err)
	}
	if st := s.Stats(); st.NoMember <= before || st.Members != 1 {
		t.Fatalf("after a left (block %d): %+v", blockA, st)
	}
	// A new member gets a block, and not the one just left.
	c := joinNode(t, path)
	if c.mem.Block() == blockA {
		t.Fatalf("block %d reused at once", blockA)
	}
}

// TestJoinRefusals: no server, a join naming no address, and a device
// whose block is out of range are refused with an error that says so.
func TestJoinRefusals(t *testing.T) {
	if _, err := share.Join(filepath.Join(t.TempDir(), "none.sock"), []netip.Addr{sharedAddr}); !errors.Is(err, share.ErrNoServer) {
		t.Fatalf("no server: %v", err)
	}
	_, path := startServer(t)
	if _, err := share.Join(path, nil); err == nil {
		t.Fatal("a join of no address was taken")
	}
	if _, err := share.Join(path, []netip.Addr{netip.MustParseAddr("192.0.2.77")}); err == nil {
		t.Fatal("a join on an address of no interface was taken")
	} else {
		t.Log(err)
	}
}

// TestPathPerNamespace: each network namespace has its own server socket
// in the one directory, so two namespaces (two "hosts" of
// scripts/netns-hosts) run a server each at once, and a program reaches
// the server of its own namespace, which can open its address; a server
// asked for another namespace's address refuses it, the reason a shared
// socket could not serve them both. Needs root; skipped by -short (make
// test runs it in its system stage).
func TestPathPerNamespace(t *testing.T) {
	p := netns.New(t, netns.Config{})
	dir := t.TempDir()
	here, err := share.Path(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := share.Path(dir); err != nil || again != here {
		t.Fatalf("the same namespace gave %q then %q (%v)", here, again, err)
	}
	name := regexp.MustCompile(`^share-[0-9]+\.sock$`)
	type host struct {
		end  *netns.End
		path string
		s    *share.Server
	}
	hosts := []*host{{end: p.A}, {end: p.B}}
	seen := map[string]bool{here: true}
	for _, h := range hosts {
		if err := h.end.Do(func() error { h.path, err = share.Path(dir); return err }); err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(h.path) != dir || !name.MatchString(filepath.Base(h.path)) || seen[h.path] {
			t.Fatalf("namespace %s: path %q (others: %v)", h.end.Link, h.path, seen)
		}
		seen[h.path] = true
		// The server runs in its namespace as roced serve would: the
		// ports it opens for its members are opened there.
		ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: h.path, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		end := h.end
		h.s = share.NewServer(ln, func(a netip.Addr) (nic.Link, error) {
			var l nic.Link
			err := end.Do(func() error {
				var err error
				l, err = udp.Open(udp.Config{Addr: a})
				return err
			})
			return l, err
		})
		done := make(chan error, 1)
		go func() { done <- h.s.Serve() }()
		t.Cleanup(func() {
			h.s.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	for _, h := range hosts {
		m, err := share.Join(h.path, []netip.Addr{h.end.IPv4})
		if err != nil {
			t.Fatalf("joining the server of %s's namespace on %s: %v", h.end.Link, h.end.IPv4, err)
		}
		t.Cleanup(func() { m.Close() })
	}
	// The server of A's namespace cannot open B's address.
	if _, err := share.Join(hosts[0].path, []netip.Addr{p.B.IPv4}); !errors.Is(err, share.ErrRefused) {
		t.Fatalf("A's server asked for B's address %s: %v, want it refused", p.B.IPv4, err)
	}
	for _, h := range hosts {
		if st := h.s.Stats(); st.Joined != 1 || st.Members != 1 {
			t.Errorf("the server of %s's namespace: %+v, want the one member of its namespace", h.end.Link, st)
		}
	}
}
