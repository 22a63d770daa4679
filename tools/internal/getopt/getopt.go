// Package getopt parses command lines the way glibc's getopt_long does, so
// that roced accepts every spelling the real rdma-core and perftest tools
// accept: "-s 64", "-s64", "--size=64", "--size 64", a unique prefix of a
// long option ("--siz=64"), clustered flags ("-eo"), operands anywhere
// (GNU permutation) and "--" to end the options.
package getopt

import (
	"fmt"
	"strings"
)

// ArgKind says whether an option takes an argument.
type ArgKind int

const (
	// NoArg options never take an argument ("-e", "--events").
	NoArg ArgKind = iota
	// RequiredArg options take the next word or the rest of the word.
	RequiredArg
	// OptionalArg options take an argument only when it is attached
	// ("-x5", "--x=5"), as glibc's "::" options.
	OptionalArg
)

// Option describes one option. Short is 0 for long-only options and Long is
// "" for short-only ones.
type Option struct {
	Short byte    // the letter after "-"
	Long  string  // the name after "--"
	Arg   ArgKind // whether it takes an argument
}

// Name is how the option is reported back: its long name, or its short
// letter when it has none.
func (o Option) Name() string {
	if o.Long != "" {
		return o.Long
	}
	return string(o.Short)
}

// Match is one option found on the command line, in command-line order.
type Match struct {
	Option Option // the option found
	// Value is the argument; HasValue tells an empty argument ("--x=")
	// from none.
	Value    string
	HasValue bool // see Value
	// Spelling is the word as the user typed it, for error messages.
	Spelling string
}

// Error is a command-line error worded like glibc's diagnostics.
type Error struct {
	Msg string // the message, as the real tool's getopt prints it
}

// Error returns Msg.
func (e *Error) Error() string { return e.Msg }

// ShowsUsage reports true: the tools answer getopt's complaints (an
// unknown option such as -h, a missing argument) with their usage text,
// and a caller outside tools/ finds that out through this method
// (errors.As with an interface{ ShowsUsage() bool }).
func (e *Error) ShowsUsage() bool { return true }

func errorf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Parse splits args (without the program name) into options and operands.
func Parse(args []string, opts []Option) (found []Match, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			return found, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(arg, "--"):
			m, used, err := parseLong(arg, args[i+1:], opts)
			if err != nil {
				return nil, nil, err
			}
			found = append(found, m)
			i += used
		case len(arg) > 1 && arg[0] == '-':
			ms, used, err := parseShort(arg, args[i+1:], opts)
			if err != nil {
				return nil, nil, err
			}
			found = append(found, ms...)
			i += used
		default:
			// GNU permutation: operands may come before options.
			operands = append(operands, arg)
		}
	}
	return found, operands, nil
}

func parseLong(arg string, rest []string, opts []Option) (Match, int, error) {
	name, value, hasValue := strings.Cut(arg[2:], "=")
	opt, err := lookupLong(name, opts)
	if err != nil {
		return Match{}, 0, err
	}
	m := Match{Option: opt, Spelling: "--" + opt.Long}
	switch opt.Arg {
	case NoArg:
		if hasValue {
			return Match{}, 0, errorf("option '--%s' doesn't allow an argument", opt.Long)
		}
	case OptionalArg:
		m.Value, m.HasValue = value, hasValue
	case RequiredArg:
		if hasValue {
			m.Value, m.HasValue = value, true
			break
		}
		if len(rest) == 0 {
			return Match{}, 0, errorf("option '--%s' requires an argument", opt.Long)
		}
		m.Value, m.HasValue = rest[0], true
		return m, 1, nil
	}
	return m, 0, nil
}

// lookupLong finds an exact long name or else a unique prefix, as glibc.
func lookupLong(name string, opts []Option) (Option, error) {
	var candidates []Option
	for _, o := range opts {
		if o.Long == "" {
			continue
		}
		if o.Long == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.Long, name) {
			candidates = append(candidates, o)
		}
	}
	switch len(candidates) {
	case 0:
		return Option{}, errorf("unrecognized option '--%s'", name)
	case 1:
		return candidates[0], nil
	}
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = "'--" + c.Long + "'"
	}
	return Option{}, errorf("option '--%s' is ambiguous; possibilities: %s", name, strings.Join(names, " "))
}

func parseShort(arg string, rest []string, opts []Option) ([]Match, int, error) {
	var found []Match
	for j := 1; j < len(arg); j++ {
		c := arg[j]
		opt, ok := lookupShort(c, opts)
		if !ok {
			return nil, 0, errorf("invalid option -- '%c'", c)
		}
		m := Match{Option: opt, Spelling: "-" + string(c)}
		switch opt.Arg {
		case NoArg:
			found = append(found, m)
			continue
		case OptionalArg:
			if j+1 < len(arg) {
				m.Value, m.HasValue = arg[j+1:], true
			}
			return append(found, m), 0, nil
		case RequiredArg:
			if j+1 < len(arg) {
				m.Value, m.HasValue = arg[j+1:], true
				return append(found, m), 0, nil
			}
			if len(rest) == 0 {
				return nil, 0, errorf("option requires an argument -- '%c'", c)
			}
			m.Value, m.HasValue = rest[0], true
			return append(found, m), 1, nil
		}
	}
	return found, 0, nil
}

func lookupShort(c byte, opts []Option) (Option, bool) {
	for _, o := range opts {
		if o.Short == c {
			return o, true
		}
	}
	return Option{}, false
}
