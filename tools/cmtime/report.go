package cmtime

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// step is one of the steps cmtime times (56's enum step; 44 times a
// subset, legacySteps).
type step int

const (
	stepFullConnect step = iota
	stepCreateID
	stepBind
	stepResolveAddr
	stepResolveRoute
	stepCreateQP
	stepInitQPAttr
	stepInitQP
	stepRTRQPAttr
	stepRTRQP
	stepRTSQPAttr
	stepRTSQP
	stepConnect
	stepEstablish
	stepDisconnect
	stepDestroyID
	stepDestroyQP
	stepCount
)

// stepNames are 56's step_str.
var stepNames = [stepCount]string{
	"full connect", "create id", "bind addr", "resolve addr", "resolve route", "create qp",
	"init qp attr", "init qp", "rtr qp attr", "rtr qp", "rts qp attr", "rts qp",
	"cm connect", "establish", "disconnect", "destroy id", "destroy qp",
}

// legacySteps are 44's steps, in its order, with its names ("connect"
// for cm connect, "destroy" for destroy id).
var legacySteps = []struct {
	s    step
	name string
}{
	{stepCreateID, "create id"}, {stepBind, "bind addr"}, {stepResolveAddr, "resolve addr"},
	{stepResolveRoute, "resolve route"}, {stepCreateQP, "create qp"}, {stepConnect, "connect"},
	{stepDisconnect, "disconnect"}, {stepDestroyID, "destroy"},
}

// clock gives cmtime's timestamps: microseconds of a monotonic clock
// (gettime_us), never 0 (0 is "not timed").
type clock struct{ base time.Time }

func newClock() clock { return clock{base: time.Now().Add(-time.Second)} }

func (c clock) now() uint64 { return uint64(time.Since(c.base).Microseconds()) }

// span is a start and an end timestamp; 0 is unset.
type span [2]uint64

// times are one connection's spans (or the run's), by step.
type times [stepCount]span

// report56 prints 56's show_perf: the connection count (qp_conn when the
// test made QPs, cm_conn otherwise), the threads, then per step the
// whole step's time divided by the connections, the whole step's time,
// and over the connections that timed the step their mean, sum, maximum
// and minimum, in microseconds. Its arithmetic is cmtime's, in 32 bits.
func report56(w io.Writer, qps bool, threads int, total times, conns []times) {
	n := uint32(len(conns))
	label := "cm_conn"
	if qps {
		label = "qp_conn"
	}
	fmt.Fprintf(w, "%s        %10d\n", label, len(conns))
	fmt.Fprintf(w, "threads        %10d\n", threads)
	fmt.Fprintf(w, "step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)\n")
	for i := range stepCount {
		var sum, mx uint32
		mn := uint32(math.MaxUint32)
		for _, c := range conns {
			if c[i][0] != 0 && c[i][1] != 0 {
				d := uint32(c[i][1] - c[i][0])
				sum += d
				mx = max(mx, d)
				mn = min(mn, d)
			}
		}
		if mn == math.MaxUint32 {
			mn = 0
		}
		if i == stepFullConnect {
			sum = 0 // "the 'sum' of the full connect is meaningless"
		}
		d := uint32(total[i][1] - total[i][0])
		fmt.Fprintf(w, "%-13s  %10d %10d %10d %10d %10d %10d\n", stepNames[i], d/n, d, sum/n, sum, int32(mx), mn)
	}
}

// report44 prints 44's show_perf: per step the whole step's time in ms,
// the longest connection's in ms, the shortest one's in µs (999999999
// when none timed it) and the whole step's time per connection in µs; the
// bind step only when the client bound (-b).
func report44(w io.Writer, bound bool, total times, conns []times) {
	fmt.Fprintf(w, "step              total ms     max ms     min us  us / conn\n")
	for _, ls := range legacySteps {
		if ls.s == stepBind && !bound {
			continue
		}
		var mx float32
		mn := float32(999999999.)
		for _, c := range conns {
			if c[ls.s][0] != 0 && c[ls.s][1] != 0 {
				us := float32(int64(c[ls.s][1] - c[ls.s][0]))
				mx = max(mx, us)
				mn = min(mn, us)
			}
		}
		us := float32(int64(total[ls.s][1] - total[ls.s][0]))
		fmt.Fprintf(w, "%-13s: %11.2f%11.2f%11.2f%11.2f\n", ls.name, float64(us/1000.), float64(mx/1000.), float64(mn), float64(us/float32(len(conns))))
	}
}

