package mad

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
)

// tsharkCase is a message built here with every field tshark decodes set
// to a distinct non-zero value, and what tshark must print for each.
type tsharkCase struct {
	mad  MAD
	want map[string]any // uint64, netip.Addr or []byte
}

// TestTsharkBuilt: the setters, checked by an independent decoder. The
// captures have many fields at zero (SRQ, flow control, the alternate
// path, RD's EECNs, a REJ's ARI); here each is non-zero, each MAD rides in
// the UD SEND_ONLY frame of a captured REQ (ICRC recomputed), and tshark
// 4.0.17 decodes it. tshark's REQ flow labels and packet rates are left
// out: it reads them from the wrong bits (see rpingREQ). So are the
// primary GIDs: in a frame carried over IPv4, tshark 4.0.17 shows them
// only as IPv4 addresses (the captures' 198.51.100.x, TestCaptures).
func TestTsharkBuilt(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark is the independent decoder for this test and is not installed (apt-get install tshark; make deps installs it): %v", err)
	}
	gid6 := func(s string) bth.GID { return bth.GIDFromAddr(netip.MustParseAddr(s)) }
	ari := bytes.Repeat([]byte{0xa5}, REJARILen)

	req := NewCM(AttrREQ)
	priv := make([]byte, REQPrivateDataLen)
	h := CMAHdr(priv[:CMAHdrLen])
	h.SetPort(0x9999)
	if err := h.SetAddrs(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")); err != nil {
		t.Fatal(err)
	}
	priv[CMAHdrLen] = 0x77
	if err := req.REQ().Put(REQFields{
		LocalCommID: 0x11223344, ServiceID: ServiceID(PortSpaceTCP, 0x4321), LocalCAGUID: 0x0102030405060708,
		LocalQKey: 0x0a0b0c0d, LocalQPN: 0xabcdef, ResponderResources: 5, LocalEECN: 0x123456, InitiatorDepth: 6,
		RemoteEECN: 0x654321, RemoteCMResponseTimeout: 0x15, TransportServiceType: 1, EndToEndFlowControl: true,
		StartingPSN: 0x7a7b7c, LocalCMResponseTimeout: 0x16, RetryCount: 5, PKey: 0x8001, PathMTU: 5,
		RDCExists: true, RNRRetryCount: 6, MaxCMRetries: 0xe, SRQ: true, ExtendedTransportType: 3,
		Primary: PathFields{LocalLID: 0x1234, RemoteLID: 0x5678, LocalGID: gid6("2001:db8::a"), RemoteGID: gid6("2001:db8::b"),
			FlowLabel: 0xfffff, PacketRate: 0x3f, TrafficClass: 0x2c, HopLimit: 0x3f, SL: 0xa, SubnetLocal: true, LocalACKTimeout: 0x1d},
		Alternate: PathFields{LocalLID: 0x9abc, RemoteLID: 0xdef0, LocalGID: gid6("2001:db8::c"), RemoteGID: gid6("2001:db8::d"),
			FlowLabel: 0x12345, PacketRate: 0x21, TrafficClass: 0x44, HopLimit: 0x55, SL: 0x5, SubnetLocal: true, LocalACKTimeout: 0x0e},
		PrivateData: priv,
	}); err != nil {
		t.Fatal(err)
	}
	rep := NewCM(AttrREP)
	if err := rep.REP().Put(REPFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, LocalQKey: 0x11111111,
		LocalQPN: 0x222222, LocalEECN: 0x333333, StartingPSN: 0x444444, ResponderResources: 7, InitiatorDepth: 8,
		TargetACKDelay: 0x1b, FailoverAccepted: 2, EndToEndFlowControl: true, RNRRetryCount: 5, SRQ: true,
		LocalCAGUID: 0xfedcba9876543210}); err != nil {
		t.Fatal(err)
	}
	rej := NewCM(AttrREJ)
	if err := rej.REJ().Put(REJFields{LocalCommID: 0x0a0a0a0a, RemoteCommID: 0x0b0b0b0b, MessageRejected: MsgREP,
		RejectInfoLength: 0x45, Reason: RejInvalidServiceID, ARI: ari}); err != nil {
		t.Fatal(err)
	}
	rtu, dreq, drep := NewCM(AttrRTU), NewCM(AttrDREQ), NewCM(AttrDREP)
	rtu.RTU().SetLocalCommID(0x21212121)
	rtu.RTU().SetRemoteCommID(0x31313131)
	if err := dreq.DREQ().Put(DREQFields{LocalCommID: 0x41414141, RemoteCommID: 0x51515151, RemoteQPN: 0x00beef}); err != nil {
		t.Fatal(err)
	}
	drep.DREP().SetLocalCommID(0x61616161)
	drep.DREP().SetRemoteCommID(0x71717171)

	cases := []tsharkCase{
		{req, map[string]any{
			"infiniband.cm.req": uint64(0x11223344), "infiniband.cm.req.serviceid": uint64(0x0000000001064321),
			"infiniband.cm.req.localcaguid": uint64(0x0102030405060708), "infiniband.cm.req.localqkey": uint64(0x0a0b0c0d),
			"infiniband.cm.req.localqpn": uint64(0xabcdef), "infiniband.cm.req.responderres": uint64(5),
			"infiniband.cm.req.localeecn": uint64(0x123456), "infiniband.cm.req.initdepth": uint64(6),
			"infiniband.cm.req.remoteeecn": uint64(0x654321), "infiniband.cm.req.remoteresptout": uint64(0x15),
			"infiniband.cm.req.transpsvctype": uint64(1), "infiniband.cm.req.e2eflowctrl": uint64(1),
			"infiniband.cm.req.startpsn": uint64(0x7a7b7c), "infiniband.cm.req.localresptout": uint64(0x16),
			"infiniband.cm.req.retrcount": uint64(5), "infiniband.cm.req.pkey": uint64(0x8001),
			"infiniband.cm.req.pppmtu": uint64(5), "infiniband.cm.req.rdcexist": uint64(1),
			"infiniband.cm.req.rnrretrcount": uint64(6), "infiniband.cm.req.maxcmretr": uint64(0xe),
			"infiniband.cm.req.srq": uint64(1), "infiniband.cm.req.ext_transport": uint64(3),
			"infiniband.cm.req.prim_locallid": uint64(0x1234), "infiniband.cm.req.prim_remotelid": uint64(0x5678),
			"infiniband.cm.req.prim_tfcclass": uint64(0x2c), "infiniband.cm.req.prim_hoplim": uint64(0x3f),
			"infiniband.cm.req.prim_sl": uint64(0xa), "infiniband.cm.req.prim_subnetlocal": uint64(1),
			"infiniband.cm.req.prim_localacktout": uint64(0x1d),
			"infiniband.cm.req.alt_locallid":      uint64(0x9abc), "infiniband.cm.req.alt_remotelid": uint64(0xdef0),
			"infiniband.cm.req.alt_localgid":  netip.MustParseAddr("2001:db8::c").AsSlice(),
			"infiniband.cm.req.alt_remotegid": netip.MustParseAddr("2001:db8::d").AsSlice(),
			"infiniband.cm.req.alt_tfcclass":  uint64(0x44), "infiniband.cm.req.alt_hoplim": uint64(0x55),
			"infiniband.cm.req.alt_sl": uint64(5), "infiniband.cm.req.alt_subnetlocal": uint64(1),
			"infiniband.cm.req.alt_localacktout": uint64(0x0e),
			"infiniband.cm.req.ip_cm.ipv":        uint64(6), "infiniband.cm.req.ip_cm.sport": uint64(0x9999),
			"infiniband.cm.req.ip_cm.sip6": netip.MustParseAddr("2001:db8::1"),
			"infiniband.cm.req.ip_cm.dip6": netip.MustParseAddr("2001:db8::2"),
		}},
		{rep, map[string]any{
			"infiniband.cm.rep": uint64(0x01020304), "infiniband.cm.rep.remotecommid": uint64(0x05060708),
			"infiniband.cm.rep.localqkey": uint64(0x11111111), "infiniband.cm.rep.localqpn": uint64(0x222222),
			"infiniband.cm.rep.localeecn": uint64(0x333333), "infiniband.cm.rep.startpsn": uint64(0x444444),
			"infiniband.cm.rep.respres": uint64(7), "infiniband.cm.rep.initdepth": uint64(8),
			"infiniband.cm.rep.tgtackdelay": uint64(0x1b), "infiniband.cm.rep.failoveracc": uint64(2),
			"infiniband.cm.rep.e2eflowctrl": uint64(1), "infiniband.cm.rep.rnrretrcount": uint64(5),
			"infiniband.cm.rep.srq": uint64(1), "infiniband.cm.rep.localcaguid": uint64(0xfedcba9876543210),
		}},
		{rej, map[string]any{
			"infiniband.cm.rej.localcommid": uint64(0x0a0a0a0a), "infiniband.cm.rej.remotecommid": uint64(0x0b0b0b0b),
			"infiniband.cm.rej.msgrej": uint64(1), "infiniband.cm.rej.rejinfolen": uint64(0x45),
			"infiniband.cm.rej.reason": uint64(8), "infiniband.cm.rej.ari": ari,
		}},
		{rtu, map[string]any{"infiniband.cm.rtu.localcommid": uint64(0x21212121), "infiniband.cm.rtu.remotecommid": uint64(0x31313131)}},
		{dreq, map[string]any{"infiniband.cm.dreq.localcommid": uint64(0x41414141),
			"infiniband.cm.dreq.remotecommid": uint64(0x51515151), "infiniband.cm.req.remoteqpneecn": uint64(0x00beef)}},
		{drep, map[string]any{"infiniband.cm.drsp.localcommid": uint64(0x61616161), "infiniband.cm.drsp.remotecommid": uint64(0x71717171)}},
	}

	// The carrier: the first frame of rping_c5, a REQ to QP1.
	pkts, err := pcapfile.ReadFile(capC5)
	if err != nil {
		t.Fatal(err)
	}
	pcap := filepath.Join(t.TempDir(), "built.pcap")
	f, err := os.Create(pcap)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, pkts[0].LinkType); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		frame := append([]byte(nil), pkts[0].Data...)
		fr, err := bth.DecodeLink(bth.LinkType(pkts[0].LinkType), frame)
		if err != nil {
			t.Fatal(err)
		}
		copy(fr.RoCE()[bth.BTHLen+bth.DETHLen:], c.mad)
		fr.PutICRC()
		ci := pkts[0].Info
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// One tshark run for all the frames: each row has the fields of its own
	// message and empty columns for the others'.
	var names []string
	col := map[string]int{}
	args := []string{"-r", pcap, "-n", "-T", "fields", "-E", "separator=\t"}
	for _, c := range cases {
		for name := range c.want {
			col[name] = len(names)
			names = append(names, name)
			args = append(args, "-e", name)
		}
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	rows := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(rows) != len(cases) {
		t.Fatalf("tshark printed %d rows for %d frames", len(rows), len(cases))
	}
	for i, c := range cases {
		got := strings.Split(rows[i], "\t")
		if len(got) != len(names) {
			t.Fatalf("%v: tshark printed %q", c.mad.AttrID(), rows[i])
		}
		for name, want := range c.want {
			if !tsharkEqual(got[col[name]], want) {
				t.Errorf("%v: %s: tshark %q, want %v", c.mad.AttrID(), name, got[col[name]], want)
			}
		}
	}
}

// tsharkEqual compares one of tshark's -T fields values with an expected
// number, address or byte string.
func tsharkEqual(got string, want any) bool {
	switch w := want.(type) {
	case uint64:
		n, err := strconv.ParseUint(got, 0, 64)
		return err == nil && n == w
	case netip.Addr:
		a, err := netip.ParseAddr(got)
		return err == nil && a == w
	case []byte:
		b, err := hex.DecodeString(strings.ReplaceAll(got, ":", ""))
		return err == nil && bytes.Equal(b, w)
	}
	return false
}
