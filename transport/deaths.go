package transport

import (
	"errors"
	"sync"
)

// keptDeaths is how many of its QPs' deaths a device keeps: enough for the
// connections of a tool, few enough that a program whose QPs die by the
// thousand holds a bounded record.
const keptDeaths = 16

// deaths keeps the device's last QP deaths, oldest first, for Deaths and
// roced explain: a QP is often destroyed soon after it died, and the
// question "why did it die?" comes after that.
type deaths struct {
	mu     sync.Mutex
	list   []*Death // at most keptDeaths
	total  uint64
	notify func(*Death)
}

// add is the QPs' environment's Died: it runs under the dying QP's lock.
func (s *deaths) add(_ *QP, why error) {
	var d *Death
	if !errors.As(why, &d) {
		return
	}
	s.mu.Lock()
	if len(s.list) == keptDeaths {
		copy(s.list, s.list[1:])
		s.list = s.list[:keptDeaths-1]
	}
	s.list = append(s.list, d)
	s.total++
	s.mu.Unlock()
	if s.notify != nil {
		s.notify(d)
	}
}

// Deaths returns the device's last QP deaths (at most 16), oldest first,
// and how many QPs have died since the device opened. A QP that dies
// because the device closes is among them.
func (d *Device) Deaths() ([]*Death, uint64) {
	d.deaths.mu.Lock()
	defer d.deaths.mu.Unlock()
	return append([]*Death(nil), d.deaths.list...), d.deaths.total
}
