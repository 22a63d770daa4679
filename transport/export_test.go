package transport

import (
	"net/netip"

	"github.com/goroce/goroce/nic"
)

// What the external tests (package transport_test) reach of the package's
// internals; nothing else is exported for them.

// MADLen is the length of every MAD the GSI QP carries.
const MADLen = madLen

// DestroyQP is the QP's own destroy, which the device's DestroyQP wraps.
var DestroyQP = (*QP).destroy

// What the QP harness (harness_test.go), which runs one QP with no device
// around it, does in the device's place.
var (
	NewKeys    = newKeys
	NewCQ      = newCQ
	NewQP      = newQP
	RunQP      = (*QP).runScheduled
	ReceiveQP  = (*QP).receive
	EndBurstQP = (*QP).endBurst
)

// LinkCounters names a link's statistics as Device.Stats lists them.
func LinkCounters(s nic.Stats) []nic.Counter { return linkCounters(s) }

// AttachGSI attaches h as the device's GSI (QP1) consumer.
func (d *Device) AttachGSI(h func(src, dst netip.Addr, mad []byte)) (detach func(), err error) {
	return d.attachGSI(h)
}

// SendMAD sends one MAD from QP1 at src to QP1 at dst.
func (d *Device) SendMAD(src, dst netip.Addr, mad []byte) error { return d.sendMAD(src, dst, mad) }

// SetTrace sets the device's trace hook after Open.
func (d *Device) SetTrace(f func(out bool, dg []byte)) { d.trace = f }

// Burst is the receive path's burst, for a test that drives Input by hand.
type Burst = burst

// Flush ends the burst.
func (b *Burst) Flush() { b.flush() }

// Input is the receive path for one frame, within burst b.
func (d *Device) Input(fr nic.Frame, b *Burst) { d.input(fr, b) }
