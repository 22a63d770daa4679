package bth

import (
	"strconv"
	"testing"
)

// Per-packet cost of the receive path's two steps, for RC SEND Only
// packets of 64 B, 1 KiB and 4 KiB payload over Ethernet/IPv4. SetBytes
// counts the whole frame, so the MB/s column is wire throughput on one
// core.

var benchSizes = []int{64, 1024, 4096}

func benchFrame(tb testing.TB, n int) Frame {
	b, err := testFields(RCSendOnly, n).Append(nil)
	if err != nil {
		tb.Fatal(err)
	}
	fr, err := DecodeEthernet(b)
	if err != nil {
		tb.Fatal(err)
	}
	return fr
}

// BenchmarkParse: BTH, extended headers, pad and length checks.
func BenchmarkParse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			fr := benchFrame(b, n)
			roce := fr.RoCE()
			b.SetBytes(int64(len(fr.Bytes())))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(roce); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeParse: Ethernet, IP (with its checksum), UDP and Parse:
// everything but the ICRC.
func BenchmarkDecodeParse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			raw := benchFrame(b, n).Bytes()
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				fr, err := DecodeEthernet(raw)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Parse(fr.RoCE()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkICRC: verifying the invariant CRC of a received frame.
func BenchmarkICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			fr := benchFrame(b, n)
			b.SetBytes(int64(len(fr.Bytes())))
			b.ReportAllocs()
			for b.Loop() {
				if !fr.VerifyICRC() {
					b.Fatal("bad ICRC")
				}
			}
		})
	}
}

// TestZeroAlloc: the per-packet receive and send steps allocate nothing.
func TestZeroAlloc(t *testing.T) {
	for _, n := range benchSizes {
		fr := benchFrame(t, n)
		raw := fr.Bytes()
		for name, f := range map[string]func(){
			"Parse":          func() { _, _ = Parse(fr.RoCE()) },
			"DecodeEthernet": func() { _, _ = DecodeEthernet(raw) },
			"DecodeIP":       func() { _, _ = DecodeIP(fr.L3()) },
			"DecodeLink":     func() { _, _ = DecodeLink(LinkLinuxSLL2, raw) },
			"VerifyICRC":     func() { _ = fr.VerifyICRC() },
			"CheckICRC":      func() { _ = fr.CheckICRC() },
			"PutICRC":        func() { fr.PutICRC() },
			"malformed":      func() { _, _ = Parse(raw[:10]) },
			"accessors": func() {
				p, _ := Parse(fr.RoCE())
				_ = p.BTH().PSN() + PSN(len(p.Payload())) + PSN(p.BTH().PKey()) + PSN(len(p.RETH()))
			},
		} {
			if a := testing.AllocsPerRun(100, f); a != 0 {
				t.Errorf("%s, %d-byte payload: %v allocations per packet, want 0", name, n, a)
			}
		}
	}
}
