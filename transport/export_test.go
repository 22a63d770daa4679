package transport

import (
	"time"

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

// QPEnv is what the device gives a QP, which the harness fills in itself.
type QPEnv = env

// LinkCounters names a link's statistics as Device.Stats lists them.
func LinkCounters(s nic.Stats) []nic.Counter { return linkCounters(s) }

// SetTrace sets the device's trace hook after Open.
func (d *Device) SetTrace(f func(out bool, dg []byte)) { d.trace = f }

// Burst is the receive path's burst, for a test that drives Input by hand.
type Burst = burst

// Flush ends the burst.
func (b *Burst) Flush() { b.flush() }

// Input is the receive path for one frame, within burst b.
func (d *Device) Input(fr nic.Frame, b *Burst) { d.input(fr, b) }

// SetPollActive sets how long receive goroutines stand aside for pollers
// (pollActive) until the test ends; set it before opening devices.
func SetPollActive(t interface{ Cleanup(func()) }, d time.Duration) {
	old := pollActive
	pollActive = d
	t.Cleanup(func() { pollActive = old })
}

// DepartWaited reports whether a goroutine has waited for q's departing
// batches (waitDeparted makes txDone then, and holds q.mu until it waits
// on it): a test's sign that one reached the wait.
func DepartWaited(q *QP) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.txDone != nil
}

// CQQueues is the receive queues an empty poll of c receives on in poll
// mode (CQ.queues; 0: every queue).
func CQQueues(c *CQ) uint64 { return c.queues.Load() }

// SetYieldToWoken replaces how d's receive goroutines let the programs
// their batch completed work for run (yieldToWoken); set it before any
// traffic.
func (d *Device) SetYieldToWoken(f func()) { d.yieldToWoken = f }
