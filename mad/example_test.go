package mad_test

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/mad"
)

// Example builds the REQ an rdma_cm client sends to port 7174 (rping's)
// and reads it back as the passive side would.
func Example() {
	m := mad.NewCM(mad.AttrREQ)
	m.SetTID(0x1234)
	req := m.REQ()
	req.SetLocalCommID(0x3e986ae9)
	req.SetServiceID(mad.ServiceID(mad.PortSpaceTCP, 7174))
	req.SetLocalQPN(0x11)
	req.SetStartingPSN(0xc1596a)
	req.SetPathMTU(3) // 1024
	req.SetRetryCount(7)
	req.SetRNRRetryCount(7)
	req.SetPKey(0xffff)
	hdr := mad.CMAHdr(req.PrivateData()[:mad.CMAHdrLen])
	hdr.SetPort(34463)
	if err := hdr.SetAddrs(netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")); err != nil {
		fmt.Println(err)
		return
	}

	// On receipt: check the MAD, then read the message its attribute names.
	got, err := mad.ParseCM(m)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := got.REQ()
	ps, port, _ := mad.SplitServiceID(r.ServiceID())
	h, err := mad.ParseCMAHdr(r.PrivateData())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%v comm %#x QPN %#x PSN %#x, port space %#x port %d\n", got.AttrID(), r.LocalCommID(), r.LocalQPN(), r.StartingPSN(), uint16(ps), port)
	fmt.Printf("from %v:%d to %v\n", h.SrcAddr(), h.Port(), h.DstAddr())

	_, err = mad.ParseCM(m[:100])
	fmt.Println(err)
	// Output:
	// REQ comm 0x3e986ae9 QPN 0x11 PSN 0xc1596a, port space 0x106 port 7174
	// from 198.51.100.1:34463 to 198.51.100.2
	// mad: wrong length: 100 bytes, want 256
}
