package rocelayers

import (
	"errors"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
)

type capPkt struct {
	name string
	pkt  pcapfile.Packet
}

func capturePackets(t *testing.T) []capPkt {
	t.Helper()
	files, err := filepath.Glob("../testdata/captures*/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	var out []capPkt
	for _, fn := range files {
		pkts, err := pcapfile.ReadFile(fn)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pkts {
			out = append(out, capPkt{name: fn + " #" + strconv.Itoa(i+1), pkt: p})
		}
	}
	return out
}

// TestNewPacket: gopacket's own decoding of every capture yields a RoCEv2
// layer for every packet to port 4791, with the fields package bth
// decodes, a right ICRC and the payload as the next layer; the ASCII
// probes give a decode failure carrying the bth.Error.
func TestNewPacket(t *testing.T) {
	var roce, probes int
	for _, c := range capturePackets(t) {
		p := gopacket.NewPacket(c.pkt.Data, c.pkt.LinkType, gopacket.Default)
		u, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if u == nil || u.DstPort != bth.UDPPort {
			if p.Layer(LayerTypeRoCEv2) != nil {
				t.Errorf("%s: RoCEv2 layer in a packet not to port 4791", c.name)
			}
			continue
		}
		if strings.Contains(c.name, "host_probe") {
			probes++
			el := p.ErrorLayer()
			var be bth.Error
			if el == nil || !errors.As(el.Error(), &be) {
				t.Errorf("%s: ASCII probe: error layer %v", c.name, el)
			}
			continue
		}
		roce++
		r, ok := p.Layer(LayerTypeRoCEv2).(*RoCEv2)
		if !ok {
			t.Fatalf("%s: no RoCEv2 layer: %v", c.name, p)
		}
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%s: %v", c.name, el.Error())
		}
		if !VerifyICRC(p) {
			t.Errorf("%s: ICRC does not verify", c.name)
		}
		fr, err := bth.DecodeEthernet(c.pkt.Data)
		if err != nil {
			t.Fatal(err)
		}
		f, err := bth.DecodeFields(fr)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.Fields, f.RoCE) {
			t.Errorf("%s: layer fields\n%+v\nbth fields\n%+v", c.name, r.Fields, f.RoCE)
		}
		if len(r.Contents) != r.Packet.HdrLen() {
			t.Errorf("%s: contents %d bytes, header %d", c.name, len(r.Contents), r.Packet.HdrLen())
		}
		app := p.ApplicationLayer()
		if n := r.Packet.PayloadLen(); (n > 0) != (app != nil) || (app != nil && len(app.Payload()) != n) {
			t.Errorf("%s: payload %d bytes, application layer %v", c.name, n, app)
		}
		if p.Layers()[len(p.Layers())-1].LayerType() != r.NextLayerType() && r.NextLayerType() != gopacket.LayerTypeZero {
			t.Errorf("%s: last layer %v", c.name, p.Layers())
		}
	}
	if roce != 3111+3626 || probes != 2 {
		t.Errorf("%d RoCEv2 packets and %d probes, want %d and 2", roce, probes, 3111+3626)
	}
}

// TestDecodingLayerParser: the layer works in gopacket's allocation-free
// parser, after Ethernet, IPv4 and UDP.
func TestDecodingLayerParser(t *testing.T) {
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		r       RoCEv2
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &r, &payload)
	parser.IgnoreUnsupported = true
	var decoded []gopacket.LayerType
	n := 0
	for _, c := range capturePackets(t) {
		if err := parser.DecodeLayers(c.pkt.Data, &decoded); err != nil {
			continue // TCP, and the two probes
		}
		if len(decoded) < 4 || decoded[3] != LayerTypeRoCEv2 {
			continue
		}
		n++
		if r.Fields.BTH.OpCode != r.Packet.OpCode() || r.Fields.BTH.PSN != r.Packet.BTH().PSN() {
			t.Fatalf("%s: fields and packet disagree", c.name)
		}
		if r.Packet.PayloadLen() > 0 && (len(decoded) != 5 || len(payload) != r.Packet.PayloadLen()) {
			t.Fatalf("%s: payload layer %v, %d bytes", c.name, decoded, len(payload))
		}
	}
	if n != 3111+3626 {
		t.Errorf("%d packets decoded as RoCEv2, want %d", n, 3111+3626)
	}
}

func TestTruncated(t *testing.T) {
	var r RoCEv2
	var df gopacket.DecodeFeedback = &truncFeedback{}
	if err := r.DecodeFromBytes(make([]byte, 10), df); err != bth.ErrTruncated || !df.(*truncFeedback).truncated {
		t.Errorf("short packet: %v, truncated flag %v", err, df.(*truncFeedback).truncated)
	}
	if err := r.DecodeFromBytes(append([]byte{0x15}, make([]byte, 19)...), df); err != bth.ErrReservedOpcode {
		t.Errorf("reserved opcode: %v", err)
	}
}

type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }
