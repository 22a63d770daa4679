package bth

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/inet"
)

// buildIPv4 makes an IPv4 RoCEv2 datagram with a payload of n random bytes,
// identification id and DF as given, and a correct ICRC.
func buildIPv4(t testing.TB, rng *rand.Rand, n int, id uint16, df bool) []byte {
	t.Helper()
	o := Outer{
		Src:     netip.MustParseAddr("198.18.0.1"),
		Dst:     netip.MustParseAddr("198.18.0.2"),
		SrcPort: uint16(0xc000 + rng.IntN(0x4000)),
		TClass:  uint8(rng.IntN(256)),
	}
	roceLen := BTHLen + n + ICRCLen
	b := make([]byte, o.Len()+roceLen)
	h := o.Put(b, roceLen)
	bth := BTH(b[h : h+BTHLen])
	bth.Encode(&BTHFields{OpCode: 0x04, PKey: DefaultPKey, DestQP: rng.Uint32() & 0xffffff, PSN: PSN(rng.Uint32() & 0xffffff), FECN: rng.IntN(2) == 0, BECN: rng.IntN(2) == 0})
	for i := h + BTHLen; i < len(b)-ICRCLen; i++ {
		b[i] = byte(rng.Uint32())
	}
	setIDDF(b, id, df)
	f, err := DecodeIP(b)
	if err != nil {
		t.Fatalf("payload %d: %v", n, err)
	}
	f.PutICRC()
	return b
}

func setIDDF(ip []byte, id uint16, df bool) {
	binary.BigEndian.PutUint16(ip[4:], id)
	ip[6] = 0
	if df {
		ip[6] = 0x40
	}
	inet.IPv4(ip).SetChecksum(inet.IPv4(ip).CalculateChecksum())
}

func TestCRCMulXInverse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		v := rng.Uint32()
		if crcDivX(crcMulX(v)) != v || crcMulX(crcDivX(v)) != v {
			t.Fatalf("divX is not the inverse of mulX at %#x", v)
		}
	}
	idOnce.Do(idInit)
	for _, r := range []int{0, 1, 7, 100, 4096, 65535} {
		if p := crcMul(idShifts.fwd[r], idShifts.inv[r]); p != 1<<31 {
			t.Fatalf("x^8R * x^-8R = %#x for R=%d, want 1", p, r)
		}
	}
}

// TestCRCMulMatchesZeroBytes checks the shift table against hash/crc32:
// appending R zero bytes multiplies the register difference by x^(8R).
func TestCRCMulMatchesZeroBytes(t *testing.T) {
	idOnce.Do(idInit)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range []int{0, 1, 2, 33, 1000, 4200} {
		a := make([]byte, 4+r)
		b := make([]byte, 4+r)
		binary.LittleEndian.PutUint32(b, rng.Uint32())
		// The register difference after the first 4 bytes.
		d0 := crc32Of(a[:4]) ^ crc32Of(b[:4])
		d := crc32Of(a) ^ crc32Of(b)
		if got := crcMul(d0, idShifts.fwd[r]); got != d {
			t.Fatalf("R=%d: shifted %#x, want %#x", r, got, d)
		}
	}
}

func TestSolveIPv4IDAllLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 0; n <= 4200; n++ {
		id := uint16(rng.Uint32())
		df := rng.IntN(4) != 0
		b := buildIPv4(t, rng, n, id, df)
		f, _ := DecodeIP(b)
		if !f.VerifyICRC() {
			t.Fatalf("payload %d: built frame does not verify", n)
		}
		// What a UDP socket gives: no identification, no flags.
		setIDDF(b, 0, false)
		if f.VerifyICRC() && (id != 0 || df) {
			t.Fatalf("payload %d: ICRC verifies without the identification", n)
		}
		if !f.RecoverIPv4ID() {
			t.Fatalf("payload %d: no identification found (want %#x df=%v)", n, id, df)
		}
		gotID := binary.BigEndian.Uint16(b[4:])
		if gotID != id || (b[6] == 0x40) != df {
			t.Fatalf("payload %d: recovered id %#x flags %#x, want %#x df=%v", n, gotID, b[6], id, df)
		}
		if !f.VerifyICRC() || !inet.IPv4(b).IsChecksumValid() {
			t.Fatalf("payload %d: recovered frame does not verify", n)
		}
	}
}

