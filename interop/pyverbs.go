package interop

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// The verbs stage (-peer lab-pyverbs): what no tool exercises, memory
// windows, invalidation and regions outside the Go heap, checked against rxe's verbs driven through
// pyverbs in the guest (guestverbs.py). goroce runs in this process on the
// UDP link at the tap's host address; each case is a fresh RC connection
// between a goroce QP and an rxe QP, and a script of verbs on both sides
// whose every outcome (completion status, the bytes that moved, what a
// revoked key gets) is checked.

//go:embed guestverbs.py
var guestVerbsPy string

// guestVerbsPort is the verbs server's TCP port on the guest's address,
// beside the agent's.
const guestVerbsPort = 17998

// VerbsCase is one case of the verbs stage.
type VerbsCase struct {
	Name string // verbs/WHAT@WHO-OWNS-THE-WINDOW
	// Rule is what the case checks, with the specification's words.
	Rule string
	// Pair cases run pyverbs on both ends: the host's over libgoroce.so
	// (LD_PRELOAD) against the guest's on rxe, instead of goroce's API.
	Pair bool
	run  func(ctx context.Context, v *verbsConn) error
}

// ID returns the case's name.
func (c VerbsCase) ID() string { return c.Name }

// verbsServer is a connection to one verbs server: the guest's on rxe,
// or the host's on libgoroce.so.
type verbsServer struct {
	name string // "rxe" or "libgoroce", for messages
	conn net.Conn
	r    *bufio.Reader
	log  *[]string
}

// verbsConn is one case's connection: goroce's QP in this process and
// rxe's behind the guest's verbs server, or (a pair case) the QPs of the
// host's verbs server, over libgoroce.so, and the guest's.
type verbsConn struct {
	dev    *transport.Device
	pd     *transport.PD
	cq     *transport.CQ
	qp     *transport.QP
	target *transport.MR // 64 KiB, LocalWrite|MWBind: where goroce's windows go
	local  *transport.MR // goroce's own buffers
	guest  *verbsServer
	host   *verbsServer // pair cases only
	// peer is rxe's target region; hostTarget, in a pair case, the
	// host's.
	peer       remoteRegion
	hostTarget remoteRegion
	log        []string
	wr         uint64
}

// remoteRegion is a verbs server's target region, as it reported it.
type remoteRegion struct {
	Addr uint64
	RKey uint32
	Len  int
}

// logf records a step for the case's report.
func (v *verbsConn) logf(format string, a ...any) { v.log = append(v.log, fmt.Sprintf(format, a...)) }

// guestReply is every answer of a verbs server.
type guestReply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Status  int    `json:"status"`
	Opcode  int    `json:"opcode"`
	RKey    uint32 `json:"rkey"`
	Addr    uint64 `json:"addr"`
	Data    string `json:"data"`
	WithInv bool   `json:"with_inv"`
	WCFlags uint32 `json:"wc_flags"`
	InvRKey uint32 `json:"inv_rkey"`
	ByteLen int    `json:"byte_len"`
	Orig    uint64 `json:"orig"`
	State   int    `json:"state"`
	QPN     uint32 `json:"qpn"`
	PSN     uint32 `json:"psn"`
	GID     string `json:"gid"`
	Len     int    `json:"len"`
}

// call sends one request to the server and reads its answer.
func (s *verbsServer) call(ctx context.Context, req map[string]any) (*guestReply, error) {
	dl := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	s.conn.SetDeadline(dl)
	b, _ := json.Marshal(req)
	if _, err := s.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s side: %w", s.name, err)
	}
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%s side, %s: %w", s.name, req["op"], err)
	}
	var r guestReply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("%s side: %q: %w", s.name, line, err)
	}
	if !r.OK {
		return &r, fmt.Errorf("%s side, %s: %s", s.name, req["op"], r.Error)
	}
	*s.log = append(*s.log, fmt.Sprintf("%s %s -> %s", s.name, req["op"], strings.TrimSpace(string(line))))
	return &r, nil
}

// status calls op and checks the completion status the server reports
// (libibverbs' enum ibv_wc_status values, as transport.WCStatus).
func (s *verbsServer) status(ctx context.Context, want transport.WCStatus, req map[string]any) (*guestReply, error) {
	r, err := s.call(ctx, req)
	if err != nil {
		return nil, err
	}
	if transport.WCStatus(r.Status) != want {
		return r, fmt.Errorf("%s's %s completed %v, want %v", s.name, req["op"], transport.WCStatus(r.Status), want)
	}
	return r, nil
}

// call sends one request to rxe's side.
func (v *verbsConn) call(ctx context.Context, req map[string]any) (*guestReply, error) {
	return v.guest.call(ctx, req)
}

// rxeStatus calls op on rxe's side and checks its completion status.
func (v *verbsConn) rxeStatus(ctx context.Context, want transport.WCStatus, req map[string]any) (*guestReply, error) {
	return v.guest.status(ctx, want, req)
}

