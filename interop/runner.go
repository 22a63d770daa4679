package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Output is what one side of a case left behind.
type Output struct {
	Where    string   `json:"where"`               // the runner's name: where it ran
	Argv     []string `json:"argv"`                // the command line
	Exit     int      `json:"exit"`                // its exit status
	TimedOut bool     `json:"timed_out,omitempty"` // the harness killed it at its deadline
	// Stopped: the harness ended it because the other side had failed.
	Stopped bool `json:"stopped,omitempty"`
	// StartErr is set when the command could not be started at all.
	StartErr string  `json:"start_error,omitempty"`
	Stdout   string  `json:"stdout"`  // what it printed
	Stderr   string  `json:"stderr"`  // what it printed on stderr
	Seconds  float64 `json:"seconds"` // how long it ran
	// Hung: where each of its threads was just before its time ran out
	// (state, blocked signals, system call and user address, kernel
	// stack), one line each; the guest agent's runs give it.
	Hung []string `json:"hung,omitempty"`
	// NotCaptured: the command was printed for a person to run (--print);
	// its exit status and output are unknown.
	NotCaptured bool `json:"not_captured,omitempty"`
}

// Proc is a command started by a Runner.
type Proc interface {
	// Done is closed when the command has ended (nil: never known).
	Done() <-chan struct{}
	// Stop ends the command early, wherever it runs.
	Stop()
	// Wait waits for the end and returns the output.
	Wait() Output
}

// Runner runs commands at one place: this host, the lab's network
// namespace, the lab's guest, a host over ssh, or a person's terminal.
type Runner interface {
	// Where names the place for reports.
	Where() string
	// Start starts argv there. The place itself enforces timeout (with
	// coreutils timeout), so nothing outlives a case even where the harness
	// cannot kill processes directly.
	Start(ctx context.Context, argv []string, timeout time.Duration) Proc
	// WaitListen returns once something there listens on TCP port.
	WaitListen(ctx context.Context, port int, timeout time.Duration) error
}

// ShellRunner runs commands through a shell script handed to a host
// command: sh -c locally, ip netns exec, rxe-peer.sh exec, ssh.
type ShellRunner struct {
	Name string // for reports: "local", "lab guest", the ssh host
	// Wrap turns a shell script into the host command that runs it there.
	Wrap func(script string) []string
	// Remote: processes run where the harness cannot signal them (guest,
	// ssh), so Stop kills them by the pid the script recorded.
	Remote bool
	// Backstop is added to a command's own timeout before the harness kills
	// the host-side command (covers the guest's exec latency).
	Backstop time.Duration
	// Scratch: the place's /tmp is thrown away with it (the lab guest runs
	// from a snapshot), so a Remote command's pid file is left there rather
	// than removed by one more round trip per command.
	Scratch bool
}

// LocalRunner runs commands on this host, in the current namespace.
func LocalRunner() *ShellRunner {
	return &ShellRunner{Name: "host", Wrap: func(s string) []string { return []string{"sh", "-c", s} },
		Backstop: 10 * time.Second}
}

// SSHRunner runs commands on host over ssh (no password prompt: BatchMode).
func SSHRunner(host string, opts []string) *ShellRunner {
	return &ShellRunner{Name: "ssh " + host, Remote: true, Backstop: 30 * time.Second,
		Wrap: func(s string) []string {
			a := append([]string{"ssh", "-o", "BatchMode=yes"}, opts...)
			return append(a, host, s)
		}}
}

// Where names the place.
func (r *ShellRunner) Where() string { return r.Name }

var procSeq atomic.Int64

