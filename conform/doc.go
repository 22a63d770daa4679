// Package conform is roced's specification-cited conformance suite: a
// catalogue of cases, each naming the InfiniBand rule it checks, the role
// the peer under test plays (responder or requester), what the
// specification allows, and a script in which a scripted raw endpoint
// plays a hostile requester or responder and records what the peer did:
// silent, ACK, NAK with its code, RNR NAK, a retransmission, the peer QP's
// state afterwards, its completion status, and whether the peer still
// serves a fresh QP.
//
// So far the peer is goroce itself (RunSelf): a transport.Device over the
// in-memory link whose timers run on a clock the suite moves by hand, so a
// case never waits for a real timeout and silence is proven with a fence
// (a duplicate request whose answer must be the next packet), never with a
// quiet interval.
package conform
