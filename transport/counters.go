package transport

import (
	"sync/atomic"

	"github.com/goroce/goroce/nic"
)

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

	// Congestion control, under mlx5's names (its hw_counters).
	NPECNMarkedRoCE atomic.Uint64 // np_ecn_marked_roce_packets: packets for a QP that arrived marked CE
	NPCNPSent       atomic.Uint64 // np_cnp_sent: CNPs sent for them (at most one per QP per np_min_time_between_cnps)
	RPCNPHandled    atomic.Uint64 // rp_cnp_handled: CNPs received that DCQCN acted on
	RPCNPIgnored    atomic.Uint64 // rp_cnp_ignored: CNPs received with DCQCN off, or for no QP
}

// List returns every counter with its name, in a stable order.
func (c *Counters) List() []nic.Counter {
	return []nic.Counter{
		{Name: "sent_pkts", Value: c.SentPkts.Load()},
		{Name: "rcvd_pkts", Value: c.RcvdPkts.Load()},
		{Name: "duplicate_request", Value: c.DuplicateRequest.Load()},
		{Name: "out_of_seq_request", Value: c.OutOfSeqRequest.Load()},
		{Name: "rcvd_rnr_err", Value: c.RcvdRNRErr.Load()},
		{Name: "send_rnr_err", Value: c.SendRNRErr.Load()},
		{Name: "rcvd_seq_err", Value: c.RcvdSeqErr.Load()},
		{Name: "ack_deferred", Value: c.AckDeferred.Load()},
		{Name: "retry_exceeded_err", Value: c.RetryExceededErr.Load()},
		{Name: "retry_rnr_exceeded_err", Value: c.RetryRNRExceededErr.Load()},
		{Name: "completer_retry_err", Value: c.CompleterRetryErr.Load()},
		{Name: "send_err", Value: c.SendErr.Load()},
		{Name: "rdma_sends", Value: c.RDMASends.Load()},
		{Name: "rdma_recvs", Value: c.RDMARecvs.Load()},
		{Name: "icrc_err", Value: c.ICRCErr.Load()},
		{Name: "malformed", Value: c.Malformed.Load()},
		{Name: "unknown_qp", Value: c.UnknownQP.Load()},
		{Name: "bad_state", Value: c.BadState.Load()},
		{Name: "bad_source", Value: c.BadSource.Load()},
		{Name: "bad_pkey", Value: c.BadPKey.Load()},
		{Name: "bad_qkey", Value: c.BadQKey.Load()},
		{Name: "no_recv_wqe", Value: c.NoRecvWQE.Load()},
		{Name: "uc_dropped", Value: c.UCDropped.Load()},
		{Name: "sent_naks", Value: c.SentNAKs.Load()},
		{Name: "sent_acks", Value: c.SentACKs.Load()},
		{Name: "timeouts", Value: c.Timeouts.Load()},
		{Name: "retransmitted_pkts", Value: c.RetransmittedPkts.Load()},
		{Name: "ghost_responses", Value: c.GhostResponses.Load()},
		{Name: "duplicate_responses", Value: c.DuplicateResponses.Load()},
		{Name: "cnps", Value: c.CNPs.Load()},
		{Name: "xrc_bad_srqn", Value: c.XRCBadSRQN.Load()},
		{Name: "xrc_domain_violation", Value: c.XRCDomainViolation.Load()},
		{Name: "xrc_misdirected", Value: c.XRCMisdirected.Load()},
		{Name: "polled_pkts", Value: c.PolledPkts.Load()},
		{Name: "clocked_posts", Value: c.ClockedPosts.Load()},
		{Name: "np_ecn_marked_roce_packets", Value: c.NPECNMarkedRoCE.Load()},
		{Name: "np_cnp_sent", Value: c.NPCNPSent.Load()},
		{Name: "rp_cnp_handled", Value: c.RPCNPHandled.Load()},
		{Name: "rp_cnp_ignored", Value: c.RPCNPIgnored.Load()},
	}
}
