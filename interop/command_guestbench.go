package interop

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// guestBenchArgs are the flags -peer lab-guestbench takes.
type guestBenchArgs struct {
	labDir, runRe, roced, jsonFile, artifacts string
	link                                      string   // every roced's --link
	rocedEnv                                  []string // NAME=VALUE for every roced
	mtu, port, rounds                         int
	scale                                     float64
	timeout                                   time.Duration // 0: the bench's own
	labDown, list                             bool
}

// runGuestBench is -peer lab-guestbench: RunGuestBench on the
// lab's guest, with a static roced built here unless -roced names one.
func runGuestBench(a guestBenchArgs, stdout, stderr io.Writer) int {
	fail := func(format string, v ...any) int {
		fmt.Fprintf(stderr, "interop: "+format+"\n", v...)
		return 2
	}
	o := GuestBenchOptions{MTU: a.mtu, ItersScale: a.scale, Timeout: a.timeout, Port: a.port, Rounds: a.rounds, RocedEnv: a.rocedEnv, Link: a.link, Progress: stderr}
	switch a.link {
	case "", "udp", "afpacket", "afxdp":
	default:
		return fail("-link %q: want udp, afpacket or afxdp", a.link)
	}
	if !ValidMTU(a.mtu) {
		return fail("-mtu %d: want 256, 512, 1024, 2048 or 4096", a.mtu)
	}
	for _, e := range a.rocedEnv {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fail("-roced-env %q: want NAME=VALUE", e)
		}
	}
	if a.rounds < 1 {
		return fail("-count %d: want 1 or more rounds", a.rounds)
	}
	if a.scale <= 0 {
		return fail("-iters-scale %g: want a positive factor", a.scale)
	}
	if a.runRe != "" {
		re, err := regexp.Compile(a.runRe)
		if err != nil {
			return fail("-run: %v", err)
		}
		for _, t := range GuestBenchTests {
			if re.MatchString(t.Name()) {
				o.Tests = append(o.Tests, t)
			}
		}
		if len(o.Tests) == 0 {
			return fail("-run %q: no bench test matches (have %s)", a.runRe, benchNames())
		}
	}
	dir, err := FindLabDir(a.labDir)
	if err != nil {
		return fail("%v", err)
	}
	lab := NewLab(dir)
	if a.list {
		if err := GuestBenchList(stdout, lab, o); err != nil {
			return fail("%v", err)
		}
		return 0
	}
	if os.Geteuid() != 0 {
		return fail("the lab needs root (tap, network namespace, qemu)")
	}
	art := a.artifacts
	if art == "" {
		if art, err = os.MkdirTemp("", "goroce-guestbench-"); err != nil {
			return fail("%v", err)
		}
	} else if err := os.MkdirAll(art, 0o755); err != nil {
		return fail("%v", err)
	}
	if o.Artifacts, err = filepath.Abs(art); err != nil {
		return fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.Roced = a.roced; o.Roced == "" {
		o.Roced = filepath.Join(o.Artifacts, "roced-static")
		if err := buildStatic(ctx, o.Roced, stderr); err != nil {
			return fail("%v", err)
		}
	}
	if err := CheckStatic(o.Roced); err != nil {
		return fail("%v", err)
	}
	if err := lab.Lock(20 * time.Minute); err != nil {
		return fail("%v", err)
	}
	t := time.Now()
	if err := lab.Up(ctx); err != nil {
		return fail("lab VM: %v", err)
	}
	fmt.Fprintf(stderr, "interop: lab %s ready (%.1fs), artifacts in %s\n", lab.Suite, time.Since(t).Seconds(), o.Artifacts)
	if a.labDown {
		defer func() {
			if err := lab.Down(context.Background()); err != nil {
				fmt.Fprintf(stderr, "interop: %v\n", err)
			}
		}()
	}
	rep, err := RunGuestBench(ctx, lab, o)
	if rep != nil {
		rep.WriteTable(stdout)
		if a.jsonFile != "" {
			if jerr := rep.WriteJSON(a.jsonFile); jerr != nil {
				fmt.Fprintf(stderr, "interop: %v\n", jerr)
				return 2
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "interop: %v\n", err)
		return 2
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// buildStatic builds roced without cgo, so that it runs in the guest
// whatever its libc: the module is the working directory's.
func buildStatic(ctx context.Context, out string, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/goroce/goroce/cmd/roced")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	t := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building a static roced (CGO_ENABLED=0 go build, run inside the goroce module): %v", err)
	}
	fmt.Fprintf(stderr, "interop: built %s (%.1fs)\n", out, time.Since(t).Seconds())
	return nil
}

func benchNames() string {
	var n []string
	for _, t := range GuestBenchTests {
		n = append(n, t.Name())
	}
	return strings.Join(n, ", ")
}
