package mr

import "github.com/goroce/goroce/internal/hook"

// The key table, PD reference counts and access checks are the engine's:
// they go to it through internal/hook rather than being exported, so a
// program gets its PDs from a device (whose key table then names their
// regions, and which refuses another device's PD) and registers memory,
// and nothing else.
func init() {
	hook.NewKeys = newKeys
	hook.HoldPD = (*PD).hold
	hook.ReleasePD = (*PD).release
	hook.ClosedPD = (*PD).closed
	hook.LocalAccess = (*PD).local
	hook.RemoteAccess = (*PD).remote
	hook.EndAccess = (*MR).endAccess
	hook.InvalidateRKey = (*PD).invalidateRKey
	hook.BindMW = bindMW
	hook.NextType1Key = (*MW).nextType1Key
	hook.RegFast = regFast
}

// newKeys makes a device's key table and returns what the device does
// with it: allocate a PD whose regions get their keys there, tell whether
// a PD is one of those, and close it when the device closes.
func newKeys() (allocPD func() *PD, owns func(*PD) bool, closeKeys func()) {
	t := newTable()
	return func() *PD { return newPD(t) }, func(pd *PD) bool { return pd != nil && pd.table == t }, t.close
}
