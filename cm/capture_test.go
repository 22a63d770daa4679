package cm

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/goroce/goroce/mad"
)

// The interop captures: roced rping against rxe's rping on the lab's
// bookworm guest (kernel 6.1), tcpdump on the host's tap (interop
// README, "RDMA CM"): rping_roced_client.pcap is `roced rping -c` with
// rxe's `rping -s`, rping_roced_server.pcap `roced rping -s` with rxe's
// `rping -c`, each -v -V -C 10 -S 64.
const (
	capRocedClient = "testdata/rping_roced_client.pcap" // 198.18.7.1 roced, 198.18.7.2 rxe
	capRocedServer = "testdata/rping_roced_server.pcap"
)

// anonymous returns a CM message's fields with what differs from one
// connection to the next zeroed: communication IDs, QPNs, PSNs, CA GUIDs,
// the path's GIDs and flow label, and the rdma_cm header's port and
// addresses.
func anonymous(m mad.MAD) any {
	switch m.AttrID() {
	case mad.AttrREQ:
		f := m.REQ().Fields()
		f.LocalCommID, f.LocalQPN, f.StartingPSN, f.LocalCAGUID = 0, 0, 0, 0
		f.Primary.LocalGID, f.Primary.RemoteGID, f.Primary.FlowLabel = [16]byte{}, [16]byte{}, 0
		f.PrivateData = append([]byte(nil), f.PrivateData...)
		clear(f.PrivateData[:mad.CMAHdrLen])
		return f
	case mad.AttrREP:
		f := m.REP().Fields()
		f.LocalCommID, f.RemoteCommID, f.LocalQPN, f.StartingPSN, f.LocalCAGUID = 0, 0, 0, 0, 0
		return f
	case mad.AttrRTU:
		f := m.RTU().Fields()
		f.LocalCommID, f.RemoteCommID = 0, 0
		return f
	case mad.AttrDREQ:
		f := m.DREQ().Fields()
		f.LocalCommID, f.RemoteCommID, f.RemoteQPN = 0, 0, 0
		return f
	case mad.AttrDREP:
		f := m.DREP().Fields()
		f.LocalCommID, f.RemoteCommID = 0, 0
		return f
	}
	return nil
}

// TestInteropCaptures: in both interop captures the connection is REQ,
// REP, RTU, then DREQ and DREP from the client, all of one transaction;
// the communication IDs pair up; and each message goroce sent is field
// for field what rxe sent in its own rping_c5 exchange but for what
// differs between any two connections (anonymous), and the rdma_cm
// header names the right addresses.
func TestInteropCaptures(t *testing.T) {
	ref := capturedCM(t, capC5)
	for _, c := range []struct {
		file  string
		roced []bool // which of the five messages goroce sent
	}{
		{capRocedClient, []bool{true, false, true, true, false}},
		{capRocedServer, []bool{false, true, false, false, true}},
	} {
		got := capturedCM(t, c.file)
		if len(got) != 5 || len(ref) != 5 {
			t.Fatalf("%s: %d CM MADs", c.file, len(got))
		}
		want := []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP}
		var ms []mad.MAD
		for i, b := range got {
			m, err := mad.ParseCM(b)
			if err != nil || m.AttrID() != want[i] || m.TID() != mad.MAD(got[0]).TID() {
				t.Fatalf("%s #%d: %v %v", c.file, i, err, m.AttrID())
			}
			ms = append(ms, m)
			if !c.roced[i] {
				continue
			}
			r, _ := mad.ParseCM(ref[i])
			if g, w := anonymous(m), anonymous(r); !reflect.DeepEqual(g, w) {
				t.Errorf("%s: goroce's %v differs from rxe's:\n got %+v\nwant %+v", c.file, m.AttrID(), g, w)
			}
		}
		req, rep := ms[0].REQ(), ms[1].REP()
		if rep.RemoteCommID() != req.LocalCommID() || ms[2].RTU().RemoteCommID() != rep.LocalCommID() ||
			ms[3].DREQ().RemoteQPN() != rep.LocalQPN() || ms[4].DREP().RemoteCommID() != req.LocalCommID() {
			t.Errorf("%s: the IDs do not pair up", c.file)
		}
		h, err := mad.ParseCMAHdr(req.PrivateData())
		if err != nil || h.DstAddr() != req.Primary().RemoteGID().Addr().Unmap() || h.SrcAddr() != req.Primary().LocalGID().Addr().Unmap() {
			t.Errorf("%s: rdma_cm header %v", c.file, err)
		}
	}
}

