package conform

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Expectations used by many responder cases.
var (
	// the request is acknowledged and the connection goes on
	ackedRTS = Outcome{Reply: ACK, PSN: 0, CheckPSN: true, State: transport.RTS, Status: AnyStatus}
	// the packet is dropped without an answer and the connection goes on
	silentRTS = Outcome{Reply: Silent, Count: 0, CheckCount: true, State: transport.RTS, Status: AnyStatus}
)

// fatalNAK is a NAK of code at the stimulus's PSN plus d, after which
// the QP is in the error state.
func fatalNAK(code bth.NAKCode, d int) Outcome {
	return Outcome{Reply: NAK, NAK: code, PSN: d, CheckPSN: true, State: transport.Err, Status: AnyStatus}
}

func pay(n int) []byte { return bytes.Repeat([]byte{0xa5}, n) }

// one is a responder case whose script is a single stimulus.
func one(id, rule string, set setup, stim func(s *session) []pkt, expected ...Outcome) Case {
	return Case{ID: id, Rule: rule, Role: Responder, Expected: expected, setup: set,
		run: func(s *session) (Outcome, error) { return s.respond(stim(s)...) }}
}

// withHdr returns p with its BTH changed by f before the ICRC.
func withHdr(p pkt, f func(bth.BTH)) pkt { p.hdr = f; return p }

