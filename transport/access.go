package transport

import ()

// accessSpan is memory an access check granted: the bytes, and the region
// whose lock they hold until release.
type accessSpan struct {
	m *MR
	b []byte
}

// release ends the access.
func (s accessSpan) release() {
	if s.m != nil {
		s.m.endAccess()
	}
}

// localSpan checks an access through an lkey of pd (an SGE of a work
// request) and returns the bytes, locked until release.
func localSpan(pd *PD, lkey uint32, addr uint64, n uint32, need Access) (accessSpan, error) {
	b, m, err := pd.local(lkey, addr, n, need)
	return accessSpan{m: m, b: b}, err
}

// remoteSpan checks an access through an rkey to q, a QP in pd (a RETH
// or AtomicETH), and returns the bytes, locked until release.
func remoteSpan(pd *PD, q *QP, rkey uint32, addr uint64, n uint32, need Access) (accessSpan, error) {
	b, m, err := pd.remote(q, rkey, addr, n, need)
	return accessSpan{m: m, b: b}, err
}
