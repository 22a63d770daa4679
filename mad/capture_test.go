package mad

import (
	"bytes"
	"net/netip"
	"reflect"
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
)

// The real rxe captures live in bth's testdata (one copy in the tree);
// /work/shared/rxe-peer/captures*/CAPTURES.md describes them.
const (
	capC5      = "../bth/testdata/captures/rping_c5.pcap"        // kernel 6.1: REQ, REP, RTU, ..., DREQ, DREP
	capRej28   = "../bth/testdata/captures/rping_rej28.pcap"     // kernel 6.1: REQ answered by REJ 28
	capTrixie5 = "../bth/testdata/captures-trixie/rping_c5.pcap" // kernel 6.12: as rping_c5
)

// gsiQKey is the Q_Key of QP1, which every CM MAD carries in its DETH.
const gsiQKey = 0x80010000

// capturedMADs returns the MAD of every packet of the capture sent to QP1,
// by frame number, checking the framing CM MADs travel in: UD SEND_ONLY,
// P_Key 0xffff, DETH source QP 1 and the GSI Q_Key, a 256-byte payload.
func capturedMADs(t testing.TB, file string) map[int][]byte {
	t.Helper()
	pkts, err := pcapfile.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]byte{}
	for i, p := range pkts {
		fr, err := bth.DecodeLink(bth.LinkType(p.LinkType), p.Data)
		if err != nil {
			continue // not RoCEv2: rping's other traffic is all RoCEv2, but be lenient
		}
		pk, err := bth.Parse(fr.RoCE())
		if err != nil {
			t.Fatalf("%s #%d: %v", file, i+1, err)
		}
		if pk.BTH().DestQP() != 1 {
			continue
		}
		where := file + " #" + strconv.Itoa(i+1)
		if pk.OpCode() != bth.UDSendOnly || pk.BTH().PKey() != 0xffff {
			t.Fatalf("%s: to QP1 as %v P_Key %#x", where, pk.OpCode(), pk.BTH().PKey())
		}
		if d := pk.DETH(); d.SrcQP() != 1 || d.QKey() != gsiQKey {
			t.Fatalf("%s: DETH source QP %d Q_Key %#x", where, d.SrcQP(), d.QKey())
		}
		if len(pk.Payload()) != Len {
			t.Fatalf("%s: MAD of %d bytes", where, len(pk.Payload()))
		}
		out[i+1] = pk.Payload()
	}
	return out
}

func gid(s string) bth.GID { return bth.GIDFromAddr(netip.MustParseAddr(s)) }

// cmaPrivate builds a REQ's private data: rdma_cm's header, the rest zero.
func cmaPrivate(t testing.TB, port uint16, src, dst string) []byte {
	p := make([]byte, REQPrivateDataLen)
	h := CMAHdr(p[:CMAHdrLen])
	h.SetPort(port)
	if err := h.SetAddrs(netip.MustParseAddr(src), netip.MustParseAddr(dst)); err != nil {
		t.Fatal(err)
	}
	return p
}

