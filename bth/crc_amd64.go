//go:build !purego

package bth

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// hash/crc32 folds 64 bytes a step with PCLMULQDQ (about 23 GB/s here);
// where the CPU has VPCLMULQDQ on 512-bit registers, crcFold folds 256
// bytes a step, four times the width, which the payload of every 4 KiB
// packet the engine seals or checks runs through. Its constants are
// c(n) = (x^n mod P) bit-reversed and shifted left once (the form of
// hash/crc32's own r2r1): a lane moved forward D bits multiplies its low
// quadword by c(D+32) and its high one by c(D-32); TestCRCUpdate and
// FuzzCRCUpdate check the result against hash/crc32.
var haveCRCFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

// crcFoldMin is the shortest span crcFold is given: below it the set-up
// costs what the wider steps save.
const crcFoldMin = 256

// crcFold folds p, a multiple of 64 bytes and at least 256, from the raw
// (uninverted) CRC state s into r: 16 bytes whose raw CRC from 0 is p's
// from s.
//
//go:noescape
func crcFold(s uint32, p []byte, r *[16]byte)

// crcUpdate continues the CRC-32 (IEEE) crc over p, as crc32.Update does.
func crcUpdate(crc uint32, p []byte) uint32 {
	if !haveCRCFold || len(p) < crcFoldMin {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	n := len(p) &^ 63
	var r [16]byte
	crcFold(^crc, p[:n], &r)
	// r's CRC from a raw 0 is crc32's from ^0; slicing8, not hash/crc32,
	// so that r stays on the stack.
	return crc32.Update(slicing8(^uint32(0), r[:]), crc32.IEEETable, p[n:])
}