// TestInteropREJ8: rej8_trixie.pcap, on the trixie guest (kernel 6.12):
// roced rping -c to a port rxe does not listen on, then rxe's rping -c to
// a port roced does not listen on. Each REQ is answered by a REJ of
// reason 8 (invalid service ID) answering its transaction and naming its
// communication ID, with no local one; goroce's REJ and rxe's are the
// same but for those.
func TestInteropREJ8(t *testing.T) {
	got := capturedCM(t, "testdata/rej8_trixie.pcap")
	if len(got) != 4 {
		t.Fatalf("%d CM MADs", len(got))
	}
	var rejs []any
	for i := 0; i < 4; i += 2 {
		req, err1 := mad.ParseCM(got[i])
		rej, err2 := mad.ParseCM(got[i+1])
		if err1 != nil || err2 != nil || req.AttrID() != mad.AttrREQ || rej.AttrID() != mad.AttrREJ {
			t.Fatalf("MADs %d, %d: %v %v", i, i+1, err1, err2)
		}
		r := rej.REJ()
		if rej.TID() != req.TID() || r.Reason() != mad.RejInvalidServiceID || r.LocalCommID() != 0 ||
			r.RemoteCommID() != req.REQ().LocalCommID() || r.MessageRejected() != mad.MsgREQ {
			t.Errorf("REJ %d: TID %#x (REQ's %#x) %+v", i/2, rej.TID(), req.TID(), r.Fields())
		}
		f := r.Fields()
		f.RemoteCommID = 0
		rejs = append(rejs, f)
	}
	if !reflect.DeepEqual(rejs[0], rejs[1]) {
		t.Errorf("rxe's REJ and goroce's differ:\n%+v\n%+v", rejs[0], rejs[1])
	}
}

// The udaddy interop captures (bookworm guest, kernel 6.1, tcpdump on the
// guest's eth0; 192.0.2.1 roced, 192.0.2.2 rxe): udaddy_roced_client.pcap
// is `roced udaddy -s 192.0.2.2` with rxe's `udaddy` server (one SIDR
// exchange, ten datagrams each way); udaddy_roced_server.pcap is `roced
// udaddy -c 3` with rxe's `udaddy -c 3` client, then `roced udaddy
// --port 9` (a client) against rxe, where nothing listens on port 9, then
// rxe's `udaddy` client against a roced listening on port 7175 only.
const (
	capUdaddyClient = "testdata/udaddy_roced_client.pcap"
	capUdaddyServer = "testdata/udaddy_roced_server.pcap"
)

// sidrAnonymous returns a SIDR message's fields with what differs from
// one request to the next zeroed: the request ID, the QPN, and the
// rdma_cm header's port and addresses.
func sidrAnonymous(m mad.MAD) any {
	switch m.AttrID() {
	case mad.AttrSIDRREQ:
		f := m.SIDRREQ().Fields()
		f.RequestID = 0
		f.PrivateData = append([]byte(nil), f.PrivateData...)
		clear(f.PrivateData[:mad.CMAHdrLen])
		return f
	case mad.AttrSIDRREP:
		f := m.SIDRREP().Fields()
		f.RequestID, f.QPN = 0, 0
		return f
	}
	return nil
}

