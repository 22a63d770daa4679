package interop

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// failedClientGrace bounds how long a server may run on after its client
// failed.
const failedClientGrace = 3 * time.Second

// Results of a case.
const (
	Pass   = "pass"
	Fail   = "FAIL"
	NotRun = "NOT-RUN"
)

// Options tune a run.
type Options struct {
	// Port is the TCP port of the first case's exchange (0: the tools'
	// 18515); case i uses Port+i (modulo 1000), so that a server a failed
	// case left behind can never answer the next case's client.
	Port int
	// Timeout bounds each side's command.
	Timeout time.Duration
	// ListenTimeout bounds the wait for the server's listening socket.
	ListenTimeout time.Duration
	// Grace is how long a server may run on after its client ended.
	Grace time.Duration
	// Budget bounds the whole run: cases that would start after it are
	// reported NOT-RUN, which fails the run like any failure.
	Budget time.Duration
	// Artifacts is the directory for each case's outputs and, for failed
	// cases, the tap capture; empty: nothing is written.
	Artifacts string
	// KeepPcaps keeps the capture of passing cases too.
	KeepPcaps bool
	// Progress gets one line per case as it ends.
	Progress io.Writer
}

// SideReport is one side of a case in the report.
type SideReport struct {
	Who string `json:"who"` // the side's implementation (Side.Who)
	Output
}

// Result is one case's outcome.
type Result struct {
	Case      string      `json:"case"`              // the case's ID (Case.ID)
	Tool      string      `json:"tool"`              // roced's command
	Transport string      `json:"transport"`         // RC, UC, UD
	Size      int         `json:"size"`              // message size
	Iters     int         `json:"iters"`             // iterations
	Flags     []string    `json:"flags,omitempty"`   // extra flags of both sides
	Direction string      `json:"direction"`         // roced-server or peer-server
	Result    string      `json:"result"`            // Pass, Fail or NotRun
	Reasons   []string    `json:"reasons,omitempty"` // why it failed or did not run
	Notes     []string    `json:"notes,omitempty"`   // what is worth knowing though it passed
	Figures   []Figure    `json:"figures,omitempty"` // each side's headline number
	Seconds   float64     `json:"seconds"`           // wall time of the case
	Server    *SideReport `json:"server,omitempty"`  // the server's command and output
	Client    *SideReport `json:"client,omitempty"`  // the client's command and output
	Pcap      string      `json:"pcap,omitempty"`    // the host-side capture, if kept
	// Impair is what the impairing forwarder did during the case.
	Impair *ImpairStats `json:"impair,omitempty"`
	// Guest is the lab guest's side of the case (Lab.GuestEvidence).
	Guest *GuestEvidence `json:"guest,omitempty"`
	Dir   string         `json:"artifacts,omitempty"` // the directory holding the case's files
}

// Report is a whole run.
type Report struct {
	Peer    string            `json:"peer"`           // the peer's name
	Info    map[string]string `json:"info,omitempty"` // versions and hosts of the environment
	Started time.Time         `json:"started"`        // when the run began
	Seconds float64           `json:"seconds"`        // how long it took
	Passed  int               `json:"passed"`         // cases that passed
	Failed  int               `json:"failed"`         // cases that failed
	NotRun  int               `json:"not_run"`        // cases skipped (a tool missing, a lab down)
	// Impair sums what the impairing forwarder did over all cases.
	Impair  *ImpairStats `json:"impair,omitempty"`
	Results []Result     `json:"results"` // one per case, in run order
}

// OK reports whether every case passed. On an impaired path the
// forwarder must have lost packets each way too: a run it left whole
// proves nothing about recovery.
func (r *Report) OK() bool {
	if t := r.Impair; t != nil && (t.ToGuest.Lost == 0 || t.ToRoced.Lost == 0) {
		return false
	}
	return r.Failed == 0 && r.NotRun == 0 && r.Passed > 0
}

// Run runs the cases one after the other against the peer.
func Run(ctx context.Context, p *Peer, cases []Case, o Options) *Report {
	o.defaults()
	rep := &Report{Peer: p.Name, Info: p.Info, Started: time.Now()}
	for i, c := range cases {
		var res Result
		switch {
		case ctx.Err() != nil:
			res = notRun(c, "not run: interrupted")
		case o.Budget > 0 && time.Since(rep.Started) > o.Budget:
			res = notRun(c, fmt.Sprintf("not run: the run's time budget (%v) was used up", o.Budget))
		default:
			res = runCase(ctx, p, c, o.Port+i%1000, o)
		}
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, progressLine(res))
		}
		if res.Impair != nil {
			if rep.Impair == nil {
				rep.Impair = &ImpairStats{}
			}
			rep.Impair.add(res.Impair)
		}
		rep.add(res)
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep
}

