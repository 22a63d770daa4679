package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// Start runs argv in the guest through the agent while a session runs
// (op "run", a connection of its own): no 9p spool round trip, no bash,
// no host-side rxe-peer.sh polling, each about 0.3 s of a case's start on
// an idle TCG guest and more under load. Without a session, through
// rxe-peer.sh exec. The command runs under timeout(1) either way, so the
// two report alike (124 when it expired).
func (g guestRunner) Start(ctx context.Context, argv []string, timeout time.Duration) Proc {
	if g.lab.session == nil {
		return g.ShellRunner.Start(ctx, argv, timeout)
	}
	return g.lab.agentRun(ctx, g.Name, argv, timeout, g.Backstop)
}

// agentRun has the agent run argv under timeout; the host side gives up
// backstop later.
func (l *Lab) agentRun(ctx context.Context, where string, argv []string, timeout, backstop time.Duration) *agentProc {
	p := &agentProc{out: Output{Where: where, Argv: argv}, done: make(chan struct{}), limit: timeout, start: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, timeout+backstop)
	p.cancel = cancel
	if err := p.begin(cctx, l, argv, timeout); err != nil {
		p.out.StartErr = fmt.Sprintf("%s: %v", where, err)
		p.out.Exit = -1
		p.end(cctx)
		return p
	}
	go p.wait(cctx)
	return p
}

// GuestExec runs argv in the lab's guest through the harness's agent,
// starting the agent first when none answers, and copies its output to
// stdout and stderr once it ends; it returns its exit status (-1 when it
// could not run). It is roced conform's --peer-exec in the lab (interop
// -peer lab-exec): a tool's start without rxe-peer.sh exec's 9p round
// trips and bash. Ending the calling process ends the command (the
// agent kills it when the connection closes). The command's own timeout
// is argv's (roced conform gives one); limit is the agent's backstop.
func GuestExec(ctx context.Context, l *Lab, argv []string, limit time.Duration, stdout, stderr io.Writer) int {
	if conn, err := l.dialGuest(ctx, guestAgentPort); err == nil {
		conn.Close()
	} else if err := l.startAgent(ctx); err != nil {
		fmt.Fprintf(stderr, "interop: starting the guest agent: %v\n", err)
		return -1
	}
	o := l.agentRun(ctx, "guest "+l.Suite, argv, limit, 30*time.Second).Wait()
	io.WriteString(stdout, o.Stdout)
	io.WriteString(stderr, o.Stderr)
	if o.StartErr != "" {
		fmt.Fprintf(stderr, "interop: %s\n", o.StartErr)
	}
	return o.Exit
}

// startAgent starts the guest's agent, one caller at a time (a lock file
// per guest address in the temporary directory): a caller that waited
// finds it running.
func (l *Lab) startAgent(ctx context.Context) error {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "goroce-agent-"+l.GuestAddr+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	if conn, err := l.dialGuest(ctx, guestAgentPort); err == nil {
		conn.Close()
		return nil
	}
	_, err = l.run(ctx, "exec", l.agentStart())
	return err
}

// agentProc is a command the agent runs. Its connection carries the
// agent's two answers (started, ended) and the harness's stop.
type agentProc struct {
	conn    net.Conn
	r       *bufio.Reader
	cancel  context.CancelFunc
	start   time.Time
	limit   time.Duration
	stopped atomic.Bool
	done    chan struct{}
	out     Output
}

// begin dials the agent, asks it to run argv and reads its first answer.
func (p *agentProc) begin(ctx context.Context, l *Lab, argv []string, timeout time.Duration) error {
	conn, err := l.dialGuest(ctx, guestAgentPort)
	if err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	p.conn, p.r = conn, bufio.NewReader(conn)
	// The context's end (the backstop, a cancelled run) closes the
	// connection; the agent then kills the command's process group.
	context.AfterFunc(ctx, func() { conn.Close() })
	b, _ := json.Marshal(map[string]any{"op": "run", "argv": argv, "timeout": timeout.Seconds()})
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	r, err := p.read()
	if err != nil {
		return err
	}
	if r.PID == nil {
		return errors.New("guest agent: no pid in its answer to run")
	}
	conn.SetDeadline(time.Time{})
	return nil
}

// read reads one answer; one that says ok false is an error.
func (p *agentProc) read() (*agentReply, error) {
	r, err := readReply(p.r)
	if err == nil && !r.OK {
		err = errors.New("guest agent: " + r.Error)
	}
	return r, err
}

func (p *agentProc) wait(ctx context.Context) {
	r, err := p.read()
	switch {
	case err == nil && r.Exit != nil:
		p.out.Exit, p.out.Stdout, p.out.Stderr, p.out.Hung = *r.Exit, r.Stdout, r.Stderr, r.Hung
	case err == nil:
		p.out.Exit, p.out.StartErr = -1, "guest agent: an answer without the exit status"
	case ctx.Err() != nil:
		// The backstop (or the run's end) closed the connection: the
		// agent killed the command.
		p.out.Exit = 137
	default:
		p.out.Exit, p.out.StartErr = -1, err.Error()
	}
	p.end(ctx)
}

// end fills in what every ending shares, as shellProc.wait does.
func (p *agentProc) end(ctx context.Context) {
	elapsed := time.Since(p.start)
	p.out.Seconds = elapsed.Seconds()
	p.out.TimedOut = timedOut(ctx, p.out.Exit, elapsed, p.limit)
	p.out.Stopped = p.stopped.Load()
	p.cancel()
	close(p.done)
}

func (p *agentProc) Done() <-chan struct{} { return p.done }

func (p *agentProc) Wait() Output {
	<-p.done
	return p.out
}

// Stop asks the agent to end the command (SIGTERM, which timeout(1)
// passes on), then, if it has not ended in 5 s, closes the connection:
// the agent kills its process group.
func (p *agentProc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.stopped.Store(true)
	p.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	p.conn.Write([]byte(`{"op":"stop"}` + "\n"))
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	p.cancel()
	<-p.done
}
