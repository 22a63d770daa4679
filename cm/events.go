package cm

import (
	"errors"
	"fmt"
)

// EventType is what happened to a connection: the rdma_cm events
// (librdmacm's enum rdma_cm_event_type) that a Conn meets after Dial or
// Accept has it.
type EventType int

// The events, in the order a connection meets them.
const (
	// EventEstablished: the REP and RTU went both ways
	// (RDMA_CM_EVENT_ESTABLISHED). The active side's comes as its RTU
	// goes, the passive side's as the RTU arrives.
	EventEstablished EventType = iota
	// EventRejected: the peer refused the connection with a REJ
	// (RDMA_CM_EVENT_REJECTED); Err is a *RejectError with its reason.
	EventRejected
	// EventUnreachable: the peer never answered the REQ or the REP,
	// retries included (RDMA_CM_EVENT_UNREACHABLE); Err is ErrTimeout.
	EventUnreachable
	// EventConnectError: the connection failed on this side before it
	// was established (RDMA_CM_EVENT_CONNECT_ERROR): a canceled Dial, a
	// QP that could not be moved to RTS, a stale REP.
	EventConnectError
	// EventDisconnected: an established connection ended
	// (RDMA_CM_EVENT_DISCONNECTED): a DREQ either way, a DREQ that went
	// unanswered, or a REJ after establishment; Err says which. The QP is
	// in the error state and the IDs wait out the time wait.
	EventDisconnected
	// EventTimewaitExit: the time wait is over and the connection's IDs
	// are forgotten (RDMA_CM_EVENT_TIMEWAIT_EXIT).
	EventTimewaitExit
	// EventConnectResponse: the peer's REP to a Dial with an external QP
	// (QPConfig.ExternalQPN) arrived, and no RTU went yet
	// (RDMA_CM_EVENT_CONNECT_RESPONSE): the program moves its QP
	// (Conn.QPAttr) and calls Conn.Establish.
	EventConnectResponse
)

var eventNames = [...]string{"ESTABLISHED", "REJECTED", "UNREACHABLE", "CONNECT_ERROR", "DISCONNECTED", "TIMEWAIT_EXIT", "CONNECT_RESPONSE"}

// String returns librdmacm's name for the event without its
// RDMA_CM_EVENT_ prefix.
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one thing that happened to a connection.
type Event struct {
	Type EventType // what happened
	Conn *Conn     // the connection
	Err  error     // why it ended, for the events that end one
}

// String returns the event, its connection's addresses and its cause.
func (e Event) String() string {
	s := fmt.Sprintf("%v %v -> %v", e.Type, e.Conn.local, e.Conn.remote)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// eventQueue is the manager's event stream: events are never waited for,
// so a program that does not read them loses the newest (counted), and
// the manager never blocks on one.
const eventQueue = 256

// Events returns the stream of the manager's connection events (the
// rdma_cm event channel's, apart from what Dial and Accept return). The
// channel is closed by Close; when it is full the newest event is
// dropped and counted (EventsLost).
func (m *Manager) Events() <-chan Event { return m.events }

// EventsLost returns how many events found the stream full.
func (m *Manager) EventsLost() uint64 { return m.eventsLost.Load() }

// emit queues an event. Called with m.mu held, which Close takes to
// close the stream.
func (m *Manager) emit(t EventType, c *Conn, err error) {
	if m.closed {
		return
	}
	select {
	case m.events <- Event{Type: t, Conn: c, Err: err}:
	default:
		m.eventsLost.Add(1)
	}
}

// endEvent is the event of a connection that ended before it was
// established, from the reason it ended.
func endEvent(err error) EventType {
	var rej *RejectError
	switch {
	case errors.As(err, &rej):
		return EventRejected
	case errors.Is(err, ErrTimeout):
		return EventUnreachable
	}
	return EventConnectError
}
