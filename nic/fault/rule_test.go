package fault

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

func u32(v uint32) *uint32 { return &v }

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rule // Text is filled in from in
		err  string
	}{
		{in: "drop", want: Rule{Dir: Both, Action: Drop}},
		{in: "tx opcode=RDMA_WRITE_MIDDLE psn=+3 nth=1 drop", want: Rule{Dir: Tx,
			Opcodes: []bth.OpCode{7, 39, 71, 167}, PSN: &PSNRange{3, 3, true}, Nth: 1, Action: Drop}},
		{in: "rx opcode=RC_ACKNOWLEDGE,0x11 qpn=0x12 psn=5-9 size=0-64 dup", want: Rule{Dir: Rx,
			Opcodes: []bth.OpCode{17, 17}, QPN: u32(0x12), PSN: &PSNRange{5, 9, false}, Size: &[2]int{0, 64}, Action: Duplicate}},
		{in: "  delay=2ms  ", want: Rule{Dir: Both, Action: Delay, Delay: 2 * time.Millisecond}},
		{in: "opcode=17 set syndrome=0x60 msn=3 noicrc", want: Rule{Dir: Both, Opcodes: []bth.OpCode{17},
			Action: Rewrite, Set: []Set{{FieldSyndrome, 0x60}, {FieldMSN, 3}}, KeepICRC: true}},
		{in: "set opcode=RC_SEND_ONLY psn=0xffffff va=0xffffffffffffffff", want: Rule{Dir: Both, Action: Rewrite,
			Set: []Set{{FieldOpcode, 4}, {FieldPSN, 0xffffff}, {FieldVA, 1<<64 - 1}}}},
		{in: "trunc=12", want: Rule{Dir: Both, Action: Truncate, Trunc: 12}},
		{in: "badicrc", want: Rule{Dir: Both, Action: SpoilICRC}},
		{in: "rx ecn", want: Rule{Dir: Rx, Action: MarkCE}},
		{in: "", err: "empty fault rule"},
		{in: "tx", err: "no action"},
		{in: "drop dup", err: "two actions"},
		{in: "tx rx drop", err: "more than one direction"},
		{in: "opcode=WRITE drop", err: `opcode "WRITE": unknown`},
		{in: "qpn=0x1000000 drop", err: "above 16777215"},
		{in: "psn=9-5 drop", err: "range ends before it starts"},
		{in: "nth=0 drop", err: "counting starts at 1"},
		{in: "nth=x drop", err: "not a number"},
		{in: "delay=-1ms", err: "must be positive"},
		{in: "delay=soon", err: "invalid duration"},
		{in: "trunc=4", err: "at least its 12-byte BTH"},
		{in: "set", err: "set needs FIELD=VALUE"},
		{in: "set color=red", err: "no such field"},
		{in: "set padcnt=4", err: "above 3"},
		{in: "set opcode=RDMA_WRITE_MIDDLE", err: "give the transport"},
		{in: "drop noicrc", err: "noicrc goes with set or trunc"},
		{in: "frob", err: `unknown word "frob"`},
	} {
		r, err := ParseRule(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error %v, want one line with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		tc.want.Text = strings.Join(strings.Fields(tc.in), " ")
		if !reflect.DeepEqual(r, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.in, r, tc.want)
		}
	}
}

// FuzzParseRule: any input gives a rule or a one-line error, never a
// panic; a rule parsed has an action, a direction, and parses again from
// its Text to the same rule.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"tx opcode=RDMA_WRITE_MIDDLE psn=+3 nth=1 drop", "rx set msn=1 noicrc",
		"size=1-9 trunc=20", "qpn=0x11 delay=1ms", "opcode=4,5 badicrc", "psn=+0-7 dup"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error for %q: %v", s, err)
			}
			return
		}
		if r.Action == 0 || r.Dir == 0 || r.Dir&^Both != 0 {
			t.Fatalf("%q: rule without action or direction: %+v", s, r)
		}
		if r.Action == Truncate && r.Trunc < bth.BTHLen {
			t.Fatalf("%q: truncates into the BTH", s)
		}
		again, err := ParseRule(r.Text)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%q does not parse again from %q: %v", s, r.Text, err)
		}
	})
}

func TestSetFlag(t *testing.T) {
	var c Config
	for _, kv := range [][2]string{{"loss", "0.25"}, {"dup", "tx:0.5"}, {"delay", "rx:2ms,tx:0"},
		{"seed", "0x10"}, {"fault-rule", "tx nth=3 drop"}, {"fault-rule", "rx dup"}} {
		if err := c.SetFlag(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if c.Tx.Loss != 0.25 || c.Rx.Loss != 0.25 || c.Tx.Duplicate != 0.5 || c.Rx.Duplicate != 0 ||
		c.Rx.Delay != 2*time.Millisecond || c.Tx.Delay != 0 || c.Seed != 16 || len(c.Rules) != 2 || !c.Active() {
		t.Fatalf("%+v", c)
	}
	for _, kv := range [][2]string{{"loss", "1.5"}, {"loss", "tx:0.1,tx:0.2"}, {"dup", "up:0.1"},
		{"delay", "1"}, {"seed", "-1"}, {"corrupt", "NaN"}, {"fault-rule", "tx"}} {
		if err := c.SetFlag(kv[0], kv[1]); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("--%s %s: error %v", kv[0], kv[1], err)
		}
	}
}
