package transport

import (
	"fmt"
)

// EventType is an asynchronous event, with the values of enum ibv_event_type.
type EventType uint8

// Asynchronous events.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
)

var eventNames = map[EventType]string{
	EventCQErr: "CQ error", EventQPFatal: "local work queue catastrophic error",
	EventQPReqErr: "invalid request local work queue error", EventQPAccessErr: "local access violation work queue error",
	EventCommEst: "communication established", EventSQDrained: "send queue drained",
	EventPathMig: "path migrated", EventPathMigErr: "path migration request error",
	EventDeviceFatal: "local catastrophic error", EventPortActive: "port active", EventPortErr: "port error",
	EventSRQErr: "SRQ catastrophic error", EventSRQLimitReached: "SRQ limit reached",
	EventQPLastWQEReached: "last WQE reached", EventGIDChange: "GID table change",
}

// String returns the text ibv_event_type_str gives.
func (e EventType) String() string {
	if s, ok := eventNames[e]; ok {
		return s
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// Event is an asynchronous event (struct ibv_async_event).
type Event struct {
	Type EventType // what happened
	QP   *QP       // the QP it concerns, for QP events
	SRQ  *SRQ      // the SRQ it concerns, for SRQ events
	CQ   *CQ       // the CQ it concerns, for EventCQErr
	Err  error     // what caused it, when known
}

// String returns the event's text, QP number and cause.
func (e Event) String() string {
	s := e.Type.String()
	if e.QP != nil {
		s += fmt.Sprintf(" qpn=0x%06x", e.QP.QPN())
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}