// rpingREQ is the REQ rping's client sent in these captures, with the
// fields that differ between runs as arguments. Every value is what tshark
// 4.0.17 prints for it (`tshark -r FILE -Y infiniband.mad -O infiniband -V`);
// the service ID is tshark's "Prefix 0000000001, Protocol 0x06, Destination
// Port 0x1c06" (rping's port 7174 in the TCP port space). tshark shows the
// alternate path all zero and the private data after the rdma_cm header as
// zeros; it names no SAP-supported bit (it prints byte 139's low bits as
// reserved, 0).
//
// Except the primary flow label and packet rate, where tshark 4.0.17 is
// wrong: the kernel (ibta_vol1_c12.h, CM_REQ_PRIMARY_FLOW_LABEL and
// _PACKET_RATE) puts a 20-bit flow label in the top of the 32-bit word at
// REQ byte 88 and the rate in the low 6 bits of byte 91, while tshark
// prints the top 20 bits of the 24-bit word at 88 as the label and the
// low 6 bits of byte 88 as the rate. The flow labels here are the kernel's
// reading (the word's low 12 bits are 0 in all three captures, as they
// must be for a 20-bit label and rate 0, IB_RATE_PORT_CURRENT);
// TestTsharkFlowLabelMisread checks that tshark's numbers are that other
// reading of the same bytes.
func rpingREQ(t testing.TB, comm uint32, guid uint64, qpn, psn, flow uint32, ack uint8, port uint16) REQFields {
	return REQFields{
		LocalCommID: comm, ServiceID: 0x0000000001061c06, LocalCAGUID: guid,
		LocalQKey: 0, LocalQPN: qpn, ResponderResources: 1, LocalEECN: 0, InitiatorDepth: 1, RemoteEECN: 0,
		RemoteCMResponseTimeout: 0x14, TransportServiceType: 0, EndToEndFlowControl: false,
		StartingPSN: psn, LocalCMResponseTimeout: 0x14, RetryCount: 7, PKey: 0xffff,
		PathMTU: 3, RDCExists: false, RNRRetryCount: 7, MaxCMRetries: 0xf, SRQ: false, ExtendedTransportType: 0,
		Primary: PathFields{
			LocalLID: 65535, RemoteLID: 65535,
			LocalGID: gid("198.51.100.1"), RemoteGID: gid("198.51.100.2"),
			FlowLabel: flow, PacketRate: 0, TrafficClass: 0, HopLimit: 0x40,
			SL: 0, SubnetLocal: false, LocalACKTimeout: ack,
		},
		PrivateData: cmaPrivate(t, port, "198.51.100.1", "198.51.100.2"),
	}
}

// capCase is one captured CM MAD and what tshark says of it.
type capCase struct {
	file  string
	frame int
	tid   uint64
	attr  AttrID
	want  any // the message's Fields value
}

func capCases(t *testing.T) []capCase {
	z := func(n int) []byte { return make([]byte, n) }
	const tidC5, tidRej, tidTrixie = 0x00000004e96a983e, 0x00000004b4831a59, 0x000000085348386a
	return []capCase{
		{capC5, 1, tidC5, AttrREQ, rpingREQ(t, 0x3e986ae9, 0xa07fd1fffe54af46, 0x11, 0xc1596a, 0x06947, 0x13, 0x869f)},
		{capC5, 2, tidC5, AttrREP, REPFields{LocalCommID: 0x3d986ae9, RemoteCommID: 0x3e986ae9, LocalQPN: 0x11,
			StartingPSN: 0xabe72e, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 0x0f,
			RNRRetryCount: 7, LocalCAGUID: 0x50762ffffebbd66a, PrivateData: z(REPPrivateDataLen)}},
		{capC5, 3, tidC5, AttrRTU, PairFields{0x3e986ae9, 0x3d986ae9, z(RTUPrivateDataLen)}},
		{capC5, 64, tidC5, AttrDREQ, DREQFields{0x3e986ae9, 0x3d986ae9, 0x11, z(DREQPrivateDataLen)}},
		{capC5, 65, tidC5, AttrDREP, PairFields{0x3d986ae9, 0x3e986ae9, z(DREPPrivateDataLen)}},

		{capRej28, 1, tidRej, AttrREQ, rpingREQ(t, 0x591a83b4, 0x8ce5b2fffeb36c19, 0x27, 0xff7171, 0x3cf18, 0x13, 0xa2ae)},
		// The passive side had no connection yet, so its local comm ID is 0.
		{capRej28, 2, tidRej, AttrREJ, REJFields{LocalCommID: 0, RemoteCommID: 0x591a83b4, MessageRejected: MsgREQ,
			RejectInfoLength: 0, Reason: RejConsumerDefined, ARI: z(REJARILen), PrivateData: z(REJPrivateDataLen)}},

		{capTrixie5, 1, tidTrixie, AttrREQ, rpingREQ(t, 0x6a384853, 0xb07443fffed0ccb5, 0x2a, 0xef0536, 0x1ec4b, 0x11, 0x931b)},
		{capTrixie5, 2, tidTrixie, AttrREP, REPFields{LocalCommID: 0x65384853, RemoteCommID: 0x6a384853, LocalQPN: 0x29,
			StartingPSN: 0xc5db10, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 0x0f,
			RNRRetryCount: 7, LocalCAGUID: 0xd0bc48fffe651298, PrivateData: z(REPPrivateDataLen)}},
		{capTrixie5, 3, tidTrixie, AttrRTU, PairFields{0x6a384853, 0x65384853, z(RTUPrivateDataLen)}},
		{capTrixie5, 64, tidTrixie, AttrDREQ, DREQFields{0x6a384853, 0x65384853, 0x29, z(DREQPrivateDataLen)}},
		{capTrixie5, 65, tidTrixie, AttrDREP, PairFields{0x65384853, 0x6a384853, z(DREPPrivateDataLen)}},
	}
}

