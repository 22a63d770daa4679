package qp

import "sync/atomic"

// Counters are a device's protocol counters. The first group carries the
// names of Linux rxe's hw_counters (/sys/class/infiniband/DEV/ports/1/
// hw_counters) so figures compare one to one; the rest are goroce's.
type Counters struct {
	SentPkts            atomic.Uint64 // sent_pkts
	RcvdPkts            atomic.Uint64 // rcvd_pkts
	DuplicateRequest    atomic.Uint64 // duplicate_request
	OutOfSeqRequest     atomic.Uint64 // out_of_seq_request
	RcvdRNRErr          atomic.Uint64 // rcvd_rnr_err: RNR NAKs received
	SendRNRErr          atomic.Uint64 // send_rnr_err: RNR NAKs sent
	RcvdSeqErr          atomic.Uint64 // rcvd_seq_err: sequence error NAKs received
	AckDeferred         atomic.Uint64 // ack_deferred: ACKs coalesced into a later one
	RetryExceededErr    atomic.Uint64 // retry_exceeded_err
	RetryRNRExceededErr atomic.Uint64 // retry_rnr_exceeded_err
	CompleterRetryErr   atomic.Uint64 // completer_retry_err: retries started by the completer
	SendErr             atomic.Uint64 // send_err
	RDMASends           atomic.Uint64 // rdma_sends
	RDMARecvs           atomic.Uint64 // rdma_recvs

	ICRCErr            atomic.Uint64 // packets whose ICRC did not verify
	Malformed          atomic.Uint64 // packets that failed framing or header validation
	UnknownQP          atomic.Uint64 // packets for a QP number that does not exist
	BadState           atomic.Uint64 // packets for a QP in a state that does not receive
	BadSource          atomic.Uint64 // RC/UC packets from an address other than the QP's peer
	BadPKey            atomic.Uint64 // P_Key mismatch
	BadQKey            atomic.Uint64 // UD Q_Key mismatch
	NoRecvWQE          atomic.Uint64 // UC/UD messages dropped for want of a receive WQE
	UCDropped          atomic.Uint64 // UC packets dropped until the next FIRST or ONLY
	SentNAKs           atomic.Uint64 // NAKs other than RNR sent
	SentACKs           atomic.Uint64 // ACKs sent
	Timeouts           atomic.Uint64 // local ACK timeouts
	RetransmittedPkts  atomic.Uint64 // request packets sent again
	GhostResponses     atomic.Uint64 // responses for PSNs never sent, dropped
	DuplicateResponses atomic.Uint64 // responses for PSNs already completed, dropped
	CNPs               atomic.Uint64 // congestion notification packets received
	XRCBadSRQN         atomic.Uint64 // XRC requests whose XRCETH names no XRC SRQ (NAKed)
	XRCDomainViolation atomic.Uint64 // XRC requests naming an XRC SRQ of another domain (NAKed)
	XRCMisdirected     atomic.Uint64 // XRC requests to an initiator QP or responses to a target QP, dropped
	PolledPkts         atomic.Uint64 // received packets a poller handled (poll mode), of rcvd_pkts
	ClockedPosts       atomic.Uint64 // posts left for the next acknowledgement to send (doorbell)
}

// Counter is one named counter value.
type Counter struct {
	Name  string // as rxe names it in hw_counters, where it has one
	Value uint64 // events counted since the device opened
}

// List returns every counter with its name, in a stable order.
func (c *Counters) List() []Counter {
	return []Counter{
		{"sent_pkts", c.SentPkts.Load()},
		{"rcvd_pkts", c.RcvdPkts.Load()},
		{"duplicate_request", c.DuplicateRequest.Load()},
		{"out_of_seq_request", c.OutOfSeqRequest.Load()},
		{"rcvd_rnr_err", c.RcvdRNRErr.Load()},
		{"send_rnr_err", c.SendRNRErr.Load()},
		{"rcvd_seq_err", c.RcvdSeqErr.Load()},
		{"ack_deferred", c.AckDeferred.Load()},
		{"retry_exceeded_err", c.RetryExceededErr.Load()},
		{"retry_rnr_exceeded_err", c.RetryRNRExceededErr.Load()},
		{"completer_retry_err", c.CompleterRetryErr.Load()},
		{"send_err", c.SendErr.Load()},
		{"rdma_sends", c.RDMASends.Load()},
		{"rdma_recvs", c.RDMARecvs.Load()},
		{"icrc_err", c.ICRCErr.Load()},
		{"malformed", c.Malformed.Load()},
		{"unknown_qp", c.UnknownQP.Load()},
		{"bad_state", c.BadState.Load()},
		{"bad_source", c.BadSource.Load()},
		{"bad_pkey", c.BadPKey.Load()},
		{"bad_qkey", c.BadQKey.Load()},
		{"no_recv_wqe", c.NoRecvWQE.Load()},
		{"uc_dropped", c.UCDropped.Load()},
		{"sent_naks", c.SentNAKs.Load()},
		{"sent_acks", c.SentACKs.Load()},
		{"timeouts", c.Timeouts.Load()},
		{"retransmitted_pkts", c.RetransmittedPkts.Load()},
		{"ghost_responses", c.GhostResponses.Load()},
		{"duplicate_responses", c.DuplicateResponses.Load()},
		{"cnps", c.CNPs.Load()},
		{"xrc_bad_srqn", c.XRCBadSRQN.Load()},
		{"xrc_domain_violation", c.XRCDomainViolation.Load()},
		{"xrc_misdirected", c.XRCMisdirected.Load()},
		{"polled_pkts", c.PolledPkts.Load()},
		{"clocked_posts", c.ClockedPosts.Load()},
	}
}
