package transport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// end is one side of a connected RC pair over the in-memory link.
type end struct {
	dev *transport.Device
	pd  *transport.PD
	cq  *transport.CQ
	qp  *transport.QP
}

// connected opens two devices on an in-memory net of their own and
// connects an RC QP on each, each letting the other READ and WRITE. The
// devices close when the test ends, if it has not closed them.
func connected(tb testing.TB) (a, b *end) {
	tb.Helper()
	network := mem.NewNet(1)
	var ends [2]*end
	var eps [2]transport.Endpoint
	for i, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		link, err := network.Attach(netip.MustParseAddr(addr), mem.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		dev, err := transport.Open(link, transport.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { dev.Close() })
		pd := dev.AllocPD()
		c := dev.CreateCQ(16)
		q, err := dev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
			Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			tb.Fatal(err)
		}
		if eps[i], err = dev.LocalEndpoint(q); err != nil {
			tb.Fatal(err)
		}
		ends[i] = &end{dev, pd, c, q}
	}
	for i, e := range ends {
		err := e.dev.Connect(e.qp, eps[i], eps[1-i], transport.ConnectOptions{Access: transport.RemoteRead | transport.RemoteWrite})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return ends[0], ends[1]
}

// rdma posts op (WRITE or READ) of all of local to remote's first bytes
// and waits for its completion; it fails unless the operation succeeded.
func (e *end) rdma(op transport.WROpcode, local, remote *transport.MR) error {
	err := e.qp.PostSend(&transport.SendWR{Opcode: op, Flags: transport.Signaled, SGL: []transport.SGE{local.SGE(0, local.Len())},
		RemoteAddr: remote.Addr(), RKey: remote.RKey()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a bound on a hang
	defer cancel()
	var wc [1]transport.WC
	if _, err := e.cq.PollWait(ctx, wc[:]); err != nil {
		return err
	}
	if wc[0].Status != transport.Success {
		return fmt.Errorf("%v: %v", op, wc[0].Status)
	}
	return nil
}

// TestMappingRDMA: a peer's WRITE lands in a file mapping and so in the
// file, a READ brings it back into anonymous memory, every byte checked;
// the file mapping cannot be closed while its device is open and the
// region registered, and can once the device is closed.
func TestMappingRDMA(t *testing.T) {
	a, b := connected(t)
	const n = 64 << 10
	ps := os.Getpagesize()

	src, err := transport.MapAnonymous(n, transport.MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := transport.MapAnonymous(n, transport.MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "target")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(n + 2*ps)); err != nil {
		t.Fatal(err)
	}
	file, err := transport.MapFile(f, int64(ps), n, transport.MapOptions{}) // one page in, so the offset counts
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 1)
	}
	srcMR, err := a.pd.Register(src.Bytes(), 0)
	if err != nil {
		t.Fatal(err)
	}
	dstMR, err := a.pd.Register(dst.Bytes(), transport.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	fileMR, err := b.pd.Register(file.Bytes(), transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}

	if err := a.rdma(transport.WRRDMAWrite, srcMR, fileMR); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(make([]byte, ps), src.Bytes()...), make([]byte, ps)...)
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("the file after the WRITE differs at byte %d of %d", i, len(want))
	}

	if err := a.rdma(transport.WRRDMARead, dstMR, fileMR); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(dst.Bytes(), src.Bytes()); i >= 0 {
		t.Fatalf("READ back differs at byte %d", i)
	}

	if err := file.Close(); !errors.Is(err, transport.ErrInUse) {
		t.Fatalf("Close of the file mapping while registered: %v", err)
	}
	b.dev.Close()
	if err := fileMR.Dereg(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Dereg after Device.Close: %v", err)
	}
	if err := file.Close(); err != nil {
		t.Fatalf("Close of the file mapping after Device.Close: %v", err)
	}
	for _, r := range []*transport.MR{srcMR, dstMR} {
		if err := r.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*transport.Mapping{src, dst} {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// firstDiff returns the first index where a and b differ, -1 if equal.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
