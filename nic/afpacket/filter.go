package afpacket

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// roceFilter returns a classic BPF program for an AF_PACKET socket that
// accepts only RoCEv2 frames for us: Ethernet (optionally one 802.1Q tag
// left in the data), IPv4 without options and not a fragment or IPv6
// without extension headers, UDP destination port 4791, destination
// address one of addrs. Everything else (ARP, the host's other traffic)
// never reaches the socket, which keeps the copy-to-user cost for RoCE.
func roceFilter(addrs []netip.Addr) ([]bpf.RawInstruction, error) {
	var p filterProg
	// X holds the offset of the IP header: 14, or 18 behind a VLAN tag.
	p.emit(bpf.LoadAbsolute{Off: 12, Size: 2})
	p.jumpIf(bpf.JumpEqual, unix.ETH_P_8021Q, "vlan", "")
	p.emit(bpf.LoadConstant{Dst: bpf.RegX, Val: 14})
	p.jump("ethertype")
	p.label("vlan")
	p.emit(bpf.LoadConstant{Dst: bpf.RegX, Val: 18})
	p.emit(bpf.LoadAbsolute{Off: 16, Size: 2})
	p.label("ethertype")
	p.jumpIf(bpf.JumpEqual, unix.ETH_P_IP, "ipv4", "")
	p.jumpIf(bpf.JumpEqual, unix.ETH_P_IPV6, "ipv6", "drop")

	p.label("ipv4")
	p.emit(bpf.LoadIndirect{Off: 0, Size: 1})
	p.jumpIf(bpf.JumpNotEqual, 0x45, "drop", "") // options: RoCEv2 has none
	p.emit(bpf.LoadIndirect{Off: 9, Size: 1})
	p.jumpIf(bpf.JumpNotEqual, unix.IPPROTO_UDP, "drop", "")
	p.emit(bpf.LoadIndirect{Off: 6, Size: 2})
	p.jumpIf(bpf.JumpBitsSet, 0x3fff, "drop", "") // MF or offset
	p.emit(bpf.LoadIndirect{Off: 20 + 2, Size: 2})
	p.jumpIf(bpf.JumpNotEqual, 4791, "drop", "")
	p.emit(bpf.LoadIndirect{Off: 16, Size: 4})
	for _, a := range addrs {
		if a.Unmap().Is4() {
			v := a.Unmap().As4()
			p.jumpIf(bpf.JumpEqual, binary.BigEndian.Uint32(v[:]), "accept", "")
		}
	}
	p.jump("drop")

	p.label("ipv6")
	p.emit(bpf.LoadIndirect{Off: 6, Size: 1})
	p.jumpIf(bpf.JumpNotEqual, unix.IPPROTO_UDP, "drop", "")
	p.emit(bpf.LoadIndirect{Off: 40 + 2, Size: 2})
	p.jumpIf(bpf.JumpNotEqual, 4791, "drop", "")
	for i, a := range addrs {
		if !a.Is6() || a.Is4In6() {
			continue
		}
		v := a.As16()
		next := fmt.Sprintf("v6next%d", i)
		for w := range 4 {
			p.emit(bpf.LoadIndirect{Off: uint32(24 + 4*w), Size: 4})
			p.jumpIf(bpf.JumpNotEqual, binary.BigEndian.Uint32(v[4*w:]), next, "")
		}
		p.jump("accept")
		p.label(next)
	}
	p.label("drop")
	p.emit(bpf.RetConstant{Val: 0})
	p.label("accept")
	p.emit(bpf.RetConstant{Val: 0x40000})
	return p.assemble()
}

// filterProg assembles classic BPF with named jump targets.
type filterProg struct {
	ins    []bpf.Instruction
	jumps  map[int][2]string // instruction index: true, false targets
	labels map[string]int
}

func (p *filterProg) emit(i bpf.Instruction) { p.ins = append(p.ins, i) }

func (p *filterProg) label(name string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[name] = len(p.ins)
}

// jumpIf jumps to t when the condition holds, else to f; "" falls through.
func (p *filterProg) jumpIf(c bpf.JumpTest, v uint32, t, f string) {
	if p.jumps == nil {
		p.jumps = map[int][2]string{}
	}
	p.jumps[len(p.ins)] = [2]string{t, f}
	p.emit(bpf.JumpIf{Cond: c, Val: v})
}

func (p *filterProg) jump(to string) {
	if p.jumps == nil {
		p.jumps = map[int][2]string{}
	}
	p.jumps[len(p.ins)] = [2]string{to, ""}
	p.emit(bpf.Jump{})
}

func (p *filterProg) assemble() ([]bpf.RawInstruction, error) {
	skip := func(pc int, name string) (uint32, error) {
		if name == "" {
			return 0, nil
		}
		to, ok := p.labels[name]
		if !ok || to <= pc || to-pc-1 > 255 {
			return 0, fmt.Errorf("nic: filter jump to %q out of range", name)
		}
		return uint32(to - pc - 1), nil
	}
	for pc, t := range p.jumps {
		st, err := skip(pc, t[0])
		if err != nil {
			return nil, err
		}
		sf, err := skip(pc, t[1])
		if err != nil {
			return nil, err
		}
		switch j := p.ins[pc].(type) {
		case bpf.JumpIf:
			j.SkipTrue, j.SkipFalse = uint8(st), uint8(sf)
			p.ins[pc] = j
		case bpf.Jump:
			p.ins[pc] = bpf.Jump{Skip: st}
		}
	}
	return bpf.Assemble(p.ins)
}

// attachFilter installs a classic BPF program on a socket.
func attachFilter(fd int, prog []bpf.RawInstruction) error {
	f := make([]unix.SockFilter, len(prog))
	for i, r := range prog {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
}
