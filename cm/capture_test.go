package cm

import (
	"reflect"
	"testing"

	"github.com/goroce/goroce/mad"
)

// The interop captures: roced rping against rxe's rping on the lab's
// bookworm guest (kernel 6.1), tcpdump on the host's tap (conformance
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
