package conform

import (
	"fmt"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/ladder"
	"github.com/goroce/goroce/transport"
)

// Role is the role the peer under test plays in a case.
type Role string

// The peer's roles.
const (
	// Responder: the suite is the hostile requester.
	Responder Role = "responder"
	// Requester: the suite is the hostile responder.
	Requester Role = "requester"
)

// Reply is the kind of answer the peer gave to a case's stimulus.
type Reply string

// The answers a peer can give.
const (
	// Silent: the peer sent nothing (proven with a fence).
	Silent Reply = "silent"
	// ACK: an Acknowledge with an ACK syndrome.
	ACK Reply = "ACK"
	// NAK: an Acknowledge with a NAK syndrome; Outcome.NAK has its code.
	NAK Reply = "NAK"
	// RNRNAK: an Acknowledge with an RNR NAK syndrome.
	RNRNAK Reply = "RNR NAK"
	// ReadResponse: an RDMA READ response packet.
	ReadResponse Reply = "READ response"
	// AtomicAck: an Atomic Acknowledge.
	AtomicAck Reply = "atomic ACK"
	// Retransmit: the peer, a requester, sent a request again.
	Retransmit Reply = "retransmission"
	// Completed: the peer, a requester, completed its work request
	// (Outcome.Status says how) without sending anything more.
	Completed Reply = "completed"
	// Waiting: the peer, a requester, neither completed its work request
	// nor sent anything: it still waits for its answer.
	Waiting Reply = "waiting"
)

// Any stands for any value of an Outcome's state or completion status in
// an expectation.
const (
	AnyState  = transport.QPState(0xff)
	AnyStatus = transport.WCStatus(0xff)
	// AnyError matches every completion status but Success.
	AnyError = transport.WCStatus(0xfe)
)

// Outcome is what a peer did in a case, or (in a Case's Expected) what the
// specification allows it to do.
type Outcome struct {
	// Reply is the peer's answer to the stimulus.
	Reply Reply
	// NAK is the NAK code when Reply is NAK.
	NAK bth.NAKCode
	// PSN is the answer's PSN relative to the stimulus's reference PSN
	// (the responder's expected PSN, or the requester's request), when
	// the case checks it (CheckPSN).
	PSN int
	// CheckPSN says whether PSN is part of the expectation.
	CheckPSN bool
	// Count is how many packets the peer answered with (a responder) or
	// how often it sent a request again (a requester), when the case
	// checks it (CheckCount).
	Count int
	// CheckCount says whether Count is part of the expectation.
	CheckCount bool
	// State is the peer QP's state afterwards (AnyState: not checked).
	State transport.QPState
	// Status is the peer's completion status (AnyStatus: not checked;
	// AnyError: any error).
	Status transport.WCStatus
	// Detail says more about what was observed (observed outcomes only).
	Detail string
}

// String describes o as the report shows it.
func (o Outcome) String() string {
	var parts []string
	r := string(o.Reply)
	if o.Reply == NAK {
		r += " " + o.NAK.String()
	}
	if o.CheckPSN {
		r += fmt.Sprintf(" psn %+d", o.PSN)
	}
	if o.CheckCount {
		switch {
		case o.Reply == Retransmit || o.Reply == Completed || o.Reply == Waiting:
			r += fmt.Sprintf(" (%d sent again)", o.Count)
		case o.Reply == Silent:
		case o.Count == 1:
			r += " (1 packet)"
		default:
			r += fmt.Sprintf(" (%d packets)", o.Count)
		}
	}
	parts = append(parts, r)
	if o.State != AnyState {
		parts = append(parts, "QP "+o.State.String())
	}
	switch o.Status {
	case AnyStatus:
	case AnyError:
		parts = append(parts, "completion with an error")
	default:
		parts = append(parts, "completion "+o.Status.String())
	}
	if o.Detail != "" {
		parts = append(parts, o.Detail)
	}
	return strings.Join(parts, "; ")
}

// matches reports whether the observed outcome got is one the expectation
// e allows.
func (e Outcome) matches(got Outcome) bool {
	if e.Reply != got.Reply {
		return false
	}
	if e.Reply == NAK && e.NAK != got.NAK {
		return false
	}
	if e.CheckPSN && (!got.CheckPSN || e.PSN != got.PSN) {
		return false
	}
	if e.CheckCount && (!got.CheckCount || e.Count != got.Count) {
		return false
	}
	if e.State != AnyState && e.State != got.State {
		return false
	}
	switch e.Status {
	case AnyStatus:
	case AnyError:
		if got.Status == transport.Success || got.Status == AnyStatus {
			return false
		}
	default:
		if e.Status != got.Status {
			return false
		}
	}
	return true
}

// Case is one conformance check.
type Case struct {
	// ID names the case, unique in the catalogue.
	ID string
	// Rule is the rule the case checks: a clause of the InfiniBand
	// Architecture Specification volume 1 (C9-105) or the name of the
	// section it falls under (packet header validation).
	Rule string
	// Role is the peer's role.
	Role Role
	// Expected lists what the specification allows the peer to do; the
	// peer passes if it does any one of them.
	Expected []Outcome
	// setup adjusts the peer's QP before the case runs.
	setup setup
	// run plays the case against the peer and returns what it did.
	run func(s *session) (Outcome, error)
}

// ExpectedString describes what the specification allows.
func (c *Case) ExpectedString() string {
	s := make([]string, len(c.Expected))
	for i, e := range c.Expected {
		s[i] = e.String()
	}
	return strings.Join(s, " | ")
}

// Verdicts of a case.
const (
	// Pass: the peer did what the specification allows.
	Pass = "pass"
	// Deviation: the peer did something else.
	Deviation = "deviation"
	// Error: the case could not be judged (the suite or the link failed,
	// or the peer did not answer where it had to answer something).
	Error = "error"
)

// Result is one case's result, as the report and its JSON form carry it.
type Result struct {
	// ID is the case's ID.
	ID string `json:"id"`
	// Rule is the rule the case checks.
	Rule string `json:"rule"`
	// Role is the peer's role.
	Role Role `json:"role"`
	// Expected says what the specification allows.
	Expected string `json:"expected"`
	// Observed says what the peer did, or why the case could not be
	// judged.
	Observed string `json:"observed"`
	// Verdict is Pass, Deviation or Error.
	Verdict string `json:"verdict"`
	// PeerAlive says whether the peer still served a fresh QP after the
	// case (a SEND each way, acknowledged and completed).
	PeerAlive bool `json:"peer_alive"`
	// Ladder is the packets the suite and the peer exchanged in the case
	// (the check of a fresh QP afterwards left out); nil when none were.
	Ladder *ladder.Diagram `json:"-"`
	// PeerTool is the tool whose exchange gave the suite the peer's QP
	// (runs against a remote peer only).
	PeerTool string `json:"peer_tool,omitempty"`
	// PeerWhy says why the case uses that tool, or what it needs.
	PeerWhy string `json:"peer_tool_why,omitempty"`
}

// judge turns a case's observation into its result.
func judge(c *Case, got Outcome, err error, alive bool) Result {
	r := Result{ID: c.ID, Rule: c.Rule, Role: c.Role, Expected: c.ExpectedString(), PeerAlive: alive}
	switch {
	case err != nil:
		r.Verdict, r.Observed = Error, err.Error()
	default:
		r.Observed, r.Verdict = got.String(), Deviation
		for _, e := range c.Expected {
			if e.matches(got) {
				r.Verdict = Pass
				break
			}
		}
	}
	return r
}
