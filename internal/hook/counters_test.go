package hook

import (
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// store has every counter Counters names, one more, and the fields in
// another order, as a device's counters may.
type store struct {
	Extra atomic.Uint64
	countersStore
}

type countersStore struct {
	XRCMisdirected, ClockedPosts, SentPkts, DuplicateRequest, OutOfSeqRequest, RcvdRNRErr atomic.Uint64
	SendRNRErr, RcvdSeqErr, AckDeferred, RetryExceededErr, RetryRNRExceededErr            atomic.Uint64
	CompleterRetryErr, SendErr, RDMASends, RDMARecvs, Malformed, BadState, BadSource      atomic.Uint64
	BadPKey, BadQKey, NoRecvWQE, UCDropped, SentNAKs, SentACKs, Timeouts                  atomic.Uint64
	RetransmittedPkts, GhostResponses, DuplicateResponses, XRCBadSRQN, XRCDomainViolation atomic.Uint64
}

func TestBindCounters(t *testing.T) {
	var s store
	c := BindCounters(&s)
	v, sv := reflect.ValueOf(c), reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		v.Field(i).Interface().(*atomic.Uint64).Add(uint64(i + 1))
		if got := sv.FieldByName(name).Addr().Interface().(*atomic.Uint64).Load(); got != uint64(i+1) {
			t.Errorf("%s: the store's counter reads %d after the view's counted %d", name, got, i+1)
		}
	}
	if s.Extra.Load() != 0 {
		t.Errorf("a counter the view does not name counted %d", s.Extra.Load())
	}
}

func TestBindCountersMissing(t *testing.T) {
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, "no atomic.Uint64 counter SentPkts") {
			t.Fatalf("binding a store without SentPkts: %v", r)
		}
	}()
	BindCounters(&struct{ DuplicateRequest atomic.Uint64 }{})
}

func TestNewCounters(t *testing.T) {
	c := NewCounters()
	v := reflect.ValueOf(c)
	seen := map[*atomic.Uint64]string{}
	for i := range v.NumField() {
		p := v.Field(i).Interface().(*atomic.Uint64)
		name := v.Type().Field(i).Name
		if p == nil {
			t.Fatalf("%s has no storage", name)
		}
		if other, ok := seen[p]; ok {
			t.Fatalf("%s and %s share storage", name, other)
		}
		seen[p] = name
	}
}
