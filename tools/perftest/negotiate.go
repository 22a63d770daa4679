package perftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// NegotiateSize is struct perftest_parameters_negotiate as x86-64 builds
// with mlx5dv support (every distribution build) lay it out: 80 bytes of
// parameters, a 232-byte struct ibv_device_attr and the mlx5dv comp mask.
const NegotiateSize = 320

// Enumerations as perftest >= 6.28 numbers them on the wire.
const (
	RunRegular    = 0 // test_method
	RunAll        = 1
	RunInfinitely = 2

	ConnRC  = 0 // connection_type
	ConnUC  = 1
	ConnUD  = 2
	ConnRaw = 3
	ConnXRC = 4
	ConnDC  = 5
	ConnSRD = 6

	VerbSend     = 0 // verb
	VerbSendImm  = 1
	VerbWrite    = 2
	VerbWriteImm = 3
	VerbRead     = 4
	VerbAtomic   = 5

	TstLat     = 0 // tst
	TstBW      = 1
	TstLatByBW = 2
	TstFSRate  = 3

	CmpAndSwap  = 0 // atomicType
	FetchAndAdd = 1

	Iterations = 0 // test_type
	Duration   = 1

	ReportGbits = 0 // report_fmt
	ReportMiB   = 1
)

// Params is the parameter half of the negotiation struct. The peer compares
// each of them with its own and gives up on the first difference.
type Params struct {
	// The C fields test_method, connection_type, verb, tst, atomicType,
	// test_type and report_fmt, with the enumerations above.
	TestMethod, ConnectionType, Verb, Tst, AtomicType, TestType, ReportFmt int32
	// size (-s) and iters (-n).
	Size, Iters uint64
	// aes_xts, num_of_qps (-q), duration (-D), use_rdma_cm (-R) and
	// use_write_with_imm, 0 or the value.
	AESXTS, NumQPs, Duration, UseRDMACM, UseWriteWithImm int32
	// no_enhanced_reorder, sig_offload and data_validation: 0 or 1.
	NoEnhancedReorder, SigOffload, DataValidation int32

	// Attr is the sender's ibv_query_device() result. Only MaxQPRdAtom
	// matters to the peer: it lowers its outstanding reads to it.
	Attr DeviceAttr
	// MLX5DVCompMask is 0 unless the device is a Mellanox one.
	MLX5DVCompMask uint64
}

// DeviceAttr is struct ibv_device_attr. It travels in the sender's host
// byte order, which for every lab peer is little-endian x86-64.
type DeviceAttr struct {
	FWVer                            [64]byte // fw_ver, NUL-terminated
	NodeGUID, SysImageGUID           [8]byte  // already big-endian
	MaxMRSize, PageSizeCap           uint64   // max_mr_size, page_size_cap
	VendorID, VendorPartID, HWVer    uint32   // vendor_id, vendor_part_id, hw_ver
	MaxQP, MaxQPWR                   int32    // max_qp, max_qp_wr
	DeviceCapFlags                   uint32   // device_cap_flags
	MaxSGE, MaxSGERd, MaxCQ, MaxCQE  int32    // max_sge, max_sge_rd, max_cq, max_cqe
	MaxMR, MaxPD, MaxQPRdAtom        int32    // max_mr, max_pd, max_qp_rd_atom
	MaxEERdAtom, MaxResRdAtom        int32    // max_ee_rd_atom, max_res_rd_atom
	MaxQPInitRdAtom, MaxEEInitRdAtom int32    // max_qp_init_rd_atom, max_ee_init_rd_atom
	AtomicCap, MaxEE, MaxRDD, MaxMW  int32    // atomic_cap, max_ee, max_rdd, max_mw
	MaxRawIPv6QP, MaxRawEthyQP       int32    // max_raw_ipv6_qp, max_raw_ethy_qp
	MaxMcastGrp, MaxMcastQPAttach    int32    // max_mcast_grp, max_mcast_qp_attach
	MaxTotalMcastQPAttach, MaxAH     int32    // max_total_mcast_qp_attach, max_ah
	MaxFMR, MaxMapPerFMR             int32    // max_fmr, max_map_per_fmr
	MaxSRQ, MaxSRQWR, MaxSRQSGE      int32    // max_srq, max_srq_wr, max_srq_sge
	MaxPkeys                         uint16   // max_pkeys
	LocalCAAckDelay, PhysPortCnt     uint8    // local_ca_ack_delay, phys_port_cnt
	_                                [4]byte  // tail padding of the C struct
}

// Marshal lays the struct out as the C compiler does.
func (p Params) Marshal() []byte {
	var b bytes.Buffer
	be := func(v any) { _ = binary.Write(&b, binary.BigEndian, v) }
	be([]int32{p.TestMethod, p.ConnectionType, p.Verb, p.Tst, p.AtomicType, p.TestType, p.ReportFmt, 0})
	be([]uint64{p.Size, p.Iters})
	be([]int32{p.AESXTS, p.NumQPs, p.Duration, p.UseRDMACM, p.UseWriteWithImm, p.NoEnhancedReorder, p.SigOffload, p.DataValidation})
	_ = binary.Write(&b, binary.LittleEndian, p.Attr)
	be(p.MLX5DVCompMask)
	return b.Bytes()
}

