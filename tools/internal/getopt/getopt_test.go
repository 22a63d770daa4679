package getopt

import (
	"reflect"
	"strings"
	"testing"
)

var testOpts = []Option{
	{Short: 'p', Long: "port", Arg: RequiredArg},
	{Short: 's', Long: "size", Arg: RequiredArg},
	{Short: 'e', Long: "events", Arg: NoArg},
	{Short: 'o', Long: "odp", Arg: NoArg},
	{Long: "report_gbits", Arg: NoArg},
	{Long: "report-both", Arg: NoArg},
	{Short: 'x', Long: "opt", Arg: OptionalArg},
}

// pairs flattens matches to "name=value" strings for easy comparison.
func pairs(ms []Match) []string {
	var out []string
	for _, m := range ms {
		s := m.Option.Name()
		if m.HasValue {
			s += "=" + m.Value
		}
		out = append(out, s)
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		args     string
		want     []string
		operands []string
	}{
		{"-s 64", []string{"size=64"}, nil},
		{"-s64", []string{"size=64"}, nil},
		{"--size=64", []string{"size=64"}, nil},
		{"--size 64", []string{"size=64"}, nil},
		{"--siz=64", []string{"size=64"}, nil},
		{"-eo", []string{"events", "odp"}, nil},
		{"-es64", []string{"events", "size=64"}, nil},
		{"-es 64", []string{"events", "size=64"}, nil},
		{"host -s 64", []string{"size=64"}, []string{"host"}},
		{"-s 64 host -e", []string{"size=64", "events"}, []string{"host"}},
		{"-e -- -s", []string{"events"}, []string{"-s"}},
		{"-", nil, []string{"-"}},
		{"--report_gbits", []string{"report_gbits"}, nil},
		{"-x", []string{"opt"}, nil},
		{"-x5", []string{"opt=5"}, nil},
		{"-x 5", []string{"opt"}, []string{"5"}},
		{"--opt=", []string{"opt="}, nil},
		{"--size=", []string{"size="}, nil},
	}
	for _, tt := range tests {
		found, operands, err := Parse(strings.Fields(tt.args), testOpts)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if got := pairs(found); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: options %q, want %q", tt.args, got, tt.want)
		}
		if !reflect.DeepEqual(operands, tt.operands) {
			t.Errorf("%q: operands %q, want %q", tt.args, operands, tt.operands)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ args, want string }{
		{"-z", "invalid option -- 'z'"},
		{"-s", "option requires an argument -- 's'"},
		{"--size", "option '--size' requires an argument"},
		{"--events=1", "option '--events' doesn't allow an argument"},
		{"--nope", "unrecognized option '--nope'"},
		{"--report", "option '--report' is ambiguous; possibilities: '--report_gbits' '--report-both'"},
		{"-ez", "invalid option -- 'z'"},
	}
	for _, tt := range tests {
		_, _, err := Parse(strings.Fields(tt.args), testOpts)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestStrtol(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"64", 64, true},
		{"0x40", 64, true},
		{"0X40", 64, true},
		{"010", 8, true},
		{"08", 0, true},
		{"0", 0, true},
		{" -12", -12, true},
		{"+7", 7, true},
		{"64abc", 64, true},
		{"abc", 0, false},
		{"", 0, false},
		{"0x", 0, true}, // C reads the "0" and stops at the 'x'
		{"99999999999999999999999", 1<<63 - 1, true},
	}
	for _, tt := range tests {
		got, ok := Strtol(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Strtol(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
