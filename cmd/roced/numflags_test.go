package main

import (
	"strings"
	"testing"
	"time"
)

// bounded runs roced's args and returns its exit status and output. A
// command that took its flags for a run would wait for a peer that never
// comes: it is reported rather than waited for, after a bound far longer
// than parsing a command line takes even on a loaded machine.
func bounded(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(args, &out, &errw) }()
	select {
	case code = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("roced %q still runs: it did not refuse its command line\n%s%s", args, out.String(), errw.String())
	}
	return code, out.String(), errw.String()
}

// numberFlags are, for each command, command lines each with one number
// flag given "abc" (and what the command needs besides to get that far):
// every flag roced reads as a number, the tool's and roced's own.
var numberFlags = map[string][][]string{}

func init() {
	pp := [][]string{{"-p"}, {"-i"}, {"-s"}, {"-r"}, {"-n"}, {"-l"}, {"-g"}, {"--qp-timeout"},
		{"--loss"}, {"--dup"}, {"--reorder"}, {"--corrupt"}, {"--delay"}, {"--seed"}}
	for _, name := range []string{"rc_pingpong", "uc_pingpong", "ud_pingpong", "srq_pingpong"} {
		flags := append([][]string(nil), pp...)
		if name != "ud_pingpong" {
			flags = append(flags, []string{"-m"}) // ud has no -m
		}
		if name == "srq_pingpong" {
			flags = append(flags, []string{"-q"})
		}
		numberFlags[name] = flags
	}
	pt := [][]string{{"-p"}, {"-i"}, {"-m"}, {"-s"}, {"-n"}, {"-t"}, {"-u"}, {"-S"}, {"-x"}, {"-T"}, {"-L"},
		{"-Q"}, {"-l"}, {"-D"}, {"-f"}, {"-w"}, {"-y"}, {"--tclass"}, {"--retry_count"}, {"--pkey_index"},
		{"--latency_gap"}, {"--flow_label"}, {"--wait_destroy"}, {"--loss"}, {"--seed"}, {"--delay"}}
	for _, name := range []string{"send_bw", "send_lat", "write_bw", "write_lat", "read_bw", "read_lat", "atomic_bw", "atomic_lat"} {
		flags := append([][]string(nil), pt...)
		if strings.HasSuffix(name, "_bw") {
			flags = append(flags, []string{"-q"})
		}
		switch {
		case strings.HasPrefix(name, "send"), strings.HasPrefix(name, "write"):
			flags = append(flags, []string{"-r"}, []string{"-I"})
		default:
			flags = append(flags, []string{"-o"})
		}
		numberFlags[name] = flags
	}
	numberFlags["rping"] = [][]string{{"-s", "-C"}, {"-s", "-S"}, {"-s", "-p"}}
	numberFlags["rdma_server"] = [][]string{{"-p"}, {"--accept-delay"}}
	numberFlags["rdma_client"] = [][]string{{"-p"}}
	numberFlags["ucmatose"] = [][]string{{"-c"}, {"-C"}, {"-S"}, {"-p"}}
	numberFlags["udaddy"] = [][]string{{"-c"}, {"-C"}, {"-S"}, {"-p"}, {"--port"}}
	numberFlags["cmtime"] = [][]string{{"-c"}, {"-r"}, {"-t"}, {"-q"}, {"-m"}, {"-n"}, {"-p"}}
	numberFlags["conform"] = [][]string{{"-g"}, {"--port"}, {"--peer-gid"}, {"--dead-wait"}, {"--peer-start"}}
	numberFlags["decode"] = [][]string{{"--ladder", "--qp"}, {"--ladder", "--packets"}, {"--ladder", "--count"}}
	numberFlags["stats"] = [][]string{{}}   // its PID operand
	numberFlags["gids"] = nil               // no number flag
	numberFlags["explain"] = [][]string{{}} // its PID operand
	numberFlags["serve"] = nil              // no number flag
}

// TestNumberFlags: a number flag given what is no number is refused: a
// non-zero exit status and, first on stderr, a line naming the flag and
// the value, never a stack trace, never a run that waits for a peer (the
// C tools read "abc" as 0, and "-n abc" left a server waiting forever).
func TestNumberFlags(t *testing.T) {
	for name := range commands {
		cases, ok := numberFlags[name]
		if !ok {
			t.Errorf("roced %s: no entry in numberFlags: list its number flags", name)
		}
		for _, c := range cases {
			args := append(append([]string{name}, c...), "abc")
			if name == "decode" {
				args = append(args, "x.pcap")
			}
			code, _, errw := bounded(t, args...)
			first, _, _ := strings.Cut(errw, "\n")
			flag := ""
			if len(c) > 0 {
				flag = c[len(c)-1]
			}
			// A message names a flag by its spelling (Go's flag package
			// by its name after one dash).
			named := strings.Contains(first, flag) || strings.HasPrefix(flag, "--") && strings.Contains(first, flag[1:])
			if code == 0 || !strings.Contains(first, "abc") || !named || strings.Contains(errw, "goroutine ") {
				t.Errorf("roced %q: exit %d, stderr:\n%s\nwant a non-zero exit and a first line naming %s and abc", args, code, errw, flag)
			}
		}
	}
}
