package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/transport"
)

// TestExplainCommand: two devices of this process (serving the stats
// socket as any goroce program does) connect an RC pair, and a WRITE to a
// key the responder never issued kills both QPs. roced explain then says
// why each died, with the rule, and draws their last packets: the WRITE
// and the NAK that answered it.
func TestExplainCommand(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var out, errb bytes.Buffer
	if rc := run([]string{"explain"}, &out, &errb); rc != 0 || !strings.HasPrefix(out.String(), "no QP has entered ERR") {
		t.Fatalf("no instance: rc %d, %q %q", rc, out.String(), errb.String())
	}
	// Addresses of its own: other packages' tests bind 127.0.0.1 and .2.
	type side struct {
		e  *endpoint.Endpoint
		r  *transport.MR
		c  *transport.CQ
		q  *transport.QP
		ep transport.Endpoint
	}
	var s [2]side
	for i, a := range []string{"127.0.18.4", "127.0.18.5"} {
		e, err := endpoint.Open(endpoint.Config{Dev: a, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		d := e.Device
		pd := d.AllocPD()
		r, err := pd.Register(make([]byte, 4096), transport.LocalWrite|transport.RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		c := d.CreateCQ(16)
		q, err := d.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
			Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		ep, err := d.LocalEndpoint(q)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = side{e, r, c, q, ep}
	}
	for i := range s {
		o := transport.ConnectOptions{Access: transport.RemoteWrite}
		if err := s[i].e.Device.Connect(s[i].q, s[i].ep, s[1-i].ep, o); err != nil {
			t.Fatal(err)
		}
	}
	badKey := s[1].r.RKey() ^ 0x100
	err := s[0].q.PostSend(&transport.SendWR{WRID: 9, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{s[0].r.SGE(0, 64)}, RemoteAddr: s[1].r.Addr(), RKey: badKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := make([]transport.WC, 1)
	if n, err := s[0].c.PollWait(ctx, wc); n != 1 || err != nil || wc[0].Status != transport.RemAccessErr {
		t.Fatalf("completion %+v (%d, %v); want a remote access error", wc, n, err)
	}
	// The responder's QP died before it sent the NAK the requester got.
	for _, x := range s {
		if x.q.Death() == nil {
			t.Fatalf("%v has no death", x.q)
		}
	}
	out.Reset()
	if rc := run([]string{"explain", fmt.Sprint(os.Getpid())}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{
		"goroce0: RC QP 0x", "entered ERR: NAK Remote Access Error received",
		fmt.Sprintf("work request 9 (RDMA_WRITE of 64 bytes at va 0x%x rkey 0x%x) completed with remote access error", s[1].r.Addr(), badKey),
		"rule: IBA 9.9.3",
		"goroce1: RC QP 0x", "entered ERR: request refused by this QP as responder",
		"error: qp: WRITE rkey 0x",
		"RDMA WRITE Only", "NAK remote access error",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("roced explain lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "moved to ERR by the consumer") {
		t.Errorf("without -a, a consumer's move is shown:\n%s", text)
	}
	if rc := run([]string{"explain", "x"}, &out, &errb); rc != 2 {
		t.Fatalf("bad PID: rc %d", rc)
	}
}