// Start runs argv under timeout(1) at the runner's place.
func (r *ShellRunner) Start(ctx context.Context, argv []string, timeout time.Duration) Proc {
	secs := strconv.Itoa(int((timeout + time.Second - 1) / time.Second))
	// --foreground keeps timeout(1) in the caller's process group (by
	// default it makes its own), so that killing the group reaches the tool.
	cmdline := "exec timeout --foreground -k 3 " + secs + " " + ShellJoin(argv)
	p := &shellProc{runner: r, out: Output{Where: r.Name, Argv: argv}, done: make(chan struct{}), limit: timeout}
	if r.Remote {
		// The pid file lets Stop reach the command: the shell records its
		// pid and then becomes timeout(1), which passes SIGTERM on.
		p.pidFile = fmt.Sprintf("/tmp/goroce-conformance-%d-%d.pid", time.Now().UnixNano(), procSeq.Add(1))
		cmdline = "echo $$ > " + p.pidFile + "; " + cmdline
	}
	cctx, cancel := context.WithTimeout(ctx, timeout+r.Backstop)
	p.cancel = cancel
	w := r.Wrap(cmdline)
	p.cmd = exec.CommandContext(cctx, w[0], w[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// Its own process group, so a kill reaches ip netns exec's children too.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Cancel = func() error { return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }
	// Should anything still hold the output pipes after the command ended
	// (a daemonised grandchild), stop reading rather than hang the run.
	p.cmd.WaitDelay = 5 * time.Second
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		p.out.StartErr = err.Error()
		p.out.Exit = -1
		cancel()
		close(p.done)
		return p
	}
	go p.wait(cctx)
	return p
}

type shellProc struct {
	runner         *ShellRunner
	cmd            *exec.Cmd
	cancel         context.CancelFunc
	stdout, stderr bytes.Buffer
	start          time.Time
	limit          time.Duration
	pidFile        string
	stopped        atomic.Bool
	done           chan struct{}
	out            Output
}

func (p *shellProc) wait(ctx context.Context) {
	err := p.cmd.Wait()
	p.out.Seconds = time.Since(p.start).Seconds()
	p.out.Stdout, p.out.Stderr = p.stdout.String(), p.stderr.String()
	p.out.Exit = p.cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		p.out.StartErr = err.Error()
	}
	p.out.TimedOut = timedOut(ctx, p.out.Exit, time.Since(p.start), p.limit)
	p.out.Stopped = p.stopped.Load()
	p.cancel()
	if p.pidFile != "" && !p.runner.Scratch {
		// Best effort: the file lives in the remote /tmp.
		rm := p.runner.Wrap("rm -f " + p.pidFile)
		exec.Command(rm[0], rm[1:]...).Run()
	}
	close(p.done)
}

// timedOut says whether a command run under timeout(1) with limit ended
// by it: 124 is timeout(1)'s own status, 137 its -k SIGKILL (or a kill
// once the limit passed); ctx's deadline is the host-side backstop.
func timedOut(ctx context.Context, exit int, elapsed, limit time.Duration) bool {
	return exit == 124 || (exit == 137 && elapsed >= limit) || ctx.Err() == context.DeadlineExceeded
}

func (p *shellProc) Done() <-chan struct{} { return p.done }

func (p *shellProc) Wait() Output {
	<-p.done
	return p.out
}

// Stop terminates the command: locally by its process group, elsewhere by
// the pid the script wrote (timeout(1) forwards the signal to the tool).
func (p *shellProc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.stopped.Store(true)
	if p.pidFile != "" {
		k := p.runner.Wrap("[ -f " + p.pidFile + " ] && kill -TERM $(cat " + p.pidFile + ") 2>/dev/null; true")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		exec.CommandContext(ctx, k[0], k[1:]...).Run()
		cancel()
		select {
		case <-p.done:
			return
		case <-time.After(5 * time.Second):
		}
	} else if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(3 * time.Second):
		}
	}
	p.cancel()
	<-p.done
}

// WaitListen polls ss(8) there until a TCP listener on port appears. One
// script for the whole wait keeps it to one round trip into a guest.
func (r *ShellRunner) WaitListen(ctx context.Context, port int, timeout time.Duration) error {
	return r.poll(ctx, fmt.Sprintf(`ss -Hltn "sport = :%d" | grep -q .`, port), fmt.Sprintf("TCP port %d", port), timeout)
}