// post posts wr on goroce's QP and waits for its completion, checking
// its status.
func (v *verbsConn) post(ctx context.Context, wr transport.SendWR, want transport.WCStatus) (transport.WC, error) {
	v.wr++
	wr.WRID, wr.Flags = v.wr, wr.Flags|transport.Signaled
	if err := v.qp.PostSend(&wr); err != nil {
		return transport.WC{}, fmt.Errorf("goroce %v: %w", wr.Opcode, err)
	}
	return v.waitSend(ctx, v.wr, wr.Opcode.String(), want)
}

// waitSend waits for goroce's completion of wrID.
func (v *verbsConn) waitSend(ctx context.Context, wrID uint64, what string, want transport.WCStatus) (transport.WC, error) {
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var wc [1]transport.WC
	for {
		n, err := v.cq.PollWait(wctx, wc[:])
		if err != nil {
			return transport.WC{}, fmt.Errorf("goroce %s: no completion: %w", what, err)
		}
		if n == 1 && wc[0].WRID == wrID {
			break
		}
	}
	v.logf("goroce %s -> %v %v", what, wc[0].Opcode, wc[0].Status)
	if wc[0].Status != want {
		return wc[0], fmt.Errorf("goroce's %s completed %v, want %v", what, wc[0].Status, want)
	}
	return wc[0], nil
}

// pattern is the guest script's pattern(n, seed).
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// write WRITEs the pattern seed to rkey/addr from goroce.
func (v *verbsConn) write(ctx context.Context, rkey uint32, addr uint64, n int, seed byte, want transport.WCStatus) error {
	copy(v.local.Bytes(), pattern(n, seed))
	_, err := v.post(ctx, transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{v.local.SGE(0, n)}, RemoteAddr: addr, RKey: rkey}, want)
	return err
}

// read READs n bytes at rkey/addr into goroce's buffer and checks them
// against the pattern seed.
func (v *verbsConn) read(ctx context.Context, rkey uint32, addr uint64, n int, seed byte) error {
	clear(v.local.Bytes()[:n])
	if _, err := v.post(ctx, transport.SendWR{Opcode: transport.WRRDMARead, SGL: []transport.SGE{v.local.SGE(0, n)}, RemoteAddr: addr, RKey: rkey}, transport.Success); err != nil {
		return err
	}
	if !bytes.Equal(v.local.Bytes()[:n], pattern(n, seed)) {
		return errors.New("goroce's READ through the window returned other bytes than were written")
	}
	return nil
}

// rxeMem checks rxe's target region at off against the pattern seed.
func (v *verbsConn) rxeMem(ctx context.Context, off, n int, seed byte) error {
	r, err := v.call(ctx, map[string]any{"op": "mem", "off": off, "len": n})
	if err != nil {
		return err
	}
	b, err := hex.DecodeString(r.Data)
	if err != nil || !bytes.Equal(b, pattern(n, seed)) {
		return fmt.Errorf("rxe's region at %d: not the %d bytes goroce wrote", off, n)
	}
	return nil
}

// rxeRDMA has rxe WRITE (or READ) through goroce's rkey, with the status
// it must complete with; a READ's bytes are checked against seed.
func (v *verbsConn) rxeRDMA(ctx context.Context, op string, rkey uint32, addr uint64, n int, seed byte, want transport.WCStatus) error {
	r, err := v.rxeStatus(ctx, want, map[string]any{"op": op, "rkey": rkey, "addr": addr, "len": n, "seed": seed})
	if err != nil || op != "read" || want != transport.Success {
		return err
	}
	b, err := hex.DecodeString(r.Data)
	if err != nil || !bytes.Equal(b, pattern(n, seed)) {
		return errors.New("rxe's READ through goroce's window returned other bytes")
	}
	return nil
}

// Window access rights in libibverbs' values (transport.Access has them).
const winRW = transport.RemoteRead | transport.RemoteWrite

// rxeWCWithInvalidate is the kernel's IB_WC_WITH_INVALIDATE, which rxe
// copies into user space's wc_flags unchanged.
const rxeWCWithInvalidate = 1 << 2

// VerbsCases are the verbs stage's cases (issue 18: memory windows bound
// on rxe and used by goroce, goroce's used by rxe, SEND with Invalidate
// both ways, a local invalidation followed by an access that fails, a
// region over a file mapping), and with pair the pair cases.
func VerbsCases(pair bool) []VerbsCase {
	cs := apiCases()
	if pair {
		cs = append(cs, pairCases()...)
	}
	return cs
}

