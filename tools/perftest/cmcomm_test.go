package perftest

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

func memCM(t *testing.T, n *mem.Net, addr string) (*transport.Device, *cm.Manager) {
	t.Helper()
	l, err := n.Attach(netip.MustParseAddr(addr), mem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := transport.Open(l, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cm.New(dev, cm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); dev.Close() })
	return dev, m
}

// TestCommConn: the RDMA CM exchange carries a whole session's steps
// (versions, sys data, MTU, records) between AcceptComm and DialComm, a
// deadline ends a read the peer does not answer, and a disconnection
// ends the peer's reads with EOF.
func TestCommConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	memnet := mem.NewNet(1)
	ds, ms := memCM(t, memnet, "192.0.2.1")
	dc, mc := memCM(t, memnet, "192.0.2.2")
	listening := make(chan struct{})
	type res struct {
		c   *CommConn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := AcceptComm(ctx, ms, ds, 18515, CommParams{Retry: 7, QPTimeout: 14}, func() { close(listening) })
		acc <- res{c, err}
	}()
	<-listening
	cli, err := DialComm(ctx, mc, dc, netip.MustParseAddr("192.0.2.2"), netip.MustParseAddrPort("192.0.2.1:18515"), CommParams{Retry: 7, QPTimeout: 14})
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	srv := r.c
	if a, _ := cli.CM().QP().Query(); a.Timeout != 14 {
		t.Errorf("ACK timeout %d", a.Timeout)
	}
	sc, ss := NewSession(cli, Client, V606), NewSession(srv, Server, V629)
	sc.RDMACM, ss.RDMACM = true, true
	done := make(chan error, 1)
	go func() {
		err := ss.ExchangeVersions(ctx)
		if err == nil {
			_, err = ss.ExchangeSysData(ctx, DefaultSysData)
		}
		if err == nil {
			_, err = ss.ExchangeMTU(ctx, 3)
		}
		if err == nil {
			_, err = ss.ExchangeRecord(ctx, Record{QPN: 0x13})
		}
		done <- err
	}()
	if err := sc.ExchangeVersions(ctx); err != nil || sc.Peer != V606 {
		t.Fatalf("versions: peer %q, %v", sc.Peer, err)
	}
	if _, err := sc.ExchangeSysData(ctx, DefaultSysData); err != nil {
		t.Fatal(err)
	}
	if mtu, err := sc.ExchangeMTU(ctx, 5); err != nil || mtu != 3 {
		t.Fatalf("MTU %v %v", mtu, err)
	}
	if rec, err := sc.ExchangeRecord(ctx, Record{QPN: 0x12}); err != nil || rec.QPN != 0x13 {
		t.Fatalf("record %+v %v", rec, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Nobody sends: the deadline ends the read.
	cli.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := cli.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v", err)
	}
	cli.SetDeadline(time.Time{})
	if err := srv.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Read(make([]byte, 4)); !errors.Is(err, io.EOF) {
		t.Errorf("read after the peer disconnected: %v", err)
	}
	cli.Close()
}

// TestDialCommWaitsForListener: perftest -R's client started before its
// server meets no listener, and the server's CM rejects its REQ (reason
// 8); roced's client tries again (GOROCE_SERVER_WAIT) and reaches the
// server that listens once that REJ has been seen, where perftest's
// client would have failed. The order is the CM's events', not a sleep's.
func TestDialCommWaitsForListener(t *testing.T) {
	t.Setenv("GOROCE_SERVER_WAIT", "1m")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	memnet := mem.NewNet(1)
	ds, ms := memCM(t, memnet, "192.0.2.1")
	dc, mc := memCM(t, memnet, "192.0.2.2")
	type res struct {
		c   *CommConn
		err error
	}
	dial := make(chan res, 1)
	go func() {
		c, err := DialComm(ctx, mc, dc, netip.MustParseAddr("192.0.2.2"), netip.MustParseAddrPort("192.0.2.1:18515"), CommParams{Retry: 7, QPTimeout: 14})
		dial <- res{c, err}
	}()
	for rejected := false; !rejected; {
		select {
		case ev := <-mc.Events():
			var rej *cm.RejectError
			rejected = ev.Type == cm.EventRejected && errors.As(ev.Err, &rej) && rej.Reason == mad.RejInvalidServiceID
		case r := <-dial:
			t.Fatalf("DialComm returned before any REJ: %v", r.err)
		case <-ctx.Done():
			t.Fatal("no REJ for the REQ nobody listens for")
		}
	}
	acc := make(chan res, 1)
	go func() {
		c, err := AcceptComm(ctx, ms, ds, 18515, CommParams{Retry: 7, QPTimeout: 14}, nil)
		acc <- res{c, err}
	}()
	if r := <-dial; r.err != nil {
		t.Fatalf("the client, its server listening now: %v", r.err)
	}
	if r := <-acc; r.err != nil {
		t.Fatalf("the server: %v", r.err)
	}
}