// fieldsOf reads the message of m's attribute as its Fields value.
func fieldsOf(m MAD) any {
	switch m.AttrID() {
	case AttrREQ:
		return m.REQ().Fields()
	case AttrMRA:
		return m.MRA().Fields()
	case AttrREJ:
		return m.REJ().Fields()
	case AttrREP:
		return m.REP().Fields()
	case AttrRTU:
		return m.RTU().Fields()
	case AttrDREQ:
		return m.DREQ().Fields()
	case AttrDREP:
		return m.DREP().Fields()
	case AttrLAP:
		return m.LAP().Fields()
	case AttrAPR:
		return m.APR().Fields()
	case AttrSIDRREQ:
		return m.SIDRREQ().Fields()
	case AttrSIDRREP:
		return m.SIDRREP().Fields()
	}
	return nil
}

// putFields writes a Fields value into the message of m's attribute.
func putFields(m MAD, f any) error {
	switch f := f.(type) {
	case REQFields:
		return m.REQ().Put(f)
	case MRAFields:
		return m.MRA().Put(f)
	case REJFields:
		return m.REJ().Put(f)
	case REPFields:
		return m.REP().Put(f)
	case PairFields:
		return m.RTU().Put(f) // RTU and DREP share the layout
	case DREQFields:
		return m.DREQ().Put(f)
	case LAPFields:
		return m.LAP().Put(f)
	case APRFields:
		return m.APR().Put(f)
	case SIDRREQFields:
		return m.SIDRREQ().Put(f)
	case SIDRREPFields:
		return m.SIDRREP().Put(f)
	}
	panic("unknown fields type")
}

// TestCaptures: every CM MAD rxe sent in the rping captures parses, each of
// its fields is the value tshark prints, and building the message from
// those fields gives the captured 256 bytes exactly.
func TestCaptures(t *testing.T) {
	mads := map[string]map[int][]byte{}
	seen := 0
	for _, c := range capCases(t) {
		if mads[c.file] == nil {
			mads[c.file] = capturedMADs(t, c.file)
		}
		where := c.file + " #" + strconv.Itoa(c.frame)
		raw, ok := mads[c.file][c.frame]
		if !ok {
			t.Fatalf("%s: no MAD to QP1", where)
		}
		seen++
		m, err := ParseCM(raw)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		// The header as tshark prints it: base version 1, class 0x07, class
		// version 2, method Send (0x03), status 0, class specific 0,
		// attribute modifier 0.
		if m.BaseVersion() != 1 || m.Class() != ClassCM || m.ClassVersion() != 2 || m.Method() != MethodSend ||
			m.Status() != 0 || m.ClassSpecific() != 0 || m.TID() != c.tid || m.AttrID() != c.attr || m.AttrMod() != 0 {
			t.Errorf("%s: header %d %v %d %#x %#x %#x %#x %v %#x", where, m.BaseVersion(), m.Class(), m.ClassVersion(),
				m.Method(), m.Status(), m.ClassSpecific(), m.TID(), m.AttrID(), m.AttrMod())
		}
		if got := fieldsOf(m); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %v:\n got %+v\nwant %+v", where, c.attr, got, c.want)
		}
		built := NewCM(c.attr)
		built.SetTID(c.tid)
		if err := putFields(built, c.want); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if !bytes.Equal(built, raw) {
			t.Errorf("%s %v: built from fields differs from the capture:\n got %x\nwant %x", where, c.attr, []byte(built), raw)
		}
	}
	// Every MAD to QP1 in the three files is one of the cases.
	total := 0
	for _, ms := range mads {
		total += len(ms)
	}
	if total != seen {
		t.Errorf("%d MADs to QP1 in the captures, %d checked", total, seen)
	}
}