// apiCases are the cases with goroce's Go API on the host's end.
func apiCases() []VerbsCase {
	const off, n = 4096, 8192
	return []VerbsCase{
		{Name: "verbs/mw-type1@rxe", Rule: "a type 1 window bound by ibv_bind_mw on rxe carries goroce's WRITE and READ into its range; bound again with length 0, its key gets a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				b, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "bind1", "off": off, "len": n, "access": int(winRW)})
				if err != nil {
					return err
				}
				if err := v.write(ctx, b.RKey, b.Addr, n, 3, transport.Success); err != nil {
					return err
				}
				if err := v.rxeMem(ctx, off, n, 3); err != nil {
					return err
				}
				if err := v.read(ctx, b.RKey, b.Addr, n, 3); err != nil {
					return err
				}
				if _, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "bind1", "off": 0, "len": 0, "access": 0}); err != nil {
					return err
				}
				return v.write(ctx, b.RKey, b.Addr, 64, 4, transport.RemAccessErr)
			}},
		{Name: "verbs/mw-type2-local-inv@rxe", Rule: "a type 2 window bound by a BIND_MW work request on rxe carries goroce's WRITE and READ; after rxe's LOCAL_INV its key gets a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				b, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "bind2", "off": off, "len": n, "access": int(winRW | transport.RemoteAtomic)})
				if err != nil {
					return err
				}
				if err := v.write(ctx, b.RKey, b.Addr, n, 5, transport.Success); err != nil {
					return err
				}
				if err := v.read(ctx, b.RKey, b.Addr, n, 5); err != nil {
					return err
				}
				if _, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "localinv", "rkey": b.RKey}); err != nil {
					return err
				}
				return v.write(ctx, b.RKey, b.Addr, 64, 6, transport.RemAccessErr)
			}},
		{Name: "verbs/mw-type2-send-inv@rxe", Rule: "goroce's SEND with Invalidate frees rxe's type 2 window: rxe's receive completes with IBV_WC_WITH_INV and the key, which then gets a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				b, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "bind2", "off": off, "len": n, "access": int(winRW)})
				if err != nil {
					return err
				}
				if _, err := v.call(ctx, map[string]any{"op": "recv"}); err != nil {
					return err
				}
				if err := v.write(ctx, b.RKey, b.Addr, n, 7, transport.Success); err != nil {
					return err
				}
				copy(v.local.Bytes(), pattern(8, 1))
				if _, err := v.post(ctx, transport.SendWR{Opcode: transport.WRSendWithInv, SGL: []transport.SGE{v.local.SGE(0, 8)}, InvRKey: b.RKey}, transport.Success); err != nil {
					return err
				}
				r, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "pollrecv"})
				if err != nil {
					return err
				}
				// rxe reports the invalidation with the kernel's
				// IB_WC_WITH_INVALIDATE bit (1 << 2), which libibverbs
				// calls IBV_WC_IP_CSUM_OK, not IBV_WC_WITH_INV (1 << 3):
				// README, "Where goroce departs from rxe".
				if !r.WithInv && r.WCFlags&rxeWCWithInvalidate == 0 || r.InvRKey != b.RKey {
					return fmt.Errorf("rxe's receive: wc_flags 0x%x rkey 0x%x, want the invalidation of the window's 0x%x", r.WCFlags, r.InvRKey, b.RKey)
				}
				if !r.WithInv {
					v.logf("rxe flagged the invalidation with the kernel's IB_WC_WITH_INVALIDATE bit (wc_flags 0x%x), which libibverbs reads as IBV_WC_IP_CSUM_OK", r.WCFlags)
				}
				return v.write(ctx, b.RKey, b.Addr, 64, 8, transport.RemAccessErr)
			}},
		{Name: "verbs/mw-type1@goroce", Rule: "a type 1 window bound by goroce's QP.BindMW carries rxe's WRITE and READ; unbound (length 0), its key gets rxe a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				w, err := v.pd.AllocMW(transport.MWType1)
				if err != nil {
					return err
				}
				info := transport.BindInfo{MR: v.target, Addr: v.target.Addr() + off, Length: n, Access: winRW}
				key, err := v.bind1(ctx, w, info)
				if err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "write", key, info.Addr, n, 9, transport.Success); err != nil {
					return err
				}
				if !bytes.Equal(v.target.Bytes()[off:off+n], pattern(n, 9)) {
					return errors.New("goroce's region: not the bytes rxe wrote through the window")
				}
				if err := v.rxeRDMA(ctx, "read", key, info.Addr, n, 9, transport.Success); err != nil {
					return err
				}
				if _, err := v.bind1(ctx, w, transport.BindInfo{}); err != nil {
					return err
				}
				return v.rxeRDMA(ctx, "write", key, info.Addr, 64, 10, transport.RemAccessErr)
			}},
		{Name: "verbs/mw-type1-range@goroce", Rule: "an access one byte past goroce's window, inside its region, gets rxe a remote access error: the window's range bounds the access, not the region's",
			run: func(ctx context.Context, v *verbsConn) error {
				w, err := v.pd.AllocMW(transport.MWType1)
				if err != nil {
					return err
				}
				info := transport.BindInfo{MR: v.target, Addr: v.target.Addr() + off, Length: n, Access: winRW}
				key, err := v.bind1(ctx, w, info)
				if err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "write", key, info.Addr+1, n, 11, transport.RemAccessErr); err != nil {
					return err
				}
				if !bytes.Equal(v.target.Bytes(), make([]byte, v.target.Len())) {
					return errors.New("the refused WRITE changed goroce's region")
				}
				return nil
			}},
		{Name: "verbs/mw-type2-local-inv@goroce", Rule: "a type 2 window bound by goroce's BIND_MW work request carries rxe's WRITE and READ; after goroce's LOCAL_INV its key gets rxe a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				w, key, info, err := v.bind2(ctx, off, n)
				if err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "write", key, info.Addr, n, 12, transport.Success); err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "read", key, info.Addr, n, 12, transport.Success); err != nil {
					return err
				}
				if _, err := v.post(ctx, transport.SendWR{Opcode: transport.WRLocalInv, InvRKey: key}, transport.Success); err != nil {
					return err
				}
				if _, ok := w.Bound(); ok {
					return errors.New("goroce's window still bound after LOCAL_INV")
				}
				return v.rxeRDMA(ctx, "write", key, info.Addr, 64, 13, transport.RemAccessErr)
			}},
		{Name: "verbs/file-mapping@goroce", Rule: "a goroce region over a file mapping (mr.MapFile, outside the Go heap) takes rxe's WRITE, which reaches the file, and serves rxe's READ",
			run: func(ctx context.Context, v *verbsConn) error {
				f, err := os.CreateTemp("", "goroce-verbs-*.dat")
				if err != nil {
					return err
				}
				defer os.Remove(f.Name())
				defer f.Close()
				if err := f.Truncate(64 << 10); err != nil {
					return err
				}
				m, err := transport.MapFile(f, 0, 64<<10, transport.MapOptions{})
				if err != nil {
					return err
				}
				defer m.Close()
				region, err := v.pd.Register(m.Bytes(), transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead)
				if err != nil {
					return err
				}
				defer region.Dereg()
				if err := v.rxeRDMA(ctx, "write", region.RKey(), region.Addr()+off, n, 16, transport.Success); err != nil {
					return err
				}
				if err := m.Sync(); err != nil {
					return err
				}
				got, err := os.ReadFile(f.Name())
				if err != nil {
					return err
				}
				if !bytes.Equal(got[off:off+n], pattern(n, 16)) || !bytes.Equal(got[:off], make([]byte, off)) {
					return errors.New("the file does not hold what rxe wrote, where it wrote it")
				}
				v.logf("the file holds rxe's %d bytes at %d", n, off)
				return v.rxeRDMA(ctx, "read", region.RKey(), region.Addr()+off, n, 16, transport.Success)
			}},
		{Name: "verbs/fast-reg@goroce", Rule: "goroce's fast registration (a REG_MR work request on a region allocated for it) maps 8 KiB of an allocation at a chosen address under a new key: rxe WRITEs and READs there; rxe's SEND with Invalidate frees it; registered again under the next key it serves rxe again, and the first key gets rxe a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				backing := make([]byte, 64<<10)
				f, err := v.pd.AllocFastMR(backing)
				if err != nil {
					return err
				}
				defer f.Dereg()
				const iova = 0x5000_0000
				reg := func() (uint32, error) {
					key := transport.IncRKey(f.RKey())
					_, err := v.post(ctx, transport.SendWR{Opcode: transport.WRRegMR, Reg: transport.RegMR{MR: f, Info: transport.RegInfo{Key: key,
						Offset: off, Length: n, IOVA: iova, Access: transport.LocalWrite | winRW}}}, transport.Success)
					return key, err
				}
				k1, err := reg()
				if err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "write", k1, iova, n, 17, transport.Success); err != nil {
					return err
				}
				if !bytes.Equal(backing[off:off+n], pattern(n, 17)) {
					return errors.New("goroce's allocation: not the bytes rxe wrote at the registered range")
				}
				if err := v.rxeRDMA(ctx, "read", k1, iova, n, 17, transport.Success); err != nil {
					return err
				}
				if err := v.rxeSendInv(ctx, k1); err != nil {
					return err
				}
				k2, err := reg()
				if err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "write", k2, iova, 64, 18, transport.Success); err != nil {
					return err
				}
				return v.rxeRDMA(ctx, "write", k1, iova, 64, 19, transport.RemAccessErr)
			}},
		{Name: "verbs/mw-type2-send-inv@goroce", Rule: "rxe's SEND with Invalidate frees goroce's type 2 window: goroce's receive completes WithInv with the key, which then gets rxe a remote access error",
			run: func(ctx context.Context, v *verbsConn) error {
				w, key, info, err := v.bind2(ctx, off, n)
				if err != nil {
					return err
				}
				if err := v.rxeRDMA(ctx, "write", key, info.Addr, n, 14, transport.Success); err != nil {
					return err
				}
				if err := v.rxeSendInv(ctx, key); err != nil {
					return err
				}
				if _, ok := w.Bound(); ok {
					return errors.New("goroce's window still bound after the SEND with Invalidate")
				}
				return v.rxeRDMA(ctx, "write", key, info.Addr, 64, 15, transport.RemAccessErr)
			}},
	}
}

// pairCases are the cases with pyverbs on both ends (issue 17: a Python
// program on libgoroce.so against rxe).
func pairCases() []VerbsCase {
	return []VerbsCase{
		{Name: "verbs/pyverbs-exchange@libgoroce", Pair: true,
			Rule: "pyverbs over libgoroce.so opens goroce0, creates a PD, regions, a CQ and an RC QP, and runs a SEND/WRITE/READ/atomic exchange with pyverbs on rxe, each way, every byte and every returned value checked",
			run: func(ctx context.Context, v *verbsConn) error {
				sides := []struct {
					from, to *verbsServer
					target   remoteRegion
					seed     byte
				}{{v.host, v.guest, v.peer, 21}, {v.guest, v.host, v.hostTarget, 41}}
				for _, sd := range sides {
					if err := pyverbsExchange(ctx, sd.from, sd.to, sd.target, sd.seed); err != nil {
						return err
					}
				}
				return nil
			}},
		{Name: "verbs/pyverbs-mw@libgoroce", Pair: true,
			Rule: "pyverbs over libgoroce.so binds a type 1 window (ibv_bind_mw) and a type 2 window (IBV_WR_BIND_MW) that rxe's pyverbs WRITEs and READs through; after libgoroce's LOCAL_INV rxe's WRITE gets a remote access error",
			run:  func(ctx context.Context, v *verbsConn) error { return pyverbsWindows(ctx, v.host, v.guest) }},
		{Name: "verbs/pyverbs-mw@rxe", Pair: true,
			Rule: "rxe's windows, bound by its pyverbs, carry the WRITEs and READs of pyverbs over libgoroce.so; after rxe's LOCAL_INV libgoroce's WRITE gets a remote access error",
			run:  func(ctx context.Context, v *verbsConn) error { return pyverbsWindows(ctx, v.guest, v.host) }},
	}
}