// add appends res and counts it.
func (rep *Report) add(res Result) {
	switch res.Result {
	case Pass:
		rep.Passed++
	case Fail:
		rep.Failed++
	default:
		rep.NotRun++
	}
	rep.Results = append(rep.Results, res)
}

func (o *Options) defaults() {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ListenTimeout == 0 {
		o.ListenTimeout = 20 * time.Second
	}
	if o.Grace == 0 {
		o.Grace = 10 * time.Second
	}
}

func newResult(c Case) Result {
	name := c.Name()
	if c.Rep > 0 {
		name += "#" + strconv.Itoa(c.Rep)
	}
	return Result{Case: name, Tool: c.Tool.Name, Transport: string(c.Transport), Size: c.Size,
		Iters: c.Iters, Flags: c.Flags, Direction: c.Dir.String()}
}

func notRun(c Case, why string) Result {
	r := newResult(c)
	r.Result, r.Reasons = NotRun, []string{why}
	return r
}

func runCase(ctx context.Context, p *Peer, c Case, port int, o Options) Result {
	res := newResult(c)
	start := time.Now()
	if c.Tool.FixedPort {
		port = c.Tool.Port // udaddy has no port flag
	}
	srvSide, cliSide := p.Subject, p.Ref
	if c.Dir == PeerServer {
		srvSide, cliSide = p.Ref, p.Subject
	}
	if c.IPv6 && (srvSide.Addr6 == "" || cliSide.Addr6 == "") {
		res.Result, res.Reasons = NotRun, []string{"not run: an IPv6 case, and a side has no IPv6 address"}
		return res
	}
	var dir string
	if o.Artifacts != "" {
		dir = filepath.Join(o.Artifacts, artifactName(c))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			res.Notes = append(res.Notes, "artifacts: "+err.Error())
			dir = ""
		}
	}
	// The guest's evidence (started once per run, then a no-op) and the
	// tap capture start side by side: each waits for its own tcpdump to
	// listen, one in the guest, one here.
	guestOn := p.Lab != nil && p.Lab.GuestEvidence
	var guestErr error
	guestStarted := make(chan struct{})
	if guestOn {
		go func() {
			defer close(guestStarted)
			guestErr = p.Lab.guestBaseline(ctx)
		}()
	} else {
		close(guestStarted)
	}
	var capture Proc
	pcap := filepath.Join(dir, "tap.pcap")
	if p.Lab != nil && p.Lab.Capture && dir != "" {
		var err error
		if capture, err = p.Lab.StartCapture(ctx, pcap, port); err != nil {
			res.Notes = append(res.Notes, "no capture: "+err.Error())
		}
	}
	<-guestStarted
	if guestErr != nil {
		res.Notes = append(res.Notes, "no guest capture: "+guestErr.Error())
	}

	// Frames the tap drops never reach the guest: say so beside the
	// verdict, since a lost UC or UD packet is not retransmitted.
	var drops0 uint64
	var dropsOK bool
	if p.Lab != nil {
		var err error
		drops0, err = p.Lab.TapDrops(ctx)
		dropsOK = err == nil
	}

	if p.Path != nil {
		if err := p.Path.Begin(c.ID()); err != nil {
			res.Result, res.Reasons = Fail, []string{err.Error()}
			res.Seconds = time.Since(start).Seconds()
			return res
		}
	}

	srvArgv := srvSide.Argv(c.Scenario, port, "")
	srv := srvSide.Runner.Start(ctx, srvArgv, o.Timeout)
	listening := time.Now()
	var cliOut Output
	if err := waitServer(ctx, c.Scenario, srvSide, srv, port, o); err != nil {
		srv.Stop()
		cliOut = Output{Where: cliSide.Runner.Where(), Exit: -1,
			Argv: cliSide.Argv(c.Scenario, port, srvSide.AddrFor(c.Scenario)), StartErr: "not started: " + err.Error()}
	} else {
		var starts int
		cliOut, starts = runClient(ctx, c.Scenario, cliSide.Runner, cliSide.Argv(c.Scenario, port, srvSide.AddrFor(c.Scenario)), srv, listening.Add(o.ListenTimeout), o)
		res.Notes = append(res.Notes, startsNote(cliOut, starts, o)...)
		if cliOut.NotCaptured || srv.Done() == nil {
			// A person runs the client (or the server): roced's side ends
			// on its own, within its timeout.
		} else if runsOn(c.Scenario, srvSide) {
			srv.Stop() // its client is done: nothing more will come
		} else {
			// A server whose client failed usually waits for traffic that
			// will never come: give it a moment to say why, not the grace
			// a server finishing a good run gets.
			grace := o.Grace
			if cliOut.Exit != 0 && grace > failedClientGrace {
				grace = failedClientGrace
			}
			select {
			case <-srv.Done():
			case <-time.After(grace):
				srv.Stop()
			}
		}
	}
	srvOut := srv.Wait()

	v := Judge(c.Scenario,
		SideRun{Role: "server", Who: srvSide.Who, Strict: srvSide.Strict, Roced: srvSide.Roced != "", Out: srvOut, RdmaCore: srvSide.RdmaCore},
		SideRun{Role: "client", Who: cliSide.Who, Strict: cliSide.Strict, Roced: cliSide.Roced != "", Out: cliOut, RdmaCore: cliSide.RdmaCore})
	res.Server = &SideReport{Who: srvSide.Who, Output: srvOut}
	res.Client = &SideReport{Who: cliSide.Who, Output: cliOut}
	res.Reasons, res.Figures = v.Reasons, v.Figures
	res.Notes = append(res.Notes, v.Notes...)
	if dropsOK {
		if d, err := p.Lab.TapDrops(ctx); err == nil && d > drops0 {
			res.Notes = append(res.Notes, fmt.Sprintf("the tap dropped %d frames on their way to the guest (qemu did not drain it in time)", d-drops0))
		}
	}
	if p.Path != nil {
		if res.Impair = p.Path.End(); res.Impair != nil {
			res.Notes = append(res.Notes, res.Impair.Text())
		}
	}
	if guestOn && guestErr == nil {
		keep := (!v.Pass || o.KeepPcaps) && dir != ""
		res.Guest = p.Lab.guestCaseEvidence(ctx, filepath.Join(dir, "guest.pcap"), keep)
		if !v.Pass {
			res.Notes = append(res.Notes, res.Guest.Text())
			for _, l := range res.Guest.Dmesg {
				res.Notes = append(res.Notes, "guest dmesg: "+l)
			}
			if res.Guest.Pcap != "" {
				res.Notes = append(res.Notes, "guest capture: "+res.Guest.Pcap)
			}
		}
	}
	res.Result = Fail
	if v.Pass {
		res.Result = Pass
	}
	res.Pcap = endCapture(capture, pcap, v.Pass && !o.KeepPcaps)
	res.Seconds = time.Since(start).Seconds()
	if dir != "" {
		res.Dir = dir
		writeArtifacts(dir, res)
	}
	return res
}

