package bth

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// crcUpdate is crc32.Update: at every length around the folding steps'
// edges (256 and 64 bytes, the 16-byte lanes), from any state, and over
// data that does not start on a cache line.
func TestCRCUpdate(t *testing.T) {
	t.Logf("512-bit folding: %v", haveCRCFold)
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lengths := []int{0, 1, 63, 64, 255, 256, 257, 319, 320, 321, 511, 512, 513, 575, 576, 1024, 1088, 4096, 4100, 4160, 8192, 9000}
	for n := 0; n < 1200; n += 1 + n/40 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, off := range []int{0, 1, 13, 64} {
			p := buf[off : off+n]
			for _, crc := range []uint32{0, 0xffffffff, r.Uint32()} {
				if got, want := crcUpdate(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
					t.Fatalf("%d bytes at offset %d from %#08x: %#08x, hash/crc32 %#08x", n, off, crc, got, want)
				}
			}
		}
	}
}

// One bit flipped anywhere changes the CRC as hash/crc32's does.
func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 256), uint16(0))
	f.Add(uint32(0x12345678), make([]byte, 4096), uint16(4095*8+7))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte, bit uint16) {
		if got, want := crcUpdate(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("%d bytes from %#08x: %#08x, hash/crc32 %#08x", len(p), crc, got, want)
		}
		if len(p) == 0 {
			return
		}
		q := append([]byte(nil), p...)
		i := int(bit) % (8 * len(q))
		q[i/8] ^= 1 << (i % 8)
		if got, want := crcUpdate(crc, q), crc32.Update(crc, crc32.IEEETable, q); got != want {
			t.Fatalf("bit %d flipped in %d bytes: %#08x, hash/crc32 %#08x", i, len(q), got, want)
		}
	})
}

// BenchmarkCRCUpdate runs the engine's CRC and hash/crc32's over one
// packet's payload, side by side.
func BenchmarkCRCUpdate(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		p := make([]byte, n)
		var sink uint32
		b.Run("crcUpdate/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				sink = crcUpdate(sink, p)
			}
		})
		b.Run("hash-crc32/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				sink = crc32.Update(sink, crc32.IEEETable, p)
			}
		})
	}
}