// pyverbsWindows has owner bind a type 1 window (ibv_bind_mw) and then a
// type 2 one (a BIND_MW work request) onto its target region, has user
// WRITE and READ through each, invalidates the type 2 one with LOCAL_INV,
// and checks that user's next WRITE gets a remote access error.
func pyverbsWindows(ctx context.Context, owner, user *verbsServer) error {
	const off, n = 4096, 8192
	bytesOf := func(r *guestReply) []byte {
		b, _ := hex.DecodeString(r.Data)
		return b
	}
	for i, op := range []string{"bind1", "bind2"} {
		seed := byte(31 + i)
		b, err := owner.status(ctx, transport.Success, map[string]any{"op": op, "off": off, "len": n, "access": int(winRW)})
		if err != nil {
			return err
		}
		if _, err := user.status(ctx, transport.Success, map[string]any{"op": "write", "rkey": b.RKey, "addr": b.Addr, "len": n, "seed": seed}); err != nil {
			return err
		}
		r, err := owner.call(ctx, map[string]any{"op": "mem", "off": off, "len": n})
		if err != nil {
			return err
		}
		if !bytes.Equal(bytesOf(r), pattern(n, seed)) {
			return fmt.Errorf("%s's region does not hold %s's WRITE through the %s window", owner.name, user.name, op)
		}
		if r, err = user.status(ctx, transport.Success, map[string]any{"op": "read", "rkey": b.RKey, "addr": b.Addr, "len": n}); err != nil {
			return err
		}
		if !bytes.Equal(bytesOf(r), pattern(n, seed)) {
			return fmt.Errorf("%s's READ through %s's %s window returned other bytes", user.name, owner.name, op)
		}
		if op == "bind2" {
			if _, err := owner.status(ctx, transport.Success, map[string]any{"op": "localinv", "rkey": b.RKey}); err != nil {
				return err
			}
			_, err := user.status(ctx, transport.RemAccessErr, map[string]any{"op": "write", "rkey": b.RKey, "addr": b.Addr, "len": 64, "seed": 1})
			return err
		}
	}
	return nil
}

// pyverbsExchange runs from's SEND, WRITE, READ, fetch-and-add and
// compare-and-swap against to, whose target region is target.
func pyverbsExchange(ctx context.Context, from, to *verbsServer, target remoteRegion, seed byte) error {
	const n = 8192
	bytesOf := func(r *guestReply) []byte {
		b, _ := hex.DecodeString(r.Data)
		return b
	}
	// SEND of 3000 bytes (three packets at MTU 1024) into a posted receive.
	if _, err := to.call(ctx, map[string]any{"op": "recv", "len": 4096}); err != nil {
		return err
	}
	if _, err := from.status(ctx, transport.Success, map[string]any{"op": "send", "len": 3000, "seed": seed}); err != nil {
		return err
	}
	r, err := to.status(ctx, transport.Success, map[string]any{"op": "pollrecv"})
	if err != nil {
		return err
	}
	if r.ByteLen != 3000 || !bytes.Equal(bytesOf(r), pattern(3000, seed)) {
		return fmt.Errorf("%s received %d bytes, not %s's 3000-byte SEND", to.name, r.ByteLen, from.name)
	}
	// WRITE into the target, checked there; READ it back, checked here.
	if _, err := from.status(ctx, transport.Success, map[string]any{"op": "write", "rkey": target.RKey, "addr": target.Addr, "len": n, "seed": seed + 1}); err != nil {
		return err
	}
	if r, err = to.call(ctx, map[string]any{"op": "mem", "off": 0, "len": n}); err != nil {
		return err
	}
	if !bytes.Equal(bytesOf(r), pattern(n, seed+1)) {
		return fmt.Errorf("%s's region does not hold %s's WRITE", to.name, from.name)
	}
	if r, err = from.status(ctx, transport.Success, map[string]any{"op": "read", "rkey": target.RKey, "addr": target.Addr, "len": n}); err != nil {
		return err
	}
	if !bytes.Equal(bytesOf(r), pattern(n, seed+1)) {
		return fmt.Errorf("%s's READ of %s's region returned other bytes", from.name, to.name)
	}
	// Atomics on a word whose value the pattern gives: fetch-and-add,
	// then a compare-and-swap that matches, then one that does not.
	const off = 16384
	if _, err := to.call(ctx, map[string]any{"op": "fill", "off": off, "len": 8, "seed": seed + 2}); err != nil {
		return err
	}
	orig := binary.LittleEndian.Uint64(pattern(8, seed+2))
	steps := []struct {
		req  map[string]any
		orig uint64
	}{
		{map[string]any{"kind": "fadd", "add": 5}, orig},
		{map[string]any{"kind": "cswap", "compare": orig + 5, "swap": 0xfeedf00d}, orig + 5},
		{map[string]any{"kind": "cswap", "compare": 1, "swap": 2}, 0xfeedf00d},
	}
	for _, st := range steps {
		st.req["op"], st.req["rkey"], st.req["addr"] = "atomic", target.RKey, target.Addr+off
		r, err := from.status(ctx, transport.Success, st.req)
		if err != nil {
			return err
		}
		if r.Orig != st.orig {
			return fmt.Errorf("%s's %s returned 0x%x, want 0x%x", from.name, st.req["kind"], r.Orig, st.orig)
		}
	}
	if r, err = to.call(ctx, map[string]any{"op": "mem", "off": off, "len": 8}); err != nil {
		return err
	}
	if b := bytesOf(r); len(b) != 8 || binary.LittleEndian.Uint64(b) != 0xfeedf00d {
		return fmt.Errorf("%s's word after the atomics: %x, want 0xfeedf00d", to.name, b)
	}
	return nil
}

// rxeSendInv has rxe SEND with Invalidate of rkey into a receive goroce
// posts, whose completion must carry WithInv and rkey.
func (v *verbsConn) rxeSendInv(ctx context.Context, rkey uint32) error {
	v.wr++
	id := v.wr
	if err := v.qp.PostRecv(&transport.RecvWR{WRID: id, SGL: []transport.SGE{v.local.SGE(v.local.Len()-64, 64)}}); err != nil {
		return err
	}
	if _, err := v.rxeStatus(ctx, transport.Success, map[string]any{"op": "sendinv", "rkey": rkey}); err != nil {
		return err
	}
	wc, err := v.waitSend(ctx, id, "receive", transport.Success)
	if err != nil {
		return err
	}
	if wc.Flags&transport.WithInv == 0 || wc.InvalidatedRKey != rkey {
		return fmt.Errorf("goroce's receive: flags %v rkey 0x%x, want WithInv and 0x%x", wc.Flags, wc.InvalidatedRKey, rkey)
	}
	return nil
}

// bind1 binds goroce's type 1 window and waits for the bind.
func (v *verbsConn) bind1(ctx context.Context, w *transport.MW, info transport.BindInfo) (uint32, error) {
	v.wr++
	key, err := v.qp.BindMW(w, info, v.wr, transport.Signaled)
	if err != nil {
		return 0, err
	}
	_, err = v.waitSend(ctx, v.wr, "bind_mw", transport.Success)
	return key, err
}

// bind2 allocates and binds a type 2 window of n bytes at off of goroce's
// target region, with read and write rights.
func (v *verbsConn) bind2(ctx context.Context, off, n int) (*transport.MW, uint32, transport.BindInfo, error) {
	w, err := v.pd.AllocMW(transport.MWType2)
	if err != nil {
		return nil, 0, transport.BindInfo{}, err
	}
	info := transport.BindInfo{MR: v.target, Addr: v.target.Addr() + uint64(off), Length: uint64(n), Access: winRW}
	key := transport.IncRKey(w.RKey())
	_, err = v.post(ctx, transport.SendWR{Opcode: transport.WRBindMW, Bind: transport.MWBindWR{MW: w, RKey: key, Info: info}}, transport.Success)
	return w, key, info, err
}

// VerbsOptions tunes RunVerbs.
type VerbsOptions struct {
	Run      *regexp.Regexp // only cases whose name matches
	Progress io.Writer      // a line per case as it ends
	// Libgoroce, if set, is libgoroce.so: the pair cases then run pyverbs
	// on the host over it (Debian's python3-pyverbs, /usr/bin/python3).
	Libgoroce string
}

