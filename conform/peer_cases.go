package conform

// peerNeed is the tool a case uses against a remote peer, and why.
type peerNeed struct {
	tool peerTool
	why  string
	// req is how a requester case is played (the peer's tool a client).
	req *peerReq
}

// name is the tool's name in a report.
func (n peerNeed) name() string {
	switch n.tool {
	case toolPingpong:
		return "rc_pingpong"
	case toolWriteBW:
		return "write_bw"
	case toolReadBW:
		return "read_bw"
	case toolAtomicBW:
		return "atomic_bw"
	case toolPyverbs:
		return "requester.py"
	}
	return "none"
}

// Why a tool fits the cases that use it.
const (
	whyPingpongSend = "SENDs need posted receives: rc_pingpong's server posts them (and its QP needs no remote right for a SEND)"
	whyPingpongHdr  = "a packet the peer must drop or refuse before any memory check; rc_pingpong's QP takes SENDs, so an accepted packet would show"
	whyNoRight      = "needs a QP without that remote right: rc_pingpong's QP has none (qp_access_flags 0); its exchange gives no R_Key, so the suite sends R_Key 0 and the peer may refuse on the R_Key check first (either NAK is allowed)"
	whyWrite        = "needs a region's R_Key and address and a QP with remote write: ib_write_bw's server sends them in perftest's record"
	whyRead         = "needs a region's R_Key and address and a QP with remote read: ib_read_bw's server sends them in perftest's record, with as many responder resources as the device has"
	whyAtomic       = "needs a region's R_Key and address and a QP with remote atomics: ib_atomic_bw's server sends them in perftest's record"
	whyRNR          = "needs an RC QP with no receive posted: ib_write_bw's server posts none; perftest's RNR timer code is 12"
)

// peerNeeds says which tool gives the case its peer QP.
func peerNeeds(c *Case) peerNeed {
	if c.Role == Requester {
		return requesterNeeds(c)
	}
	switch c.ID {
	case "resp-send-only", "resp-psn-ahead", "resp-psn-ahead-twice", "resp-psn-ahead-then-expected", "resp-dup-send",
		"resp-send-middle-without-first", "resp-send-last-without-first", "resp-send-only-inside-send",
		"resp-write-middle-inside-send", "resp-send-only-over-mtu", "resp-send-first-short", "resp-padcnt-on-middle",
		"resp-fecn-becn":
		return peerNeed{toolPingpong, whyPingpongSend, nil}
	case "resp-uc-opcode-on-rc", "resp-ud-opcode-on-rc", "resp-padcnt-beyond-payload", "resp-icrc-spoiled",
		"resp-bad-pkey", "resp-unknown-dest-qp", "resp-tver-nonzero", "resp-reserved-opcode":
		return peerNeed{toolPingpong, whyPingpongHdr, nil}
	case "resp-read-without-remote-read", "resp-write-without-remote-write", "resp-atomic-without-remote-atomic":
		return peerNeed{toolPingpong, whyNoRight, nil}
	case "resp-rnr-no-receive":
		return peerNeed{toolWriteBW, whyRNR, nil}
	case "resp-dup-read", "resp-read-beyond-region", "resp-read-bad-rkey", "resp-read-msn":
		return peerNeed{toolReadBW, whyRead, nil}
	case "resp-dup-atomic", "resp-atomic-bad-rkey", "resp-atomic-misaligned":
		return peerNeed{toolAtomicBW, whyAtomic, nil}
	}
	return peerNeed{toolWriteBW, whyWrite, nil}
}