func responderCases() []Case {
	seqNAK := Outcome{Reply: NAK, NAK: bth.NAKPSNSequenceError, PSN: 0, CheckPSN: true, Count: 1, CheckCount: true,
		State: transport.RTS, Status: AnyStatus}
	noRead := setup{access: transport.LocalWrite | transport.RemoteWrite | transport.RemoteAtomic}
	noWrite := setup{access: transport.LocalWrite | transport.RemoteRead | transport.RemoteAtomic}
	noAtomic := setup{access: transport.LocalWrite | transport.RemoteRead | transport.RemoteWrite}
	// An operation the QP's access flags do not enable: rxe answers an
	// invalid request; a remote access error names the same fault.
	notEnabled := []Outcome{fatalNAK(bth.NAKInvalidRequest, 0), fatalNAK(bth.NAKRemoteAccessError, 0)}
	return []Case{
		one("resp-send-only", "responder: a valid request is executed and acknowledged (AckReq)", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCSendOnly, 0, pay(64))} }, ackedRTS),
		one("resp-psn-ahead", "responder PSN check: sequence error NAK carries the expected PSN", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCSendOnly, 3, pay(64))} }, seqNAK),
		one("resp-psn-ahead-twice", "responder PSN check: one sequence error NAK per gap", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCSendOnly, 3, pay(64)), s.req(bth.RCSendOnly, 4, pay(64))}
			}, seqNAK),
		{ID: "resp-psn-ahead-then-expected", Rule: "responder PSN check: after a sequence error NAK, the expected PSN is taken", Role: Responder,
			Expected: []Outcome{ackedRTS},
			run: func(s *session) (Outcome, error) {
				if err := s.step(s.req(bth.RCSendOnly, 2, pay(64)), seqNAK); err != nil {
					return Outcome{}, err
				}
				return s.respond(s.req(bth.RCSendOnly, 0, pay(64)))
			}},
		{ID: "resp-dup-send", Rule: "C9-105", Role: Responder,
			Expected: []Outcome{{Reply: ACK, PSN: -1, CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: AnyStatus}},
			run: func(s *session) (Outcome, error) {
				if err := s.step(s.req(bth.RCSendOnly, 0, pay(64)), ackedRTS); err != nil {
					return Outcome{}, err
				}
				s.c.ePSN++
				o, err := s.respond(pkt{op: bth.RCSendOnly, qpn: s.peerQPN(), psn: s.c.ePSN - 1, ackReq: true, payload: pay(64)})
				// A remote peer's receive queue cannot be read: its answers
				// are what is judged.
				if err == nil && s.peer == nil {
					if n := s.c.rcq.Len(); n != 1 {
						o.Reply = Reply(fmt.Sprintf("duplicate delivered (%d receive completions)", n))
					}
				}
				return o, err
			}},
		{ID: "resp-dup-write", Rule: "C9-105", Role: Responder,
			Expected: []Outcome{{Reply: ACK, PSN: -1, CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: AnyStatus}},
			run: func(s *session) (Outcome, error) {
				w := s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.va(8192), s.rkey(), 64))
				if err := s.step(w, ackedRTS); err != nil {
					return Outcome{}, err
				}
				s.c.ePSN++
				return s.respond(w)
			}},
		{ID: "resp-dup-read", Rule: "duplicate handling: a duplicate READ is answered again from the responder resources", Role: Responder,
			Expected: []Outcome{{Reply: ReadResponse, PSN: -2, CheckPSN: true, Count: 2, CheckCount: true, State: transport.RTS, Status: AnyStatus}},
			run: func(s *session) (Outcome, error) {
				r := s.req(bth.RCReadRequest, 0, nil, withRETH(s.va(4096), s.rkey(), 2*mtu))
				if err := s.raw.send(r); err != nil {
					return Outcome{}, err
				}
				for range 2 {
					if _, err := s.raw.next(s.c.qpn); err != nil {
						return Outcome{}, fmt.Errorf("the first READ: %w", err)
					}
				}
				s.c.ePSN += 2
				return s.respond(r)
			}},
		{ID: "resp-dup-atomic", Rule: "duplicate handling: a duplicate atomic is answered again, not executed again", Role: Responder,
			Expected: []Outcome{{Reply: AtomicAck, PSN: -1, CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: AnyStatus}},
			run: func(s *session) (Outcome, error) {
				a := s.req(bth.RCFetchAdd, 0, nil, withAtomic(s.va(8192), s.rkey(), 5, 0))
				if s.peer != nil {
					// A remote peer's memory cannot be read: the replayed
					// answer must carry the first one's original value.
					first, err := s.stepAtomic(a)
					if err != nil {
						return Outcome{}, err
					}
					s.c.ePSN++
					ref := s.c.ePSN
					got, err := s.exchange(a)
					o := s.respOutcome(got, ref)
					if err == nil && o.Reply == AtomicAck {
						if v := got[0].AtomicAckETH().OrigData(); v != first {
							o.Reply = Reply(fmt.Sprintf("atomic executed again (original value %d, the first answer's %d)", v, first))
						}
					}
					return o, err
				}
				word := s.mr.Bytes()[8192:]
				binary.LittleEndian.PutUint64(word, 10)
				if err := s.step(a, Outcome{Reply: AtomicAck, PSN: 0, CheckPSN: true, State: transport.RTS, Status: AnyStatus}); err != nil {
					return Outcome{}, err
				}
				s.c.ePSN++
				o, err := s.respond(a)
				if v := binary.LittleEndian.Uint64(word); err == nil && v != 15 {
					o.Reply = Reply(fmt.Sprintf("atomic executed again (word %d, want 15)", v))
				}
				return o, err
			}},
		one("resp-send-middle-without-first", "responder opcode sequence check: MIDDLE without FIRST", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCSendMiddle, 0, pay(mtu))} },
			fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-send-last-without-first", "responder opcode sequence check: LAST without FIRST", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCSendLast, 0, pay(64))} },
			fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-write-middle-without-first", "responder opcode sequence check: MIDDLE without FIRST", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCWriteMiddle, 0, pay(mtu))} },
			fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-send-only-inside-send", "responder opcode sequence check: a new message before the LAST", setup{},
			func(s *session) []pkt {
				f := s.req(bth.RCSendFirst, 0, pay(mtu))
				f.ackReq = false
				return []pkt{f, s.req(bth.RCSendOnly, 1, pay(64))}
			}, fatalNAK(bth.NAKInvalidRequest, 1)),
		one("resp-write-middle-inside-send", "responder opcode sequence check: WRITE MIDDLE inside a SEND", setup{},
			func(s *session) []pkt {
				f := s.req(bth.RCSendFirst, 0, pay(mtu))
				f.ackReq = false
				return []pkt{f, s.req(bth.RCWriteMiddle, 1, pay(mtu))}
			}, fatalNAK(bth.NAKInvalidRequest, 1)),
		one("resp-uc-opcode-on-rc", "packet header validation: opcode of another transport", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.UCSendOnly, 0, pay(64))} }, silentRTS),
		one("resp-ud-opcode-on-rc", "packet header validation: opcode of another transport", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.UDSendOnly, 0, pay(64), func(p []byte, i *bth.Info) {
					d := bth.DETH(p[i.Offset(bth.ExtDETH):])
					d.SetQKey(0x11111111)
					d.SetSrcQP(s.c.qpn)
				})}
			}, silentRTS),
		one("resp-write-bad-rkey", "responder R_Key check: remote access error", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.va(0), s.rkey()^0x100, 64))}
			}, fatalNAK(bth.NAKRemoteAccessError, 0)),
		one("resp-write-beyond-region", "responder R_Key check: the range lies outside the region", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.pastEnd(-32), s.rkey(), 64))}
			}, fatalNAK(bth.NAKRemoteAccessError, 0)),
		one("resp-read-beyond-region", "responder R_Key check: the range lies outside the region", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCReadRequest, 0, nil, withRETH(s.pastEnd(-32), s.rkey(), 64))}
			}, fatalNAK(bth.NAKRemoteAccessError, 0)),
		one("resp-read-bad-rkey", "responder R_Key check: remote access error", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCReadRequest, 0, nil, withRETH(s.va(0), 0xdead00, 64))}
			}, fatalNAK(bth.NAKRemoteAccessError, 0)),
		one("resp-atomic-bad-rkey", "responder R_Key check: remote access error", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCCompareSwap, 0, nil, withAtomic(s.va(0), s.rkey()+1, 1, 0))}
			}, fatalNAK(bth.NAKRemoteAccessError, 0)),
		one("resp-read-without-remote-read", "responder: an operation the QP's access flags do not enable", noRead,
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCReadRequest, 0, nil, withRETH(s.va(0), s.rkey(), 64))}
			}, notEnabled...),
		one("resp-write-without-remote-write", "responder: an operation the QP's access flags do not enable", noWrite,
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.va(0), s.rkey(), 64))}
			}, notEnabled...),
		one("resp-atomic-without-remote-atomic", "responder: an operation the QP's access flags do not enable", noAtomic,
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCFetchAdd, 0, nil, withAtomic(s.va(0), s.rkey(), 1, 0))}
			}, notEnabled...),
		one("resp-atomic-misaligned", "atomic operations: the address must be 8-byte aligned", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCFetchAdd, 0, nil, withAtomic(s.va(4), s.rkey(), 1, 0))}
			}, fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-write-longer-than-reth", "responder length check: payload beyond the RETH's DMA length", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.va(0), s.rkey(), 32))}
			}, fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-write-shorter-than-reth", "responder length check: message shorter than the RETH's DMA length", setup{},
			func(s *session) []pkt {
				return []pkt{s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.va(0), s.rkey(), 100))}
			}, fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-send-only-over-mtu", "responder length check: an ONLY packet longer than the path MTU", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCSendOnly, 0, pay(mtu+64))} },
			fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-send-first-short", "responder length check: a FIRST packet shorter than the path MTU", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCSendFirst, 0, pay(mtu-24))} },
			fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-padcnt-beyond-payload", "packet header validation: PadCnt larger than the payload", setup{},
			func(s *session) []pkt {
				return []pkt{withHdr(s.req(bth.RCSendOnly, 0, nil), func(b bth.BTH) { b.SetPadCount(3) })}
			}, silentRTS, fatalNAK(bth.NAKInvalidRequest, 0)),
		one("resp-padcnt-on-middle", "responder length check: a MIDDLE packet with pad bytes is short of the path MTU", setup{},
			func(s *session) []pkt {
				f := s.req(bth.RCSendFirst, 0, pay(mtu))
				f.ackReq = false
				return []pkt{f, s.req(bth.RCSendMiddle, 1, pay(mtu-3))}
			}, fatalNAK(bth.NAKInvalidRequest, 1)),
		one("resp-icrc-spoiled", "packet header validation: ICRC (Annex A17)", setup{},
			func(s *session) []pkt {
				p := s.req(bth.RCSendOnly, 0, pay(64))
				p.after = func(r []byte) []byte { r[len(r)-1] ^= 0xff; return r }
				return []pkt{p}
			}, silentRTS),
		one("resp-truncated-reth", "packet header validation: a packet shorter than its headers", setup{},
			func(s *session) []pkt {
				p := s.req(bth.RCWriteOnly, 0, pay(64), withRETH(s.va(0), s.rkey(), 64))
				p.trunc = bth.BTHLen + 8
				return []pkt{p}
			}, silentRTS),
		one("resp-bad-pkey", "packet header validation: P_Key", setup{},
			func(s *session) []pkt {
				return []pkt{withHdr(s.req(bth.RCSendOnly, 0, pay(64)), func(b bth.BTH) { b.SetPKey(0x8001) })}
			}, silentRTS),
		one("resp-unknown-dest-qp", "packet header validation: destination QP", setup{},
			func(s *session) []pkt {
				return []pkt{withHdr(s.req(bth.RCSendOnly, 0, pay(64)), func(b bth.BTH) { b.SetDestQP(0x7777) })}
			}, silentRTS),
		one("resp-tver-nonzero", "packet header validation: transport header version", setup{},
			func(s *session) []pkt {
				return []pkt{withHdr(s.req(bth.RCSendOnly, 0, pay(64)), func(b bth.BTH) { b[1] |= 1 })}
			}, silentRTS),
		one("resp-fecn-becn", "ICRC (Annex A17): FECN and BECN are masked, a marked packet is valid", setup{},
			func(s *session) []pkt {
				return []pkt{withHdr(s.req(bth.RCSendOnly, 0, pay(64)), func(b bth.BTH) { b.SetFECN(true); b.SetBECN(true) })}
			}, ackedRTS),
		{ID: "resp-rnr-no-receive", Rule: "responder: RNR NAK carries the QP's minimum RNR timer", Role: Responder,
			setup:    setup{noRecv: true, minRNR: 14},
			Expected: []Outcome{{Reply: RNRNAK, PSN: 0, CheckPSN: true, State: transport.RTS, Status: AnyStatus}},
			run: func(s *session) (Outcome, error) {
				ref := s.c.ePSN
				got, err := s.exchange(s.req(bth.RCSendOnly, 0, pay(64)))
				o := s.respOutcome(got, ref)
				if err == nil && o.Reply == RNRNAK {
					if v, want := got[0].AETH().Syndrome().Value(), s.minRNR(); v != want {
						o.Reply = Reply(fmt.Sprintf("RNR NAK with timer code %d, want %d", v, want))
					}
				}
				return o, err
			}},
		{ID: "resp-read-msn", Rule: "C9-148", Role: Responder,
			Expected: []Outcome{{Reply: ReadResponse, PSN: 0, CheckPSN: true, State: transport.RTS, Status: AnyStatus}},
			run: func(s *session) (Outcome, error) {
				ref := s.c.ePSN
				got, err := s.exchange(s.req(bth.RCReadRequest, 0, nil, withRETH(s.va(0), s.rkey(), 64)))
				o := s.respOutcome(got, ref)
				if err == nil && o.Reply == ReadResponse {
					// the first message on the QP
					if m, want := got[0].AETH().MSN(), s.msnBefore()+1; m != want {
						o.Reply = Reply(fmt.Sprintf("READ response with MSN %d, want %d", m, want))
					}
				}
				return o, err
			}},
		one("resp-zero-length-write-no-rkey", "responder R_Key check: a zero-length RDMA needs no valid R_Key", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.RCWriteOnly, 0, nil, withRETH(0, 0, 0))} }, ackedRTS),
		one("resp-reserved-opcode", "packet header validation: a reserved opcode", setup{},
			func(s *session) []pkt { return []pkt{s.req(bth.OpCode(0x1f), 0, pay(64))} },
			silentRTS, fatalNAK(bth.NAKInvalidRequest, 0)),
	}
}