// endCapture stops a case's tap capture, if one runs, and returns the
// file to report, or removes it (drop: the case passed and passing cases'
// captures are not kept) and returns "".
func endCapture(capture Proc, pcap string, drop bool) string {
	if capture == nil {
		return ""
	}
	capture.Stop()
	capture.Wait()
	if drop {
		os.Remove(pcap)
		return ""
	}
	return pcap
}

// CMListenWaiter is a Runner that sees the kernel's RDMA CM listeners
// there (rdma resource show cm_id): a server of the CM family listens on
// QP1, not on a TCP socket.
type CMListenWaiter interface {
	// WaitCMListen returns once an rdma_cm ID there is in state LISTEN on
	// port (of the TCP port space).
	WaitCMListen(ctx context.Context, port int, timeout time.Duration) error
}

// waitServer waits until the server can take its client: its TCP socket,
// or for the CM family its LISTEN cm_id where the kernel's rdma_cm runs
// the server. A roced server's listener and those of the real tools on
// libgoroce.so live inside their processes, which list them on their
// stats sockets (StatsCMWaiter; a side's CMWaiter, if set, is asked
// rather than its Runner). The client's start is still retried while it
// is rejected for want of a listener (runClient). cmtime's server
// listens on its TCP socket (rdma-core 56's, once its cm_id listens; a
// roced server's whatever its client's release) but for 44's, which has
// only its cm_id.
func waitServer(ctx context.Context, sc Scenario, side Side, srv Proc, port int, o Options) error {
	run, roced := side.Runner, side.Roced != ""
	if sc.Tool.Exchange == CmtimeConnects && sc.Tool.Family == CM && (roced || side.RdmaCore != "44") {
		return waitListen(ctx, srv, func(ctx context.Context) error { return run.WaitListen(ctx, port, o.ListenTimeout) })
	}
	if !sc.ViaCM() {
		return waitListen(ctx, srv, func(ctx context.Context) error { return run.WaitListen(ctx, port, o.ListenTimeout) })
	}
	w, ok := run.(CMListenWaiter)
	switch {
	case side.CMWaiter != nil:
		w, ok = side.CMWaiter, true
	case roced:
		// roced runs here, and lists its listeners on its stats socket.
		w, ok = StatsCMWaiter{Addrs: []string{side.Addr, side.Addr6}}, true
	}
	if !ok {
		return nil
	}
	return waitListen(ctx, srv, func(ctx context.Context) error { return w.WaitCMListen(ctx, port, o.ListenTimeout) })
}

