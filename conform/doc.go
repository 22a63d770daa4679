// Package conform is roced's specification-cited conformance suite: a
// catalogue of cases, each naming the InfiniBand rule it checks, the role
// the peer under test plays (responder or requester), what the
// specification allows, and a script in which a scripted raw endpoint
// plays a hostile requester or responder and records what the peer did:
// silent, ACK, NAK with its code, RNR NAK, a retransmission, the peer QP's
// state afterwards, its completion status, and whether the peer still
// serves a fresh QP.
//
// The peer is goroce itself (RunSelf): a transport.Device over the
// in-memory link whose timers run on a clock the suite moves by hand, so a
// case never waits for a real timeout and silence is proven with a fence
// (a duplicate request whose answer must be the next packet), never with a
// quiet interval. Or it is another host's tools (RunPeer): each case
// starts a peer tool afresh, takes its QP through the tool's own exchange
// (a pingpong record, or perftest's), and fences on that QP with a primer
// request sent again; so far only the responder cases run that way.
package conform
