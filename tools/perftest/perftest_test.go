package perftest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestVersionClaims(t *testing.T) {
	tests := []struct{ client, claim Version }{
		{"6.06", V606}, {"6.10", V606}, {"6.24", V624}, {"6.26", V624},
		{"6.28", V628}, {"6.29", V629}, {"6.31", V629}, {"7.0", V629},
	}
	for _, tt := range tests {
		if got := ServerClaim(tt.client); got != tt.claim {
			t.Errorf("ServerClaim(%s) = %s, want %s", tt.client, got, tt.claim)
		}
	}
	neg := []struct {
		local, peer Version
		want        bool
	}{
		{V629, V629, true}, {V629, V624, false}, {V624, V629, false},
		{V629, V628, true}, {V624, V628, true}, {V628, V606, true},
		{V606, V606, false}, {V629, "6.31", true},
	}
	for _, tt := range neg {
		if got := Negotiates(tt.local, tt.peer); got != tt.want {
			t.Errorf("Negotiates(%s, %s) = %v", tt.local, tt.peer, got)
		}
	}
	if !V606.sendsDone() || V624.sendsDone() || V629.sendsDone() {
		t.Error("done rule")
	}
}

func TestParseVersion(t *testing.T) {
	b, _ := Version("6.24").Marshal()
	if v, err := ParseVersion(b); err != nil || v != "6.24" {
		t.Fatalf("%q %v", v, err)
	}
	old := make([]byte, 16)
	copy(old, "5.60")
	if _, err := ParseVersion(old); err == nil || !strings.Contains(err.Error(), "older than 5.70") {
		t.Errorf("5.60: %v", err)
	}
	junk := make([]byte, 16)
	copy(junk, "hello")
	if _, err := ParseVersion(junk); err == nil {
		t.Error("garbage version accepted")
	}
	if _, err := ParseVersion(b[:8]); err == nil {
		t.Error("short version accepted")
	}
	if _, err := Version(strings.Repeat("9", 16)).Marshal(); err == nil {
		t.Error("16-character version marshalled")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := Record{LID: 0, OutReads: 1, QPN: 0x1b, PSN: 0xfecf38, RKey: 0xa17, VAddr: 0x55b62ac6a000,
		GID: netip.MustParseAddr("::ffff:198.51.100.1").As16()}
	want := "0000:0001:00001b:fecf38:00000a17:000055b62ac6a000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:33:64:01:00000000:\x00"
	if got := string(r.Marshal(true)); got != want {
		t.Fatalf("Marshal = %q", got)
	}
	back, err := ParseRecord([]byte(want))
	if err != nil || back != r {
		t.Fatalf("ParseRecord = %+v %v", back, err)
	}
	short := r.Marshal(false)
	if len(short) != RecordSizeNoGID {
		t.Fatalf("no-GID record is %d bytes", len(short))
	}
	back, err = ParseRecord(short)
	r.GID = [16]byte{}
	if err != nil || back != r {
		t.Fatalf("no-GID round trip %+v %v", back, err)
	}
}

func TestRecordErrors(t *testing.T) {
	good := Record{QPN: 1}.Marshal(true)
	mut := func(i int, c byte) []byte {
		b := append([]byte(nil), good...)
		b[i] = c
		return b
	}
	tests := []struct {
		in   []byte
		want string
	}{
		{good[:100], "100 bytes"},
		{mut(107, 'x'), "NUL"},
		{mut(0, 'g'), "bad LID"},
		{mut(4, '0'), "fields"},
		{mut(50, 'z'), "bad GID byte 0"},
		{mut(98, 'q'), "bad SRQN"},
	}
	for _, tt := range tests {
		_, err := ParseRecord(tt.in)
		var re *RecordError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
}

func sampleParams() Params {
	p := Params{Verb: VerbWrite, Tst: TstBW, ReportFmt: ReportMiB, Size: 64, Iters: 20, NumQPs: 1, Duration: 5}
	copy(p.Attr.FWVer[:], "0.0.0")
	p.Attr.VendorID = 0xffffff
	p.Attr.MaxQPRdAtom = 128
	p.Attr.MaxPkeys = 64
	p.Attr.LocalCAAckDelay = 15
	p.Attr.PhysPortCnt = 1
	return p
}

func TestParamsLayout(t *testing.T) {
	p := sampleParams()
	b := p.Marshal()
	if len(b) != NegotiateSize {
		t.Fatalf("%d bytes", len(b))
	}
	// Offsets from the README's table.
	if b[11] != VerbWrite || b[15] != TstBW || b[39] != 64 || b[47] != 20 || b[59] != 5 {
		t.Errorf("big-endian fields misplaced: % x", b[:64])
	}
	if string(b[80:85]) != "0.0.0" || b[80+96] != 0xff || b[80+99] != 0 {
		t.Errorf("attr misplaced: % x", b[80:184])
	}
	// max_qp_rd_atom is the 10th int after hw_ver, little-endian.
	if off := 80 + 108 + 9*4; b[off] != 128 || b[off+1] != 0 {
		t.Errorf("max_qp_rd_atom at %d: % x", off, b[off:off+4])
	}
	if b[80+224] != 64 || b[80+226] != 15 || b[80+227] != 1 {
		t.Errorf("tail misplaced: % x", b[80+220:])
	}
	back, err := ParseParams(b)
	if err != nil || back != p {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if _, err := ParseParams(b[:312]); err == nil {
		t.Error("312-byte struct accepted")
	}
}

func TestCompare(t *testing.T) {
	a := sampleParams()
	b := a
	if err := Compare(a, b, V629); err != nil {
		t.Fatal(err)
	}
	b.Verb = VerbSend
	b.Size = 128
	err := Compare(a, b, V629)
	var me *MismatchError
	if !errors.As(err, &me) || me.Error() != "verb mismatch: local=WRITE, remote=SEND" {
		t.Fatalf("err = %v", err)
	}
	if lines := me.Lines(); lines[0] != " verb mismatch: local=WRITE, remote=SEND" || lines[1] != " Failed to negotiate parameters" {
		t.Errorf("lines %q", lines)
	}
	c := a
	c.DataValidation = 1
	if Compare(a, c, V628) != nil || Compare(a, c, V629) == nil {
		t.Error("data_validation is a 6.29 field")
	}
	c = a
	c.Attr.MaxQPRdAtom = 16 // attributes are not compared
	if Compare(a, c, V629) != nil {
		t.Error("attributes compared")
	}
}

func TestBWReport(t *testing.T) {
	r := BWReport{Size: 64, Iters: 100, BWPeak: 1.47, BWAvg: 0.28, MsgRate: 0.004649}
	m := r.Marshal()
	var raw [BWReportSteps][]byte
	for i := range m {
		raw[i] = m[i][:]
	}
	if m[0][7] != 64 || m[1][7] != 100 {
		t.Errorf("% x", m)
	}
	back, err := ParseBWReport(raw)
	if err != nil || back != r {
		t.Fatalf("%+v %v", back, err)
	}
	// A 6.06 server sends stack garbage; its bits must survive.
	nan := math.Float64frombits(0x7ff8dead0000beef)
	nm := BWReport{BWPeak: nan}.Marshal()
	back, err = ParseBWReport([BWReportSteps][]byte{raw[0], raw[1], nm[2][:], raw[3], raw[4]})
	if err != nil || math.Float64bits(back.BWPeak) != 0x7ff8dead0000beef {
		t.Errorf("NaN payload lost: %#x, %v", math.Float64bits(back.BWPeak), err)
	}
	raw[2] = raw[2][:4]
	if _, err := ParseBWReport(raw); err == nil {
		t.Error("short value accepted")
	}
}

// TestPlanCounts checks the sequences the lab README lists.
func TestPlanCounts(t *testing.T) {
	tests := []struct {
		test          Test
		before, after int
		reports       int
	}{
		{WriteBW, 3, 2, 1}, {ReadBW, 3, 2, 1}, {AtomicBW, 3, 2, 1},
		{SendBW, 4, 1, 0}, {WriteLat, 4, 0, 0}, {ReadLat, 4, 1, 0},
		{SendLat, 4, 1, 0}, {AtomicLat, 4, 1, 0},
	}
	for _, tt := range tests {
		for _, role := range []Role{Client, Server} {
			steps := Plan(Shape{Test: tt.test, Role: role, NumQPs: 1, Size: 64}, V624, V624)
			b, a := RecordCounts(steps)
			reports := 0
			for _, s := range steps {
				if s.Kind == StepBWReport {
					reports++
				}
			}
			if b != tt.before || a != tt.after || reports != tt.reports {
				t.Errorf("%v %v: %d/%d records, %d reports; want %d/%d, %d", tt.test, role, b, a, reports, tt.before, tt.after, tt.reports)
			}
		}
	}
	// -q 4 on write_bw: 2q+1 records before the traffic.
	if b, _ := RecordCounts(Plan(Shape{Test: WriteBW, Role: Client, NumQPs: 4}, V624, V624)); b != 9 {
		t.Errorf("write_bw -q 4: %d records before traffic", b)
	}
	// -a on send_bw over UD with MTU 1024: sizes 2..1024, a record before
	// and after each.
	steps := Plan(Shape{Test: SendBW, Role: Client, NumQPs: 1, Method: RunAll, Conn: ConnUD, MTU: 3}, V624, V624)
	n := 0
	for _, s := range steps {
		if s.Kind == StepTraffic {
			n++
		}
	}
	if n != 10 || steps[len(steps)-2].Kind != StepRecord {
		t.Errorf("send_bw -a UD: %d sizes", n)
	}
	if Plan(Shape{Test: WriteBW, Role: Client}, V629, V629)[3].Kind != StepNegotiate {
		t.Error("6.29 pair without negotiation")
	}
}

// TestSessionsMixed runs our client against our server for every pair of
// claimed versions: the server's mirroring must always give both sides
// the same plan.
func TestSessionsMixed(t *testing.T) {
	for _, cv := range []Version{V606, V624, V628, V629, "6.31"} {
		for _, ceiling := range []Version{V606, V624, V628, V629} {
			if cv == "6.31" && ceiling == V606 {
				continue
			}
			t.Run(string(cv)+"-"+string(ceiling), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				a, b := loopback(t)
				p := sampleParams()
				errc := make(chan error, 1)
				go func() {
					s := NewSession(b, Server, ceiling)
					errc <- runSide(ctx, s, p)
				}()
				c := NewSession(a, Client, cv)
				if err := runSide(ctx, c, p); err != nil {
					t.Fatalf("client: %v", err)
				}
				if err := <-errc; err != nil {
					t.Fatalf("server: %v", err)
				}
			})
		}
	}
}

func runSide(ctx context.Context, s *Session, p Params) error {
	if err := s.ExchangeVersions(ctx); err != nil {
		return err
	}
	steps := Plan(Shape{Test: WriteBW, Role: s.role, NumQPs: 1, Size: 64}, s.Local, s.Peer)
	for _, st := range steps {
		var err error
		switch st.Kind {
		case StepSysData:
			_, err = s.ExchangeSysData(ctx, DefaultSysData)
		case StepMTU:
			_, err = s.ExchangeMTU(ctx, 3)
		case StepNegotiate:
			_, err = s.Negotiate(ctx, p, 1)
		case StepRecord:
			_, err = s.ExchangeRecord(ctx, Record{QPN: 0x11, OutReads: 1})
		case StepBWReport:
			_, err = s.ExchangeBWReport(ctx, BWReport{Size: 64, Iters: 20})
		case StepClose:
			err = s.Close(ctx, time.Second)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func TestNegotiateMismatchAndOutReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, b := loopback(t)
	srv := sampleParams()
	srv.Attr.MaxQPRdAtom = 16
	cli := sampleParams()
	go func() {
		s := NewSession(b, Server, V629)
		s.ExchangeVersions(ctx)
		s.Negotiate(ctx, srv, 1)
	}()
	c := NewSession(a, Client, V629)
	if err := c.ExchangeVersions(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := c.Negotiate(ctx, cli, 128)
	if err != nil || !n.Ran || !n.Lowered || n.OutReads != 16 {
		t.Fatalf("%+v %v", n, err)
	}
}

func TestMTU(t *testing.T) {
	if MTU(3).Bytes() != 1024 || MTUFromBytes(4096) != 5 || MTUFromBytes(1000) != 0 {
		t.Error("MTU conversions")
	}
	ctx := context.Background()
	for _, tt := range []struct {
		peer []byte
		mine MTU
		want MTU
	}{{[]byte("3\x00"), 5, 3}, {[]byte("5\x00"), 3, 3}, {[]byte("9\x00"), 3, 3}, {[]byte("x\x00"), 4, 4}} {
		a, b := net.Pipe()
		go func() { buf := make([]byte, 2); b.Read(buf); b.Write(tt.peer); b.Close() }()
		got, err := NewSession(a, Client, V624).ExchangeMTU(ctx, tt.mine)
		if err != nil || got != tt.want {
			t.Errorf("peer %q mine %d: %d %v", tt.peer, tt.mine, got, err)
		}
	}
}

func TestCloseTrailingGarbage(t *testing.T) {
	a, b := loopback(t)
	go func() { b.Write([]byte("junk!!")); b.Close() }()
	s := NewSession(a, Client, V624)
	if err := s.Close(context.Background(), time.Second); !errors.Is(err, ErrTrailing) {
		t.Fatalf("err = %v", err)
	}
}

func TestShortPeer(t *testing.T) {
	a, b := loopback(t)
	go func() {
		buf := make([]byte, 16)
		b.Read(buf)
		b.Write([]byte("6.2"))
		b.Close()
	}()
	s := NewSession(a, Client, V629)
	err := s.ExchangeVersions(context.Background())
	if err == nil || !strings.Contains(err.Error(), "got 3 of 16 bytes") {
		t.Fatalf("err = %v", err)
	}
}

func TestTestNames(t *testing.T) {
	for i := range testNames {
		tt := Test(i)
		got, err := TestByName(tt.Binary())
		if err != nil || got != tt {
			t.Errorf("%v: %v %v", tt, got, err)
		}
	}
	if _, err := TestByName("raw_ethernet_bw"); err == nil {
		t.Error("unknown test accepted")
	}
}

var (
	inf    = math.Inf(1)
	negNaN = math.Copysign(math.NaN(), -1)
)

func TestExchangeRecords(t *testing.T) {
	ctx := context.Background()
	a, b := loopback(t)
	mine := []Record{{QPN: 1, OutReads: 1}, {QPN: 2, OutReads: 1}}
	theirs := []Record{{QPN: 7, OutReads: 1}, {QPN: 8, OutReads: 1}}
	type result struct {
		got []Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := NewSession(b, Server, V629).ExchangeRecords(ctx, theirs)
		done <- result{got, err}
	}()
	got, err := NewSession(a, Client, V629).ExchangeRecords(ctx, mine)
	if err != nil || len(got) != 2 || got[0] != theirs[0] || got[1] != theirs[1] {
		t.Fatalf("%v %v", got, err)
	}
	if srv := <-done; srv.err != nil || len(srv.got) != 2 || srv.got[0] != mine[0] || srv.got[1] != mine[1] {
		t.Fatalf("server got %v, %v", srv.got, srv.err)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(Record{QPN: 0x1b, OutReads: 1}.Marshal(true))
	f.Add(Record{QPN: 0x1b}.Marshal(false))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		back, err := ParseRecord(r.Marshal(len(b) == RecordSize))
		if err != nil || back != r {
			t.Fatalf("round trip of %q: %+v %v", b, back, err)
		}
	})
}

// TestRecordCM: the binary record of the RDMA CM exchange, as perftest
// 6.06 sent it between two rxe devices (ib_write_bw -R, bookworm guest).
func TestRecordCM(t *testing.T) {
	raw, _ := hex.DecodeString("00000000000000010000001200156fde000003b40000000000007fb5ec7f6000" +
		"00000000000000000000ffff0a4d00010000000000000001")
	r, err := ParseRecordCM(raw)
	want := Record{OutReads: 1, QPN: 0x12, PSN: 0x156fde, RKey: 0x3b4, VAddr: 0x7fb5ec7f6000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 15: 1}, GIDIndex: 1}
	if err != nil || r != want {
		t.Fatalf("parsed %+v, %v", r, err)
	}
	if back := r.MarshalCM(); !bytes.Equal(back, raw) {
		t.Errorf("marshalled %x", back)
	}
	// The tools' stack garbage in the padding (seen: 2456) is ignored.
	raw[20], raw[21] = 0x24, 0x56
	if r2, _ := ParseRecordCM(raw); r2 != want {
		t.Errorf("padding changed the record: %+v", r2)
	}
	if _, err := ParseRecordCM(raw[:55]); err == nil {
		t.Error("55 bytes parsed")
	}
	if z := (Record{}).MarshalCM(); len(z) != RecordSizeCM || !bytes.Equal(z, make([]byte, RecordSizeCM)) {
		t.Errorf("zeroed record %x", z)
	}
}

// TestPlanRDMACM: with -R, create_rdma_cm_connection's zeroed handshake,
// the CM connection and another zeroed handshake follow the MTU step (and
// the negotiation), then the plan without -R goes on unchanged.
func TestPlanRDMACM(t *testing.T) {
	for test := WriteBW; test <= AtomicLat; test++ {
		for _, role := range []Role{Client, Server} {
			for _, v := range []Version{V606, V624, V629} {
				s := Shape{Test: test, Role: role, NumQPs: 1, Size: 64}
				plain := Plan(s, v, v)
				s.RDMACM = true
				cm := Plan(s, v, v)
				at := 3
				if Negotiates(v, v) {
					at = 4
				}
				wantMid := []Step{{Kind: StepRecord, Zero: true}, {Kind: StepCMConnect}, {Kind: StepRecord, Zero: true}}
				if len(cm) != len(plain)+3 || !slices.Equal(cm[:at], plain[:at]) ||
					!slices.Equal(cm[at:at+3], wantMid) || !slices.Equal(cm[at+3:], plain[at:]) {
					t.Errorf("%v %v %v: %v", test, role, v, cm)
				}
			}
		}
	}
	// write_bw, as captured (6.06): 1+1 zeroed, then 3 records before
	// the traffic.
	if b, a := RecordCounts(Plan(Shape{Test: WriteBW, Role: Client, NumQPs: 1, RDMACM: true}, V606, V606)); b != 5 || a != 2 {
		t.Errorf("write_bw -R: %d/%d records", b, a)
	}
}

// TestSessionRDMACM: over an RDMA CM exchange the records are the 56-byte
// binary ones and Close writes no "done" (and leaves the connection to
// its owner).
func TestSessionRDMACM(t *testing.T) {
	ctx := context.Background()
	a, b := loopback(t)
	sa, sb := NewSession(a, Client, V606), NewSession(b, Server, V606)
	sa.RDMACM, sb.RDMACM = true, true
	mine, theirs := Record{QPN: 0x12, OutReads: 1, GIDIndex: 1}, Record{QPN: 0x13, OutReads: 1, GIDIndex: 1}
	done := make(chan Record, 1)
	go func() {
		r, err := sb.ExchangeRecord(ctx, theirs)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	got, err := sa.ExchangeRecord(ctx, mine)
	if err != nil || got != theirs || <-done != mine {
		t.Fatalf("%+v %v", got, err)
	}
	if err := sa.Close(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	// Nothing was written: the connection is still open and empty.
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := b.Read(make([]byte, 8)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after Close the peer read %d bytes, %v", n, err)
	}
}