// Row patterns of the two tables: 56's step name, then six integers;
// 44's step name, a colon, then four numbers with two decimals.
var (
	row56 = regexp.MustCompile(`^([a-z ]{13})  ( *-?\d+ ){5} *-?\d+$`)
	row44 = regexp.MustCompile(`^([a-z ]{13}):( *-?\d+\.\d\d){4}$`)
)

// Skeleton is out (cmtime's stdout) with the figures of each table row
// replaced by "#": what is left is fixed for a given run, and compared
// with WantSkeleton.
func Skeleton(out string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		body := strings.TrimSuffix(l, "\n")
		switch {
		case row56.MatchString(body):
			b.WriteString(strings.TrimRight(body[:13], " ") + " #\n")
		case row44.MatchString(body):
			b.WriteString(strings.TrimRight(body[:13], " ") + ": #\n")
		default:
			b.WriteString(l)
		}
	}
	return b.String()
}

// WantSkeleton is the Skeleton of what cmtime of rdma-core v prints on a
// good run of n connections: the server's (server) or the client's, with
// or without the client's -b (bound). 44's server prints nothing; 56's
// sides run three tests and print two tables each.
func WantSkeleton(v Version, server bool, n int, bound bool) string {
	var b strings.Builder
	line := func(s string, a ...any) { fmt.Fprintf(&b, s+"\n", a...) }
	if v == V44 {
		if server {
			return ""
		}
		line("creating id")
		if bound {
			line("binding source address")
		}
		for _, s := range []string{"resolving address", "resolving route", "creating qp", "connecting", "disconnecting", "destroying id"} {
			line("%s", s)
		}
		line("step              total ms     max ms     min us  us / conn")
		for _, ls := range legacySteps {
			if ls.s != stepBind || bound {
				line("%s: #", strings.TrimRight(fmt.Sprintf("%-13s", ls.name), " "))
			}
		}
		return b.String()
	}
	table := func(qps bool) {
		label := "cm_conn"
		if qps {
			label = "qp_conn"
		}
		line("%s        %10d", label, n)
		line("threads        %10d", 1)
		line("step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)")
		for _, s := range stepNames {
			line("%s #", s)
		}
	}
	test := func(first bool) {
		if server {
			line("\tAccepting")
			if first {
				line("\tAllocating verbs resources")
			}
			line("\tDisconnecting")
			return
		}
		line("\tCreating IDs")
		if bound {
			line("\tBinding addresses")
		}
		line("\tResolving addresses")
		line("\tResolving routes")
		line("\tCreating QPs")
		if first {
			line("\tAllocating verbs resources")
		}
		for _, s := range []string{"\tModify QPs to INIT", "\tConnecting", "\tDisconnecting", "\tDestroying QPs", "\tDestroying IDs"} {
			line("%s", s)
		}
	}
	what := map[bool][3]string{true: {"Server warmup", "Accept (%d) QPs test", "Accept (%d) test - no QPs"},
		false: {"Client warmup", "Connect (%d) QPs test", "Connect (%d) test - no QPs"}}[server]
	line("%s", what[0])
	test(true)
	line(what[1], n)
	test(false)
	table(true)
	line(what[2], n)
	test(false)
	table(false)
	return b.String()
}

// ConnectRate reads the connections per second of cmtime's first table
// in out (cmtime's stdout) for n connections: n over the whole connect
// step (56's cm connect of its QP test, 44's connect).
func ConnectRate(out string, n int) (float64, bool) {
	for _, l := range strings.Split(out, "\n") {
		var us float64
		switch {
		case strings.HasPrefix(l, "cm connect ") && row56.MatchString(l):
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				return 0, false
			}
			us = v
		case strings.HasPrefix(l, "connect      :") && row44.MatchString(l):
			f := strings.Fields(l[14:])
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, false
			}
			us = v * 1000
		default:
			continue
		}
		if us <= 0 {
			return 0, false
		}
		return float64(n) / us * 1e6, true
	}
	return 0, false
}
