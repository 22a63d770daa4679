// Package rocelayers makes gopacket decode RoCEv2: importing it registers
// LayerTypeRoCEv2 on UDP port 4791, so that
//
//	gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
//
// yields a *RoCEv2 layer (BTH, extended headers, pad and ICRC) after the
// UDP layer, followed by a gopacket.Payload with the message bytes. RoCEv2
// also works as a gopacket.DecodingLayer in a DecodingLayerParser.
//
// gopacket has no InfiniBand transport layer of its own; this one is a
// thin adapter over package bth, which does the parsing.
package rocelayers

import (
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
)

// LayerTypeRoCEv2 is the layer type of the RoCEv2 transport packet. Its
// number is the RoCEv2 UDP port: outside gopacket's fast range (1000-1999),
// which costs a map lookup, but unlikely to collide with other users.
var LayerTypeRoCEv2 = gopacket.RegisterLayerType(bth.UDPPort, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeRoCEv2),
})

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(bth.UDPPort), LayerTypeRoCEv2)
}

// RoCEv2 is an InfiniBand transport packet carried over UDP: BTH, the
// extended headers its opcode calls for, payload, pad and ICRC.
type RoCEv2 struct {
	// Contents holds the BTH and extended headers, Payload the payload
	// without its pad; the pad and ICRC are in Fields.
	layers.BaseLayer
	// Packet is the parsed packet, with zero-copy views of every header.
	Packet bth.Packet
	// Fields holds every field; its Payload and Pad alias the packet.
	Fields bth.TransportFields
}

// LayerType returns LayerTypeRoCEv2.
func (r *RoCEv2) LayerType() gopacket.LayerType { return LayerTypeRoCEv2 }

// CanDecode returns LayerTypeRoCEv2.
func (r *RoCEv2) CanDecode() gopacket.LayerClass { return LayerTypeRoCEv2 }

// NextLayerType returns gopacket.LayerTypePayload when the packet carries a
// payload, else gopacket.LayerTypeZero.
func (r *RoCEv2) NextLayerType() gopacket.LayerType {
	if len(r.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes parses data, the UDP payload, as bth.Parse does; a
// malformed packet gives its bth.Error.
func (r *RoCEv2) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	p, err := bth.Parse(data)
	if err != nil {
		if err == bth.ErrTruncated {
			df.SetTruncated()
		}
		return err
	}
	r.Packet = p
	r.Fields.Decode(p)
	r.BaseLayer = layers.BaseLayer{Contents: data[:p.HdrLen()], Payload: p.Payload()}
	return nil
}

func decodeRoCEv2(data []byte, pb gopacket.PacketBuilder) error {
	r := &RoCEv2{}
	if err := r.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	pb.AddLayer(r)
	return pb.NextDecoder(r.NextLayerType())
}

// VerifyICRC checks the ICRC of the RoCEv2 layer of a decoded packet
// against its IP and UDP headers. ok is false when the packet has no
// RoCEv2 layer (or no IP or UDP layer under it).
func VerifyICRC(p gopacket.Packet) (ok bool) {
	r, _ := p.Layer(LayerTypeRoCEv2).(*RoCEv2)
	nl := p.NetworkLayer()
	u, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if r == nil || nl == nil || u == nil {
		return false
	}
	ip := nl.LayerContents()
	if v := ip[0] >> 4; (v != 4 && v != 6) || len(u.Contents) != inet.UDPHeaderLen {
		return false
	}
	b := r.Packet.Bytes()
	return bth.ICRC(ip, u.Contents, b[:len(b)-bth.ICRCLen]) == r.Packet.ICRC()
}
