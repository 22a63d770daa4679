package transport

// newKeys makes a device's key table and returns what the device does
// with it: allocate a PD whose regions get their keys there, tell whether
// a PD is one of those, and close it when the device closes.
func newKeys() (allocPD func() *PD, owns func(*PD) bool, closeKeys func()) {
	t := newTable()
	return func() *PD { return newPD(t) }, func(pd *PD) bool { return pd != nil && pd.table == t }, t.close
}
