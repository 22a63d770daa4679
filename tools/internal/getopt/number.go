package getopt

import "strings"

// Strtol reads an integer the way C's strtol(s, NULL, 0) does, which is how
// the rdma-core examples read their numeric flags: leading blanks and a
// sign, then "0x" for hex, a leading "0" for octal, decimal otherwise; it
// stops at the first character that is not a digit and returns 0 when there
// is none. ok reports whether at least one digit was read, so callers that
// want to be stricter than C can be.
func Strtol(s string) (v int64, ok bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	base := int64(10)
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && hexDigit(s[2]) >= 0:
		base, s = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base = 8
	}
	for len(s) > 0 {
		d := int64(hexDigit(s[0]))
		if d < 0 || d >= base {
			break
		}
		ok = true
		if v < (1<<62)/base { // saturate instead of wrapping, as strtol clamps
			v = v*base + d
		} else {
			v = 1<<63 - 1
		}
		s = s[1:]
	}
	if neg {
		v = -v
	}
	return v, ok
}

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Atoi reads a number as C's atoi does, which is how rping and cmatose
// read theirs: blanks, a sign, decimal digits, anything after ignored. ok
// is false when there is no digit or the value does not fit an int32,
// where atoi's result is undefined.
func Atoi(s string) (int, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	v, n := 0, 0
	for ; n < len(s) && s[n] >= '0' && s[n] <= '9'; n++ {
		if v = v*10 + int(s[n]-'0'); v >= 1<<31 {
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	return v, n > 0
}

// HasPrefixFold is C's strncasecmp(word, arg, strlen(word)) == 0, as the
// librdmacm examples read a keyword option: arg starts with word,
// whatever the case.
func HasPrefixFold(arg, word string) bool {
	return len(arg) >= len(word) && strings.EqualFold(arg[:len(word)], word)
}