// RunVerbs runs the verbs stage against the lab's guest: it starts the
// guest's verbs server, opens goroce on the tap's host address, and runs
// each case on a connection of its own.
func RunVerbs(ctx context.Context, l *Lab, o VerbsOptions) *Report {
	rep := &Report{Peer: "lab-pyverbs-" + l.Suite, Started: time.Now(), Info: l.Info(ctx)}
	cases := VerbsCases(o.Libgoroce != "")
	failAll := func(err error) *Report {
		for _, c := range cases {
			if o.Run == nil || o.Run.MatchString(c.Name) {
				rep.add(Result{Case: c.Name, Tool: "pyverbs", Transport: "RC", Direction: "both", Result: NotRun, Reasons: []string{err.Error()}})
			}
		}
		rep.Seconds = time.Since(rep.Started).Seconds()
		return rep
	}
	if err := l.startGuestVerbs(ctx); err != nil {
		return failAll(err)
	}
	// goroce's own device for the API cases, opened at the first and
	// closed before the pair cases: libgoroce.so then binds the same
	// address's port 4791.
	var dev *transport.Device
	defer func() {
		if dev != nil {
			dev.Close()
		}
	}()
	var hostVerbs string // the host's verbs server, once started
	for _, c := range cases {
		if o.Run != nil && !o.Run.MatchString(c.Name) {
			continue
		}
		t := time.Now()
		var v *verbsConn
		var err error
		switch {
		case c.Pair && hostVerbs == "":
			if dev != nil {
				dev.Close()
				dev = nil
			}
			var stop func()
			hostVerbs, stop, err = l.startHostVerbs(ctx, o.Libgoroce)
			if stop != nil {
				defer stop()
			}
		case !c.Pair && dev == nil:
			dev, err = l.openGoroce()
		}
		if err == nil {
			if c.Pair {
				v, err = l.pairConnect(ctx, hostVerbs)
			} else {
				v, err = l.verbsConnect(ctx, dev)
			}
		}
		if err == nil {
			err = c.run(ctx, v)
		}
		res := Result{Case: c.Name, Tool: "pyverbs", Transport: "RC", Direction: "both", Result: Pass, Notes: []string{c.Rule}}
		if v != nil {
			res.Notes = append(res.Notes, v.log...)
			v.close(ctx)
		}
		if err != nil {
			res.Result, res.Reasons = Fail, []string{err.Error()}
		}
		res.Seconds = time.Since(t).Seconds()
		rep.add(res)
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, progressLine(res))
		}
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep
}

