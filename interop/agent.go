package interop

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/netns"
	vns "github.com/vishvananda/netns"
)

//go:embed guestagent.py
var guestAgentPy string

// guestAgentPort is the agent's TCP port on the guest's address: below the
// cases' ports (DefaultPort up), and left out of the guest capture.
const guestAgentPort = 17999

// guestAgent is the harness's connection to its agent in the guest
// (guestagent.py): a case's snapshot and its wait for the guest's listener
// take one exchange on the tap each, where rxe-peer.sh exec (the 9p spool,
// a bash and its forks in the TCG guest) took 1.5-3 s under load.
type guestAgent struct {
	conn net.Conn
	r    *bufio.Reader
	// broken: a call failed or was cancelled mid-way, so the connection
	// may hold a late answer; the next use dials again.
	broken bool
}

// agentStart is the guest script that starts the agent (the previous
// run's, if it did not quit, is stopped by the pid file it wrote) and
// waits until it listens.
func (l *Lab) agentStart() string {
	const a = "/tmp/goroce-agent"
	return fmt.Sprintf(`a=%[1]s; [ -f $a.pid ] && kill $(cat $a.pid) 2>/dev/null; cat >$a.py <<'GOROCE_AGENT_EOF'
%[2]s
GOROCE_AGENT_EOF
python3 $a.py %[3]s %[4]d $a.pid >$a.log 2>&1 </dev/null & p=$!
for i in $(seq 400); do grep -q '^listening' $a.log && break; kill -0 $p 2>/dev/null || break; sleep 0.05; done
grep -q '^listening' $a.log || { cat $a.log >&2; exit 1; }
`, a, guestAgentPy, l.GuestAddr, guestAgentPort)
}

// dialAgent connects to the agent.
func (l *Lab) dialAgent(ctx context.Context) (*guestAgent, error) {
	conn, err := l.dialGuest(ctx, guestAgentPort)
	if err != nil {
		return nil, fmt.Errorf("guest agent: %w", err)
	}
	return &guestAgent{conn: conn, r: bufio.NewReader(conn)}, nil
}

// dialGuest connects to TCP port on the guest from the tap's namespace
// (the socket is made there; the process stays where it is).
func (l *Lab) dialGuest(ctx context.Context, port int) (net.Conn, error) {
	addr := net.JoinHostPort(l.GuestAddr, strconv.Itoa(port))
	var d net.Dialer
	var conn net.Conn
	dial := func() (err error) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		conn, err = d.DialContext(dctx, "tcp", addr)
		return err
	}
	if err := l.inNetNS(dial); err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return conn, nil
}

// inNetNS runs fn on a thread in the tap's namespace (or here, for a lab
// without one): sockets fn opens stay in that namespace.
func (l *Lab) inNetNS(fn func() error) error {
	if l.NetNS == "" {
		return fn()
	}
	h, err := vns.GetFromName(l.NetNS)
	if err != nil {
		return fmt.Errorf("netns %s: %w", l.NetNS, err)
	}
	defer h.Close()
	return netns.Do(h, fn)
}

// agentReply is every answer's shape: a snapshot's fields, and op run's
// (first the pid, then, with Exit set, how the command ended).
type agentReply struct {
	OK       bool             `json:"ok"`
	Error    string           `json:"error"`
	ClockNS  int64            `json:"clock_ns"`
	Counters map[string]int64 `json:"counters"`
	Next     int64            `json:"next"`
	Dmesg    []string         `json:"dmesg"`
	PID      *int             `json:"pid"`
	Exit     *int             `json:"exit"`
	Stdout   string           `json:"stdout"`
	Stderr   string           `json:"stderr"`
	Hung     []string         `json:"hung"`
}

// readReply reads one answer, well formed whether or not it says ok.
func readReply(br *bufio.Reader) (*agentReply, error) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("guest agent: %w", err)
	}
	var r agentReply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("guest agent: %q: %w", line, err)
	}
	return &r, nil
}