// TestCaptureCMAHdr reads rdma_cm's header out of each captured REQ as a
// consumer would (ParseCMAHdr on the private data) and checks it against
// tshark's "IP CM Private Data": version 0.0, IP version 4, source port,
// source and destination IP.
func TestCaptureCMAHdr(t *testing.T) {
	for _, c := range []struct {
		file string
		port uint16
	}{{capC5, 0x869f}, {capRej28, 0xa2ae}, {capTrixie5, 0x931b}} {
		m, err := ParseCM(capturedMADs(t, c.file)[1])
		if err != nil {
			t.Fatal(err)
		}
		h, err := ParseCMAHdr(m.REQ().PrivateData())
		if err != nil {
			t.Fatal(err)
		}
		if h.Version() != 0 || h.IPVersion() != 4 || h.Port() != c.port ||
			h.SrcAddr() != netip.MustParseAddr("198.51.100.1") || h.DstAddr() != netip.MustParseAddr("198.51.100.2") {
			t.Errorf("%s: version %d IP %d port %#x %v -> %v", c.file, h.Version(), h.IPVersion(), h.Port(), h.SrcAddr(), h.DstAddr())
		}
		ps, port, ok := SplitServiceID(m.REQ().ServiceID())
		if !ok || ps != PortSpaceTCP || port != 7174 || ServiceID(ps, port) != m.REQ().ServiceID() {
			t.Errorf("%s: service ID %#x splits to %v %d %v", c.file, m.REQ().ServiceID(), ps, port, ok)
		}
	}
}

// TestTsharkFlowLabelMisread pins down where tshark 4.0.17 and the kernel
// disagree (see rpingREQ): tshark's printed primary flow label and packet
// rate of each captured REQ are the top 20 bits of the 24 bits at REQ byte
// 88 and the low 6 bits of byte 88, not the fields the kernel wrote.
func TestTsharkFlowLabelMisread(t *testing.T) {
	for _, c := range []struct {
		file                   string
		tsharkFlow, tsharkRate uint32 // as tshark printed them
	}{{capC5, 0x00069, 0x06}, {capRej28, 0x003cf, 0x3c}, {capTrixie5, 0x001ec, 0x1e}} {
		m, err := ParseCM(capturedMADs(t, c.file)[1])
		if err != nil {
			t.Fatal(err)
		}
		r := m.REQ()
		b := r[offREQPrimaryPath+offPathFlowLabel:]
		if get24(b)>>12 != c.tsharkFlow || uint32(b[0]&0x3f) != c.tsharkRate {
			t.Errorf("%s: bytes % x do not explain tshark's %#x/%#x", c.file, b[:4], c.tsharkFlow, c.tsharkRate)
		}
		if p := r.Primary(); p.FlowLabel()>>8 != c.tsharkFlow || p.PacketRate() != 0 {
			t.Errorf("%s: flow label %#x rate %d", c.file, p.FlowLabel(), p.PacketRate())
		}
	}
}