func TestIPv4IDDiff(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 0; n <= 4200; n += 7 {
		b := buildIPv4(t, rng, n, 0, true)
		f, _ := DecodeIP(b)
		c0 := f.StoredICRC()
		id := uint16(rng.Uint32())
		df := rng.IntN(2) == 0
		setIDDF(b, id, df)
		want := f.ComputeICRC()
		if got := c0 ^ IPv4IDDiff(len(b), id, !df); got != want {
			t.Fatalf("payload %d id %#x df %v: patched ICRC %#x, want %#x", n, id, df, got, want)
		}
	}
	if IPv4IDDiff(3, 1, false) != 0 || IPv4IDDiff(1<<17, 1, false) != 0 {
		t.Fatal("impossible lengths must give no difference")
	}
}

// TestSolveIPv4IDRejectsCorruption flips one random bit outside the
// identification and flags and checks that recovery fails: a false accept
// has probability 2^17/2^32 per corrupted packet.
func TestSolveIPv4IDRejectsCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const trials = 20000
	accepted := 0
	for i := range trials {
		b := buildIPv4(t, rng, rng.IntN(1100), uint16(i), true)
		var pos int
		for {
			pos = rng.IntN(len(b))
			// skip bytes the ICRC masks or this test rewrites
			if pos != 1 && pos != 8 && pos != 10 && pos != 11 && (pos < 4 || pos > 7) && pos != 26 && pos != 27 && pos != 32 {
				break
			}
		}
		b[pos] ^= 1 << rng.IntN(8)
		setIDDF(b, 0, false)
		f, err := DecodeIP(b)
		if err != nil {
			continue // corrupted a length: not a frame at all
		}
		if f.RecoverIPv4ID() {
			accepted++
		}
	}
	if accepted > 5 {
		t.Fatalf("%d of %d corrupted frames accepted; expected about %d", accepted, trials, trials>>15)
	}
}

func TestSolveIPv4IDShortLengths(t *testing.T) {
	for n := -1; n < 20; n++ {
		if _, _, ok := SolveIPv4ID(n, 0x1234); ok && idTail(n) < 0 {
			t.Fatalf("length %d accepted", n)
		}
	}
	if _, _, ok := SolveIPv4ID(70000, 0); ok {
		t.Fatal("length beyond IPv4 accepted")
	}
}

// TestRecoverIPv4IDCaptures takes every IPv4 RoCEv2 packet rxe sent in the
// reference captures, clears its identification and DF as a UDP socket
// would, and recovers them.
func TestRecoverIPv4IDCaptures(t *testing.T) {
	files, _ := filepath.Glob("testdata/captures*/*.pcap")
	if len(files) == 0 {
		t.Fatal("no captures found")
	}
	total := 0
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewReader(fh)
		if err != nil {
			fh.Close()
			t.Fatalf("%s: %v", name, err)
		}
		for {
			data, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			fr, err := DecodeEthernet(data)
			if err != nil || fr.IsIPv6() || !fr.VerifyICRC() {
				continue
			}
			b := append([]byte(nil), fr.L3()...)
			id := binary.BigEndian.Uint16(b[4:])
			flags := b[6]
			setIDDF(b, 0, false)
			f, err := DecodeIP(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !f.RecoverIPv4ID() || binary.BigEndian.Uint16(b[4:]) != id || b[6] != flags || !f.VerifyICRC() {
				t.Fatalf("%s: id %#x flags %#x not recovered (got %#x %#x)", name, id, flags, binary.BigEndian.Uint16(b[4:]), b[6])
			}
			total++
		}
		fh.Close()
	}
	if total < 1000 {
		t.Fatalf("only %d packets recovered from %d captures", total, len(files))
	}
	t.Logf("%d captured packets: identification recovered", total)
}

func TestRecoverIPv4IDAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	b := buildIPv4(t, rng, 4096, 0xbeef, true)
	f, _ := DecodeIP(b)
	allocs := testing.AllocsPerRun(100, func() {
		setIDDF(b, 0, false)
		if !f.RecoverIPv4ID() {
			t.Fatal("not recovered")
		}
		_ = IPv4IDDiff(len(b), 3, false)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per recovery", allocs)
	}
}

