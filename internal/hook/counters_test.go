package hook

import (
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// newStore returns a pointer to a struct with every counter Counters
// names, in reverse order, after one more, as a device's counters may
// order them and have others.
func newStore() reflect.Value {
	ct := reflect.TypeFor[Counters]()
	fields := []reflect.StructField{{Name: "Extra", Type: counterType}}
	for i := ct.NumField() - 1; i >= 0; i-- {
		fields = append(fields, reflect.StructField{Name: ct.Field(i).Name, Type: counterType})
	}
	return reflect.New(reflect.StructOf(fields))
}

func TestBindCounters(t *testing.T) {
	p := newStore()
	c := BindCounters(p.Interface())
	v, sv := reflect.ValueOf(c), p.Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		v.Field(i).Interface().(*atomic.Uint64).Add(uint64(i + 1))
		if got := sv.FieldByName(name).Addr().Interface().(*atomic.Uint64).Load(); got != uint64(i+1) {
			t.Errorf("%s: the store's counter reads %d after the view's counted %d", name, got, i+1)
		}
	}
	if extra := sv.FieldByName("Extra").Addr().Interface().(*atomic.Uint64).Load(); extra != 0 {
		t.Errorf("a counter the view does not name counted %d", extra)
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