// runsOn reports whether the case's server never ends on its own:
// rdma-core 44's cmtime server (and roced's, serving 44's client) runs
// until it is killed, so the harness stops it once its client is done.
func runsOn(sc Scenario, server Side) bool {
	return sc.Tool.Exchange == CmtimeConnects && server.RdmaCore == "44"
}

// runClient runs the client once, and over the CM again while the
// server rejected it with REJ 8 (invalid service ID: nothing listens on
// the port yet) and the server still runs, until deadline. That is the
// start-up wait for a server whose listener cannot be seen from outside
// (a roced server), not a retried verdict: a failing case is never retried
// into green, and any other failure ends the case at once. It returns the
// last run's output and how many times the client was started.
func runClient(ctx context.Context, sc Scenario, run Runner, argv []string, srv Proc, deadline time.Time, o Options) (Output, int) {
	for starts := 1; ; starts++ {
		out := run.Start(ctx, argv, o.Timeout).Wait()
		if !sc.ViaCM() || !rejectedUnlistened(out) || !time.Now().Before(deadline) {
			return out, starts
		}
		select {
		case <-ctx.Done():
			return out, starts
		case <-srv.Done():
			return out, starts
		case <-time.After(100 * time.Millisecond): // the poll interval
		}
	}
}

// startsNote says why a client was started more than once.
func startsNote(out Output, starts int, o Options) []string {
	switch {
	case starts > 1 && rejectedUnlistened(out):
		return []string{fmt.Sprintf("the client was started %d times, each rejected with REJ 8: nothing listened within %v", starts, o.ListenTimeout)}
	case starts > 1:
		return []string{fmt.Sprintf("the client was started %d times: the server rejected the first %d with REJ 8 (no listener yet)", starts, starts-1)}
	}
	return nil
}

// rejectedUnlistened reports whether an rping client failed because its
// REQ met no listener: rping (and roced rping) print "cma event
// RDMA_CM_EVENT_REJECTED, error 8" for a REJ of reason 8, invalid service
// ID, which is what a CM answers for a port nobody listens on (ucmatose
// "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8"; roced's perftest
// client "cm: rejected: invalid service ID (8)"); udaddy prints
// "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1" for a SIDR_REP of
// status 1, unsupported service ID, the UDP port space's answer.
func rejectedUnlistened(o Output) bool {
	if o.Exit == 0 || o.TimedOut || o.Stopped || o.StartErr != "" || o.NotCaptured {
		return false
	}
	// rdma_client says only ECONNREFUSED, and perftest's -R client only
	// the event (8 is RDMA_CM_EVENT_REJECTED), whatever the REJ's reason.
	for _, rej := range []string{"RDMA_CM_EVENT_REJECTED, error 8", "RDMA_CM_EVENT_REJECTED, error: 8",
		"rdma_connect: Connection refused", "Unexpected CM event bl blka 8", "cm: rejected: invalid service ID (8)",
		"udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1"} {
		if strings.Contains(o.Stderr, rej) || strings.Contains(o.Stdout, rej) {
			return true
		}
	}
	return false
}

// waitListen waits for the server's listener (wait), giving up early when
// the server has already exited (a bad flag, an unknown command).
func waitListen(ctx context.Context, srv Proc, wait func(context.Context) error) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- wait(lctx) }()
	select {
	case err := <-errc:
		return err
	case <-srv.Done():
		cancel()
		<-errc
		return fmt.Errorf("the server exited before listening")
	}
}

// artifactName turns a case ID into a directory name.
func artifactName(c Case) string {
	r := strings.NewReplacer("/", "_", "@", ".", "=", "-", ",", "+")
	return r.Replace(c.ID())
}

// roleReport is a side of a result with its role.
type roleReport struct {
	role string
	sr   *SideReport
}

// sides are the result's sides that ran or were meant to, server first.
func (r Result) sides() []roleReport {
	var s []roleReport
	for _, x := range []roleReport{{"server", r.Server}, {"client", r.Client}} {
		if x.sr != nil {
			s = append(s, x)
		}
	}
	return s
}

func writeArtifacts(dir string, r Result) {
	for _, s := range r.sides() {
		os.WriteFile(filepath.Join(dir, s.role+".stdout"), []byte(s.sr.Stdout), 0o644)
		os.WriteFile(filepath.Join(dir, s.role+".stderr"), []byte(s.sr.Stderr), 0o644)
	}
	var b strings.Builder
	writeDetail(&b, r)
	os.WriteFile(filepath.Join(dir, "case.txt"), []byte(b.String()), 0o644)
}
