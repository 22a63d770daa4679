package hook

import (
	"fmt"
	"reflect"
	"sync/atomic"
)

// Counters are the device's protocol counters that a QP counts, each a
// pointer into the device's own counters (named alike there, with their
// documentation and rxe's names), so that the counters live in the device
// and qp does not name the device's types. Each field's comment is the
// counter's name in the device's list. A pointer per counter costs
// the increment no more than a field did: Env holds Counters by value.
type Counters struct {
	SentPkts            *atomic.Uint64 // sent_pkts
	DuplicateRequest    *atomic.Uint64 // duplicate_request
	OutOfSeqRequest     *atomic.Uint64 // out_of_seq_request
	RcvdRNRErr          *atomic.Uint64 // rcvd_rnr_err
	SendRNRErr          *atomic.Uint64 // send_rnr_err
	RcvdSeqErr          *atomic.Uint64 // rcvd_seq_err
	AckDeferred         *atomic.Uint64 // ack_deferred
	RetryExceededErr    *atomic.Uint64 // retry_exceeded_err
	RetryRNRExceededErr *atomic.Uint64 // retry_rnr_exceeded_err
	CompleterRetryErr   *atomic.Uint64 // completer_retry_err
	SendErr             *atomic.Uint64 // send_err
	RDMASends           *atomic.Uint64 // rdma_sends
	RDMARecvs           *atomic.Uint64 // rdma_recvs
	Malformed           *atomic.Uint64 // malformed
	BadState            *atomic.Uint64 // bad_state
	BadSource           *atomic.Uint64 // bad_source
	BadPKey             *atomic.Uint64 // bad_pkey
	BadQKey             *atomic.Uint64 // bad_qkey
	NoRecvWQE           *atomic.Uint64 // no_recv_wqe
	UCDropped           *atomic.Uint64 // uc_dropped
	SentNAKs            *atomic.Uint64 // sent_naks
	SentACKs            *atomic.Uint64 // sent_acks
	Timeouts            *atomic.Uint64 // timeouts
	RetransmittedPkts   *atomic.Uint64 // retransmitted_pkts
	GhostResponses      *atomic.Uint64 // ghost_responses
	DuplicateResponses  *atomic.Uint64 // duplicate_responses
	XRCBadSRQN          *atomic.Uint64 // xrc_bad_srqn
	XRCDomainViolation  *atomic.Uint64 // xrc_domain_violation
	XRCMisdirected      *atomic.Uint64 // xrc_misdirected
	ClockedPosts        *atomic.Uint64 // clocked_posts
	NPECNMarkedRoCE     *atomic.Uint64 // np_ecn_marked_roce_packets
	NPCNPSent           *atomic.Uint64 // np_cnp_sent
	RPCNPHandled        *atomic.Uint64 // rp_cnp_handled
	RPCNPIgnored        *atomic.Uint64 // rp_cnp_ignored
}

var counterType = reflect.TypeFor[atomic.Uint64]()

// BindCounters points each of Counters' fields at the field of the same
// name in the struct store points to, an atomic.Uint64. A counter the
// store lacks is the program's mistake, so it panics, at the device's
// first Open.
func BindCounters(store any) Counters {
	s := reflect.ValueOf(store)
	if s.Kind() != reflect.Pointer || s.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("hook: BindCounters of %T, not a pointer to a struct", store))
	}
	s = s.Elem()
	var c Counters
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		f := s.FieldByName(name)
		if !f.IsValid() || f.Type() != counterType {
			panic(fmt.Sprintf("hook: %s has no atomic.Uint64 counter %s", s.Type(), name))
		}
		v.Field(i).Set(f.Addr())
	}
	return c
}

// NewCounters returns Counters over storage of their own, for a QP with no
// device (qp's tests).
func NewCounters() Counters {
	var c Counters
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		v.Field(i).Set(reflect.New(counterType))
	}
	return c
}

// QPEvent is an asynchronous event affiliated with a QP, one of those qp
// raises, with enum ibv_event_type's value; the device's event type names
// each, and its tests check that the values agree.
type QPEvent uint8

// The events qp raises.
const (
	QPFatal          QPEvent = 1  // IBV_EVENT_QP_FATAL
	QPReqErr         QPEvent = 2  // IBV_EVENT_QP_REQ_ERR
	QPAccessErr      QPEvent = 3  // IBV_EVENT_QP_ACCESS_ERR
	CommEst          QPEvent = 4  // IBV_EVENT_COMM_EST
	SQDrained        QPEvent = 5  // IBV_EVENT_SQ_DRAINED
	QPLastWQEReached QPEvent = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
)