// TestInteropSIDR: in the udaddy captures every SIDR_REP answers its
// SIDR_REQ's transaction and request ID; a success names a QP and rdma_cm's
// Q_Key, an unknown port is "unsupported" with the service ID echoed, QPN
// and Q_Key 0, from rxe and from goroce alike; and each message goroce
// sent is field for field rxe's of the same kind but for what differs
// between any two requests (sidrAnonymous).
func TestInteropSIDR(t *testing.T) {
	type pair struct{ req, rep mad.MAD }
	pairs := func(file string) []pair {
		var reqs, reps []mad.MAD
		for _, b := range capturedCM(t, file) {
			m, err := mad.ParseCM(b)
			switch {
			case err != nil:
				t.Fatalf("%s: %v", file, err)
			case m.AttrID() == mad.AttrSIDRREQ:
				reqs = append(reqs, m)
			case m.AttrID() == mad.AttrSIDRREP:
				reps = append(reps, m)
			default:
				t.Fatalf("%s: a %v", file, m.AttrID())
			}
		}
		if len(reqs) != len(reps) {
			t.Fatalf("%s: %d SIDR_REQs, %d SIDR_REPs", file, len(reqs), len(reps))
		}
		var ps []pair
		for i := range reqs {
			ps = append(ps, pair{reqs[i], reps[i]})
		}
		return ps
	}
	client, server := pairs(capUdaddyClient), pairs(capUdaddyServer)
	if len(client) != 1 || len(server) != 5 {
		t.Fatalf("%d and %d SIDR exchanges", len(client), len(server))
	}
	all := append(append([]pair(nil), client...), server...)
	for i, p := range all {
		q, r := p.req.SIDRREQ(), p.rep.SIDRREP()
		h, err := mad.ParseCMAHdr(q.PrivateData())
		if err == nil && (h.DstAddr() != netip.MustParseAddr("192.0.2.1") && h.DstAddr() != netip.MustParseAddr("192.0.2.2") ||
			h.SrcAddr() == h.DstAddr()) {
			t.Errorf("exchange %d: rdma_cm header from %v to %v", i, h.SrcAddr(), h.DstAddr())
		}
		if p.rep.TID() != p.req.TID() || r.RequestID() != q.RequestID() || r.ServiceID() != q.ServiceID() ||
			q.PKey() != 0xffff || err != nil || r.InfoLength() != 0 {
			t.Errorf("exchange %d: SIDR_REQ %#x %+v, SIDR_REP %#x %+v (%v)", i, p.req.TID(), q.Fields(), p.rep.TID(), r.Fields(), err)
		}
		ok := r.Status() == mad.SIDRSuccess && r.QKey() == UDPQKey && r.QPN() >= 0x11 && q.ServiceID() == 0x01111c06
		if i >= 4 { // the two unknown ports
			ok = r.Status() == mad.SIDRUnsupported && r.QKey() == 0 && r.QPN() == 0
		}
		if !ok {
			t.Errorf("exchange %d: %+v", i, r.Fields())
		}
	}
	// Who sent what: goroce's SIDR_REQs (client[0], server[3]) against
	// rxe's (server[0]); goroce's successes (server[0..2]) against rxe's
	// (client[0]); goroce's "unsupported" (server[4]) against rxe's
	// (server[3]), the service IDs aside.
	same := func(what string, g, w any) {
		if !reflect.DeepEqual(g, w) {
			t.Errorf("goroce's %s differs from rxe's:\n got %+v\nwant %+v", what, g, w)
		}
	}
	for _, g := range []mad.MAD{client[0].req, server[3].req} {
		gf, wf := sidrAnonymous(g).(mad.SIDRREQFields), sidrAnonymous(server[0].req).(mad.SIDRREQFields)
		gf.ServiceID, wf.ServiceID = 0, 0
		same("SIDR_REQ", gf, wf)
	}
	for _, p := range server[:3] {
		same("SIDR_REP", sidrAnonymous(p.rep), sidrAnonymous(client[0].rep))
	}
	gf, wf := sidrAnonymous(server[4].rep).(mad.SIDRREPFields), sidrAnonymous(server[3].rep).(mad.SIDRREPFields)
	gf.ServiceID, wf.ServiceID = 0, 0
	same("unsupported SIDR_REP", gf, wf)
}
