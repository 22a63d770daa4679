package getopt

import "testing"

func TestAtoi(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"10", 10, true}, {"  -3x", -3, true}, {"+7", 7, true}, {"0x10", 0, true},
		{"", 0, false}, {"x", 0, false}, {"-", 0, false}, {"2147483647", 2147483647, true}, {"2147483648", 0, false},
	} {
		if v, ok := Atoi(tc.in); v != tc.want || ok != tc.ok {
			t.Errorf("Atoi(%q) = %d, %v; want %d, %v", tc.in, v, ok, tc.want, tc.ok)
		}
	}
}
