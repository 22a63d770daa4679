package transport_test

import (
	"fmt"
	"strings"
	"sync"

	"github.com/goroce/goroce/bth"
)

// traceRing keeps the last packets a test saw, to print when it fails.
type traceRing struct {
	mu   sync.Mutex
	buf  []string
	next int
}

func newTraceRing(n int) *traceRing { return &traceRing{buf: make([]string, n)} }

func (r *traceRing) hook(who string) func(bool, []byte) {
	return func(out bool, d []byte) {
		f, err := bth.DecodeIP(d)
		if err != nil {
			return
		}
		p, err := bth.Parse(f.RoCE())
		if err != nil {
			return
		}
		dir := "<-"
		if out {
			dir = "->"
		}
		s := fmt.Sprintf("%s%s %v psn=%d", who, dir, p.OpCode(), p.BTH().PSN())
		if a := p.AETH(); a != nil {
			s += " " + a.Syndrome().String()
		}
		if rt := p.RETH(); rt != nil {
			s += fmt.Sprintf(" len=%d", rt.DMALen())
		}
		r.mu.Lock()
		r.buf[r.next%len(r.buf)] = s
		r.next++
		r.mu.Unlock()
	}
}

func (r *traceRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for i := range len(r.buf) {
		if s := r.buf[(r.next+i)%len(r.buf)]; s != "" {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}