// ParseParams reads a peer's negotiation struct.
func ParseParams(raw []byte) (Params, error) {
	var p Params
	if len(raw) != NegotiateSize {
		return p, fmt.Errorf("perftest: negotiation struct is %d bytes, want %d", len(raw), NegotiateSize)
	}
	r := bytes.NewReader(raw)
	be := func(v any) { _ = binary.Read(r, binary.BigEndian, v) }
	var pad int32
	for _, f := range []*int32{&p.TestMethod, &p.ConnectionType, &p.Verb, &p.Tst, &p.AtomicType, &p.TestType, &p.ReportFmt, &pad} {
		be(f)
	}
	be(&p.Size)
	be(&p.Iters)
	for _, f := range []*int32{&p.AESXTS, &p.NumQPs, &p.Duration, &p.UseRDMACM, &p.UseWriteWithImm, &p.NoEnhancedReorder, &p.SigOffload, &p.DataValidation} {
		be(f)
	}
	_ = binary.Read(r, binary.LittleEndian, &p.Attr)
	be(&p.MLX5DVCompMask)
	return p, nil
}

// field is one compared parameter, in the order the tools compare them.
type field struct {
	name   string
	get    func(Params) uint64
	values []string // names the tool prints instead of numbers
	since  Version  // both sides must be at least this version
}

var offOn = []string{"OFF", "ON"}

var compared = []field{
	{"test_method", func(p Params) uint64 { return uint64(p.TestMethod) }, []string{"RUN_REGULAR", "RUN_ALL", "RUN_INFINITELY"}, V628},
	{"connection_type", func(p Params) uint64 { return uint64(p.ConnectionType) }, []string{"RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"}, V628},
	{"verb", func(p Params) uint64 { return uint64(p.Verb) }, []string{"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "ATOMIC"}, V628},
	{"tst", func(p Params) uint64 { return uint64(p.Tst) }, []string{"LAT", "BW", "LAT_BY_BW", "FS_RATE"}, V628},
	{"atomicType", func(p Params) uint64 { return uint64(p.AtomicType) }, []string{"CMP_AND_SWAP", "FETCH_AND_ADD"}, V628},
	{"test_type", func(p Params) uint64 { return uint64(p.TestType) }, []string{"ITERATIONS", "DURATION"}, V628},
	{"report_fmt", func(p Params) uint64 { return uint64(p.ReportFmt) }, []string{"GBS", "MBS"}, V628},
	{"size", func(p Params) uint64 { return p.Size }, nil, V628},
	{"iters", func(p Params) uint64 { return p.Iters }, nil, V628},
	{"aes_xts", func(p Params) uint64 { return uint64(p.AESXTS) }, offOn, V628},
	{"num_of_qps", func(p Params) uint64 { return uint64(p.NumQPs) }, nil, V628},
	{"duration", func(p Params) uint64 { return uint64(p.Duration) }, nil, V628},
	{"use_rdma_cm", func(p Params) uint64 { return uint64(p.UseRDMACM) }, offOn, V628},
	{"use_write_with_imm", func(p Params) uint64 { return uint64(p.UseWriteWithImm) }, offOn, V628},
	{"no_enhanced_reorder", func(p Params) uint64 { return uint64(p.NoEnhancedReorder) }, offOn, V628},
	{"sig_offload", func(p Params) uint64 { return uint64(p.SigOffload) }, offOn, V628},
	// 6.28 has padding at this offset.
	{"data_validation", func(p Params) uint64 { return uint64(p.DataValidation) }, offOn, V629},
}

// MismatchError is a parameter the two sides disagree on. Its message is
// the tool's (" size mismatch: local=128, remote=64"); the tool follows it
// with " Failed to negotiate parameters" and exits 1.
type MismatchError struct {
	Field         string // the C field's name ("size")
	Local, Remote string // each side's value, as the tool prints it
}

// Error returns the tool's message without its leading space.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s mismatch: local=%s, remote=%s", e.Field, e.Local, e.Remote)
}

// Lines is what the tool prints on stderr for this error.
func (e *MismatchError) Lines() []string {
	return []string{" " + e.Error(), " Failed to negotiate parameters"}
}

func show(v uint64, names []string) string {
	if names != nil && v < uint64(len(names)) {
		return names[v]
	}
	return fmt.Sprintf("%d", v)
}

// Compare checks the peer's parameters against ours as the tools do and
// returns the first mismatch as a *MismatchError. both is the older of the
// two versions, which decides the fields compared.
func Compare(local, remote Params, both Version) error {
	for _, f := range compared {
		if !both.atLeast(f.since.Float()) {
			continue
		}
		l, r := f.get(local), f.get(remote)
		if l != r {
			return &MismatchError{Field: f.name, Local: show(l, f.values), Remote: show(r, f.values)}
		}
	}
	return nil
}