// openGoroce opens goroce on the UDP link at the tap's host address.
func (l *Lab) openGoroce() (*transport.Device, error) {
	var dev *transport.Device
	err := l.inNetNS(func() error {
		link, err := udp.Open(udp.Config{Addr: netip.MustParseAddr(l.HostAddr)})
		if err != nil {
			return err
		}
		dev, err = transport.Open(link, transport.Options{})
		if err != nil {
			link.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("goroce on %s: %w", l.HostAddr, err)
	}
	return dev, nil
}

// startGuestVerbs starts the guest's verbs server (stopping a previous
// run's) and waits until it listens.
func (l *Lab) startGuestVerbs(ctx context.Context) error {
	const a = "/tmp/goroce-verbs"
	script := fmt.Sprintf(`a=%[1]s; [ -f $a.pid ] && kill $(cat $a.pid) 2>/dev/null; cat >$a.py <<'GOROCE_VERBS_EOF'
%[2]s
GOROCE_VERBS_EOF
python3 $a.py %[3]s %[4]d >$a.log 2>&1 </dev/null & p=$!; echo $p >$a.pid
for i in $(seq 400); do grep -q '^listening' $a.log && break; kill -0 $p 2>/dev/null || break; sleep 0.05; done
grep -q '^listening' $a.log || { cat $a.log >&2; exit 1; }
`, a, guestVerbsPy, l.GuestAddr, guestVerbsPort)
	if out, err := l.run(ctx, "exec", script); err != nil {
		return fmt.Errorf("the guest's verbs server: %v: %s", err, out)
	}
	return nil
}

// dialVerbs connects to a verbs server in the tap's namespace.
func (l *Lab) dialVerbs(ctx context.Context, name, addr string, log *[]string) (*verbsServer, error) {
	var conn net.Conn
	err := l.inNetNS(func() (err error) {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		conn, err = d.DialContext(dctx, "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the %s verbs server at %s: %w", name, addr, err)
	}
	return &verbsServer{name: name, conn: conn, r: bufio.NewReader(conn), log: log}, nil
}

// hostVerbsPort is the host's verbs server's TCP port, on the tap's host
// address.
const hostVerbsPort = 17997

// startHostVerbs starts the verbs server on the host, in the tap's
// namespace, with pyverbs over lib (LD_PRELOAD, GOROCE_NETDEV the tap:
// device goroce0, GID index 1 the IPv4 one), and returns its address once
// it listens, and how to stop it.
func (l *Lab) startHostVerbs(ctx context.Context, lib string) (string, func(), error) {
	f, err := os.CreateTemp("", "goroce-verbs-*.py")
	if err != nil {
		return "", nil, err
	}
	script := f.Name()
	_, err = f.WriteString(guestVerbsPy)
	f.Close()
	if err != nil {
		os.Remove(script)
		return "", nil, err
	}
	argv := []string{"env", "LD_PRELOAD=" + lib, "GOROCE_NETDEV=" + l.Tap,
		"/usr/bin/python3", script, "goroce0", "1", l.HostAddr, strconv.Itoa(hostVerbsPort)}
	if l.NetNS != "" {
		argv = inNetNS(l.NetNS, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.Remove(script)
		return "", nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		os.Remove(script)
		return "", nil, fmt.Errorf("the host's verbs server: %w", err)
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(script)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "listening") {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
		io.Copy(io.Discard, out)
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = errors.New("not listening after 30 s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the host's verbs server (pyverbs over %s): %v: %s", lib, err, strings.TrimSpace(stderr.String()))
	}
	return net.JoinHostPort(l.HostAddr, strconv.Itoa(hostVerbsPort)), stop, nil
}

// verbsConnect opens a case's connection: a goroce RC QP and rxe's,
// connected to each other through the verbs server.
func (l *Lab) verbsConnect(ctx context.Context, dev *transport.Device) (*verbsConn, error) {
	v := &verbsConn{dev: dev}
	var err error
	if v.guest, err = l.dialVerbs(ctx, "rxe", net.JoinHostPort(l.GuestAddr, strconv.Itoa(guestVerbsPort)), &v.log); err != nil {
		return nil, err
	}
	v.pd = dev.AllocPD()
	v.cq = dev.CreateCQ(64)
	if v.target, err = v.pd.Register(make([]byte, 64<<10), transport.LocalWrite|transport.MWBind); err != nil {
		return v, err
	}
	if v.local, err = v.pd.Register(make([]byte, 64<<10), transport.LocalWrite); err != nil {
		return v, err
	}
	v.qp, err = dev.CreateQP(v.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: v.cq, RecvCQ: v.cq,
		Cap: transport.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return v, err
	}
	local, err := dev.LocalEndpoint(v.qp)
	if err != nil {
		return v, err
	}
	r, err := v.call(ctx, map[string]any{"op": "create"})
	if err != nil {
		return v, err
	}
	v.peer.Addr, v.peer.RKey, v.peer.Len = r.Addr, r.RKey, r.Len
	gid, err := netip.ParseAddr(r.GID)
	if err != nil {
		return v, fmt.Errorf("rxe's GID %q: %w", r.GID, err)
	}
	remote := transport.Endpoint{QPN: r.QPN, PSN: r.PSN, GID: bth.GIDFromAddr(gid), MTU: transport.MTU1024}
	if err := dev.Connect(v.qp, local, remote, transport.ConnectOptions{Access: winRW | transport.RemoteAtomic, MaxRdAtomic: 4, MaxDestRdAtomic: 4}); err != nil {
		return v, err
	}
	_, err = v.call(ctx, map[string]any{"op": "connect", "qpn": local.QPN, "psn": local.PSN, "gid": local.GID.String()})
	return v, err
}

// pairConnect opens a pair case's connection: the host's verbs server
// (pyverbs over libgoroce.so) and the guest's (pyverbs on rxe) each
// create a QP and connect it to the other's.
func (l *Lab) pairConnect(ctx context.Context, hostAddr string) (*verbsConn, error) {
	v := &verbsConn{}
	var err error
	if v.guest, err = l.dialVerbs(ctx, "rxe", net.JoinHostPort(l.GuestAddr, strconv.Itoa(guestVerbsPort)), &v.log); err != nil {
		return nil, err
	}
	if v.host, err = l.dialVerbs(ctx, "libgoroce", hostAddr, &v.log); err != nil {
		return v, err
	}
	h, err := v.host.call(ctx, map[string]any{"op": "create"})
	if err != nil {
		return v, err
	}
	g, err := v.guest.call(ctx, map[string]any{"op": "create"})
	if err != nil {
		return v, err
	}
	if _, err := v.host.call(ctx, map[string]any{"op": "connect", "qpn": g.QPN, "psn": g.PSN, "gid": g.GID}); err != nil {
		return v, err
	}
	_, err = v.guest.call(ctx, map[string]any{"op": "connect", "qpn": h.QPN, "psn": h.PSN, "gid": h.GID})
	v.peer.Addr, v.peer.RKey = g.Addr, g.RKey
	v.hostTarget.Addr, v.hostTarget.RKey = h.Addr, h.RKey
	return v, err
}

// close ends the case's connection on both sides.
func (v *verbsConn) close(ctx context.Context) {
	for _, s := range []*verbsServer{v.guest, v.host} {
		if s != nil {
			s.call(ctx, map[string]any{"op": "bye"})
			s.conn.Close()
		}
	}
	if v.qp != nil {
		v.dev.DestroyQP(v.qp)
	}
}
