package qp

import "github.com/goroce/goroce/internal/hook"

// The operations only the device calls (creating the verbs objects in its
// environment, destroying and shutting down QPs, and driving their receive
// path and deferred work) go to it through internal/hook rather than being
// exported: a QP made or destroyed outside its device would be unknown to
// the device's QPN table, or stay in it.
func init() {
	hook.NewQP = newQP
	hook.NewSRQ = newSRQ
	hook.NewAH = newAH
	hook.DestroyQP = (*QP).destroy
	hook.ShutdownQP = (*QP).shutdown
	hook.RunQP = (*QP).runScheduled
	hook.ReceiveQP = (*QP).receive
	hook.EndBurstQP = (*QP).endBurst
}
