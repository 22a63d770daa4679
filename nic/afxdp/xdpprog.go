package afxdp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// The XDP program of the AF_XDP link, written with cilium/ebpf's assembler
// (no C compiler needed at build or run time). It redirects RoCEv2 frames
// (IPv4 without options or fragments, or IPv6 without extension headers;
// UDP destination port 4791; optionally behind one 802.1Q tag) to the
// AF_XDP socket of the queue they arrived on, through an XSKMAP, and
// passes everything else to the kernel stack (ARP, neighbour discovery,
// the host's own traffic). When the queue has no socket, bpf_redirect_map
// returns its flags argument, XDP_PASS.
//
// It is loaded with BPF_F_XDP_HAS_FRAGS (the "xdp.frags" section of C
// programs): it then also sees multi-buffer frames, which native XDP on a
// veth needs above about 3400 bytes of MTU, and a 4154-byte RoCEv2 frame
// with a 4 KiB payload is one. The program reads only the headers, which
// are in the first buffer, between data and data_end.

// xdp_md field offsets.
const (
	xdpMDData     = 0
	xdpMDDataEnd  = 4
	xdpMDRxQueue  = 16
	xdpPass       = 2
	roceBE16      = 0xb712 // 4791 as the bytes 12 b7, loaded little-endian
	etherIPv4LE   = 0x0008 // 08 00
	etherIPv6LE   = 0xdd86 // 86 dd
	etherVLANLE   = 0x0081 // 81 00
	ipv4FragMaskL = 0xff3f // MF and fragment offset, bytes 6-7 little-endian
)

func roceXDPInstructions(xsks *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // ctx
		asm.LoadMem(asm.R2, asm.R6, xdpMDData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, xdpMDDataEnd, asm.Word),
		// Ethernet header in bounds?
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, etherVLANLE, "ethertype"),
		// One VLAN tag left in the data: step over it.
		asm.Add.Imm(asm.R2, 4),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JEq.Imm(asm.R5, etherIPv4LE, "ipv4").WithSymbol("ethertype"),
		asm.JEq.Imm(asm.R5, etherIPv6LE, "ipv6"),
		asm.Ja.Label("pass"),

		asm.Mov.Reg(asm.R4, asm.R2).WithSymbol("ipv4"),
		asm.Add.Imm(asm.R4, 14+20+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte),
		asm.JNE.Imm(asm.R5, unix.IPPROTO_UDP, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+6, asm.Half),
		asm.JSet.Imm(asm.R5, ipv4FragMaskL, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+20+2, asm.Half),
		asm.JEq.Imm(asm.R5, roceBE16, "redirect"),
		asm.Ja.Label("pass"),

		asm.Mov.Reg(asm.R4, asm.R2).WithSymbol("ipv6"),
		asm.Add.Imm(asm.R4, 14+40+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+6, asm.Byte),
		asm.JNE.Imm(asm.R5, unix.IPPROTO_UDP, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+40+2, asm.Half),
		asm.JNE.Imm(asm.R5, roceBE16, "pass"),

		asm.LoadMem(asm.R2, asm.R6, xdpMDRxQueue, asm.Word).WithSymbol("redirect"),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// loadRoCEXDP creates the XSKMAP (one entry per queue) and loads the
// program, frags-aware when the kernel allows it (6.0+).
func loadRoCEXDP(queues int) (*ebpf.Map, *ebpf.Program, bool, error) {
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "roce_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)})
	if err != nil {
		return nil, nil, false, bpfErr("creating the XSKMAP", err)
	}
	spec := &ebpf.ProgramSpec{Name: "roce_xdp", Type: ebpf.XDP, License: "MIT", Instructions: roceXDPInstructions(xsks), Flags: unix.BPF_F_XDP_HAS_FRAGS}
	prog, err := ebpf.NewProgram(spec)
	frags := err == nil
	if err != nil && !errors.Is(err, unix.EPERM) {
		spec.Flags = 0
		prog, err = ebpf.NewProgram(spec)
	}
	if err != nil {
		xsks.Close()
		return nil, nil, false, bpfErr("loading the XDP program", err)
	}
	return xsks, prog, frags, nil
}

// bpfErr names the capability that is usually missing.
func bpfErr(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("nic: afxdp: %s needs CAP_BPF and CAP_NET_ADMIN (or root): %w", what, err)
	}
	return fmt.Errorf("nic: afxdp: %s: %w", what, err)
}