// call sends one request and reads its answer within timeout.
func (a *guestAgent) call(ctx context.Context, req map[string]any, timeout time.Duration) (*agentReply, error) {
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	a.conn.SetDeadline(dl)
	// A cancelled case ends the exchange at once (the agent sees the
	// close and stops waiting).
	stop := context.AfterFunc(ctx, func() { a.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	a.broken = true
	b, _ := json.Marshal(req)
	if _, err := a.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("guest agent: %w", err)
	}
	r, err := readReply(a.r)
	if err != nil {
		return nil, err
	}
	a.broken = false
	if !r.OK {
		return r, errors.New("guest agent: " + r.Error)
	}
	return r, nil
}

// snap is one snapshot, with the kernel log's records from seq on.
func (a *guestAgent) snap(ctx context.Context, seq int64) (guestSnap, []string, error) {
	r, err := a.call(ctx, map[string]any{"op": "snap", "from": seq}, 30*time.Second)
	if err != nil {
		return guestSnap{}, nil, err
	}
	if len(r.Counters) == 0 || r.ClockNS == 0 {
		return guestSnap{}, nil, errors.New("guest agent: snapshot without rxe0's counters or clock")
	}
	return guestSnap{counters: r.Counters, dmesg: r.Next, clock: time.Unix(0, r.ClockNS)}, r.Dmesg, nil
}

// waitListen returns once something in the guest listens on TCP port
// (op "listen") or, with op "cmlisten", an rdma_cm ID on port.
func (a *guestAgent) waitListen(ctx context.Context, op string, port int, timeout time.Duration) error {
	_, err := a.call(ctx, map[string]any{"op": op, "port": port, "timeout": timeout.Seconds()}, timeout+10*time.Second)
	return err
}

// agent is the session's agent connection, dialled again when the last
// call left it broken.
func (l *Lab) agent(ctx context.Context) (*guestAgent, error) {
	s := l.session
	if s == nil {
		return nil, errors.New("no guest session")
	}
	if s.agent != nil && !s.agent.broken {
		return s.agent, nil
	}
	if s.agent != nil {
		s.agent.conn.Close()
		s.agent = nil
	}
	a, err := l.dialAgent(ctx)
	if err != nil {
		return nil, err
	}
	s.agent = a
	return a, nil
}

// guestRunner is the lab guest's ShellRunner, which waits for a listener
// through the agent while a session runs.
type guestRunner struct {
	*ShellRunner
	lab *Lab
}

// WaitListen asks the agent, else polls ss(8) through rxe-peer.sh exec.
func (g guestRunner) WaitListen(ctx context.Context, port int, timeout time.Duration) error {
	if g.lab.session == nil {
		return g.ShellRunner.WaitListen(ctx, port, timeout)
	}
	return g.agentWait(ctx, "listen", fmt.Sprintf("TCP port %d", port), port, timeout)
}

// WaitCMListen asks the agent, else polls rdma(8) through rxe-peer.sh exec.
func (g guestRunner) WaitCMListen(ctx context.Context, port int, timeout time.Duration) error {
	if g.lab.session == nil {
		return g.ShellRunner.WaitCMListen(ctx, port, timeout)
	}
	return g.agentWait(ctx, "cmlisten", fmt.Sprintf("RDMA CM port %d", port), port, timeout)
}

// agentWait has the agent wait (op) for a listener on where.
func (g guestRunner) agentWait(ctx context.Context, op, where string, port int, timeout time.Duration) error {
	a, err := g.lab.agent(ctx)
	if err != nil {
		return err
	}
	if err := a.waitListen(ctx, op, port, timeout); err != nil {
		return fmt.Errorf("%s: waiting for a listener on %s: %w", g.Name, where, err)
	}
	return nil
}

func (a *guestAgent) close() {
	a.conn.SetDeadline(time.Now().Add(5 * time.Second))
	a.conn.Write([]byte(`{"op":"quit"}` + "\n"))
	a.conn.Close()
}