// WaitCMListen polls rdma(8) there until the kernel's rdma_cm has an ID in
// state LISTEN on port (text output: "... state LISTEN ps TCP ...
// src-addr 198.18.11.2:7174 dst-addr ..."). Only the kernel's listeners
// are seen: not a roced's, which lives inside its process.
func (r *ShellRunner) WaitCMListen(ctx context.Context, port int, timeout time.Duration) error {
	return r.poll(ctx, fmt.Sprintf(`rdma resource show cm_id 2>/dev/null | grep -Eq 'state LISTEN .*src-addr [^ ]*:%d '`, port),
		fmt.Sprintf("RDMA CM port %d", port), timeout)
}

// poll runs the shell condition there until it holds (something listens
// on where), for up to timeout.
func (r *ShellRunner) poll(ctx context.Context, cond, where string, timeout time.Duration) error {
	// date(1) counts whole seconds: one more keeps the wait at least timeout.
	secs := int((timeout+time.Second-1)/time.Second) + 1
	script := fmt.Sprintf(`end=$(($(date +%%s) + %d)); while [ $(date +%%s) -lt $end ]; do %s && exit 0; sleep 0.05; done; echo "nothing listens on %s after %ds" >&2; exit 1`, secs, cond, where, secs)
	w := r.Wrap(script)
	cctx, cancel := context.WithTimeout(ctx, timeout+r.Backstop)
	defer cancel()
	cmd := exec.CommandContext(cctx, w[0], w[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: waiting for a listener on %s: %v: %s", r.Name, where, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// PrintRunner prints each command for a person to run on the peer by
// hand (--print): roced's side runs as usual and waits for it.
type PrintRunner struct {
	Name string    // for reports
	Out  io.Writer // where the commands are printed
	// In answers the "press Enter" prompt once the printed server listens.
	In *bufio.Reader
	mu sync.Mutex
}

// Where names the place.
func (r *PrintRunner) Where() string { return r.Name + " (printed, run by hand)" }

// Start prints the command.
func (r *PrintRunner) Start(ctx context.Context, argv []string, timeout time.Duration) Proc {
	r.mu.Lock()
	fmt.Fprintf(r.Out, "\n>>> run on %s (within %v):\n    %s\n", r.Name, timeout, ShellJoin(argv))
	r.mu.Unlock()
	return printProc{out: Output{Where: r.Where(), Argv: argv, NotCaptured: true}}
}

// WaitListen asks the person to say when the server is up.
func (r *PrintRunner) WaitListen(ctx context.Context, port int, timeout time.Duration) error {
	return r.askEnter(ctx, fmt.Sprintf("TCP port %d", port))
}

// WaitCMListen asks the person to say when the rping server is up.
func (r *PrintRunner) WaitCMListen(ctx context.Context, port int, timeout time.Duration) error {
	return r.askEnter(ctx, fmt.Sprintf("RDMA CM port %d", port))
}

// askEnter waits for the Enter key once the server listens on where.
func (r *PrintRunner) askEnter(ctx context.Context, where string) error {
	r.mu.Lock()
	fmt.Fprintf(r.Out, ">>> press Enter once it waits for the client (%s)\n", where)
	r.mu.Unlock()
	line := make(chan error, 1)
	go func() {
		_, err := r.In.ReadString('\n')
		line <- err
	}()
	select {
	case err := <-line:
		if err != nil {
			return fmt.Errorf("reading the Enter key: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type printProc struct{ out Output }

func (printProc) Done() <-chan struct{} { return nil }
func (printProc) Stop()                 {}
func (p printProc) Wait() Output        { return p.out }

// ShellJoin quotes argv for sh.
func ShellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=,+@%", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