func BenchmarkRecoverIPv4ID(b *testing.B) {
	rng := rand.New(rand.NewPCG(13, 14))
	pkt := buildIPv4(b, rng, 1024, 0xbeef, true)
	f, _ := DecodeIP(pkt)
	idOnce.Do(idInit)
	b.ResetTimer()
	for range b.N {
		_, _, _ = SolveIPv4ID(len(pkt), 0x12345678)
	}
	_ = f
}

func crc32Of(b []byte) uint32 { return crc32Update(0, b) }

func crc32Update(c uint32, b []byte) uint32 { return crc32.Update(c, crc32.IEEETable, b) }

// crcMulBits is crcMul a bit at a time, as the definition reads.
func crcMulBits(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		b = crcMulX(b)
	}
	return p
}

func TestCRCMulAgreesWithBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for i := range 200000 {
		a, b := rng.Uint32(), rng.Uint32()
		if i < 64 { // single bits of a, and a's zero and ones
			a = 1 << (i & 31)
			if i >= 32 {
				a = [2]uint32{0, 0xffffffff}[i&1]
			}
		}
		if got, want := crcMul(a, b), crcMulBits(a, b); got != want {
			t.Fatalf("crcMul(%#x, %#x) = %#x, want %#x", a, b, got, want)
		}
	}
}

// BenchmarkSolveIPv4ID solves, and BenchmarkIPv4IDDiff makes, the
// differences of 256 random identifications and DF flags, as a UDP link
// meets them per packet (one repeated value would let the branch
// predictor learn it).
func BenchmarkSolveIPv4ID(b *testing.B) {
	const tot = 4140 // a 4096-byte payload
	diffs := randomIDDiffs(tot)
	b.ResetTimer()
	for i := range b.N {
		if _, _, ok := SolveIPv4ID(tot, diffs[i&255]); !ok {
			b.Fatal("no solution")
		}
	}
}

func BenchmarkIPv4IDDiff(b *testing.B) {
	rng := rand.New(rand.NewPCG(19, 20))
	var ids [256]uint16
	for i := range ids {
		ids[i] = uint16(rng.Uint32())
	}
	b.ResetTimer()
	var sink uint32
	for i := range b.N {
		sink ^= IPv4IDDiff(4140, ids[i&255], i&256 != 0)
	}
	_ = sink
}

func randomIDDiffs(tot int) (d [256]uint32) {
	rng := rand.New(rand.NewPCG(15, 16))
	for i := range d {
		d[i] = IPv4IDDiff(tot, uint16(rng.Uint32()), rng.IntN(2) == 0)
	}
	return
}

// FuzzSolveIPv4ID holds the table-driven solve to the definition: the
// bit-at-a-time multiply and elimination give the same answer for any
// length and difference, and an answer found makes exactly that
// difference.
func FuzzSolveIPv4ID(f *testing.F) {
	diffs := randomIDDiffs(4140)
	for _, d := range diffs[:8] {
		f.Add(uint16(4140), d)
	}
	f.Add(uint16(0), uint32(0))
	f.Add(uint16(60), uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, tot uint16, diff uint32) {
		id, df, ok := SolveIPv4ID(int(tot), diff)
		r := idTail(int(tot))
		wantOK := r >= 0
		var e uint64
		if wantOK {
			e = eliminate(crcMulBits(diff, idShifts.inv[r]))
			wantOK = uint32(e) == 0
		}
		if ok != wantOK {
			t.Fatalf("SolveIPv4ID(%d, %#x) ok %v, the definition says %v", tot, diff, ok, wantOK)
		}
		if !ok {
			return
		}
		if bits := uint32(e >> 32); uint16(bits) != id || (bits&(1<<16) != 0) != df {
			t.Fatalf("SolveIPv4ID(%d, %#x) = %#x, %v; the definition says %#x", tot, diff, id, df, bits)
		}
		if got := IPv4IDDiff(int(tot), id, df); got != diff {
			t.Fatalf("IPv4IDDiff(%d, %#x, %v) = %#x, want %#x", tot, id, df, got, diff)
		}
	})
}
