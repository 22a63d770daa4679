package cq

import "github.com/goroce/goroce/internal/hook"

// Creating a CQ, adding a completion and ending the queue on Close are the
// engine's: they go to it through internal/hook rather than being
// exported, so a program gets its CQs from a device (which reports their
// overruns and ends them on Close) and reads them, and nothing else.
func init() {
	hook.NewCQ = newCQ
	hook.PushCQ = (*CQ).push
	hook.ShutdownCQ = (*CQ).shutdown
	hook.MirrorCQ = (*CQ).setMirror
	hook.ProgressCQ = (*CQ).setProgress
}