// stepAtomic sends an atomic request that must be answered with an
// Atomic Acknowledge, and returns its original value.
func (s *session) stepAtomic(p pkt) (uint64, error) {
	ref := s.c.ePSN
	got, err := s.exchange(p)
	if err != nil {
		return 0, err
	}
	o := s.respOutcome(got, ref)
	if want := (Outcome{Reply: AtomicAck, PSN: 0, CheckPSN: true, State: transport.RTS, Status: AnyStatus}); !want.matches(o) {
		return 0, fmt.Errorf("preparing: %v answered with %v", p.op, o)
	}
	return got[0].AtomicAckETH().OrigData(), nil
}

// minRNR is the RNR timer code the peer's QP was given: the case's setup,
// or for a remote peer its tool's.
func (s *session) minRNR() uint8 {
	if s.peer != nil {
		return s.peer.minRNR
	}
	return s.set.minRNR
}

// step sends one request and requires the answer want before a case's
// real stimulus.
func (s *session) step(p pkt, want Outcome) error {
	if s.peer != nil {
		s.peer.answers, s.peer.stepping = want.answers(), true
	}
	got, err := s.respond(p)
	if err != nil {
		return err
	}
	if !want.matches(got) {
		return fmt.Errorf("preparing: %v answered with %v", p.op, got)
	}
	return nil
}
