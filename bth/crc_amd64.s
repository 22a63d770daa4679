//go:build !purego

#include "textflag.h"

// Fold constants of the reflected CRC-32 (IEEE): folding a 16-byte lane
// forward by D bits multiplies its low quadword by c(D+32) and its high
// quadword by c(D-32), where c(n) is x^n mod P bit-reversed and shifted
// left once (crc_amd64.go says how each was made; the tests prove them).

// k2048: four lanes of 64 bytes forward by 256 bytes.
DATA k2048<>+0(SB)/8, $0x11542778a
DATA k2048<>+8(SB)/8, $0x1322d1430
GLOBL k2048<>(SB), RODATA|NOPTR, $16

// k512: a lane forward by 64 bytes.
DATA k512<>+0(SB)/8, $0x154442bd4
DATA k512<>+8(SB)/8, $0x1c6e41596
GLOBL k512<>(SB), RODATA|NOPTR, $16

// kLanes: the four lanes of one register onto the last, by 48, 32 and
// 16 bytes; the last lane's constants are zero, so its product is too.
DATA kLanes<>+0(SB)/8, $0x3db1ecdc
DATA kLanes<>+8(SB)/8, $0x174359406
DATA kLanes<>+16(SB)/8, $0xf1da05aa
DATA kLanes<>+24(SB)/8, $0x15a546366
DATA kLanes<>+32(SB)/8, $0x1751997d0
DATA kLanes<>+40(SB)/8, $0xccaa009e
DATA kLanes<>+48(SB)/8, $0
DATA kLanes<>+56(SB)/8, $0
GLOBL kLanes<>(SB), RODATA|NOPTR, $64

// func crcFold(s uint32, p []byte, r *[16]byte)
TEXT ·crcFold(SB), NOSPLIT, $0-40
	MOVL s+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ r+32(FP), DI

	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD     AX, X4
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

	VBROADCASTI32X4 k2048<>(SB), Z5

loop256:
	CMPQ CX, $256
	JB   fold4
	VMOVDQU64  (SI), Z8
	VMOVDQU64  64(SI), Z9
	VMOVDQU64  128(SI), Z10
	VMOVDQU64  192(SI), Z11
	VPCLMULQDQ $0x00, Z5, Z0, Z12
	VPCLMULQDQ $0x11, Z5, Z0, Z0
	VPCLMULQDQ $0x00, Z5, Z1, Z13
	VPCLMULQDQ $0x11, Z5, Z1, Z1
	VPCLMULQDQ $0x00, Z5, Z2, Z14
	VPCLMULQDQ $0x11, Z5, Z2, Z2
	VPCLMULQDQ $0x00, Z5, Z3, Z15
	VPCLMULQDQ $0x11, Z5, Z3, Z3
	VPTERNLOGD $0x96, Z8, Z12, Z0
	VPTERNLOGD $0x96, Z9, Z13, Z1
	VPTERNLOGD $0x96, Z10, Z14, Z2
	VPTERNLOGD $0x96, Z11, Z15, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop256

fold4:
	// Four registers onto the last, 64 bytes at a time.
	VBROADCASTI32X4 k512<>(SB), Z5
	VPCLMULQDQ      $0x00, Z5, Z0, Z12
	VPCLMULQDQ      $0x11, Z5, Z0, Z13
	VPTERNLOGD      $0x96, Z12, Z13, Z1
	VPCLMULQDQ      $0x00, Z5, Z1, Z12
	VPCLMULQDQ      $0x11, Z5, Z1, Z13
	VPTERNLOGD      $0x96, Z12, Z13, Z2
	VPCLMULQDQ      $0x00, Z5, Z2, Z12
	VPCLMULQDQ      $0x11, Z5, Z2, Z13
	VPTERNLOGD      $0x96, Z12, Z13, Z3

loop64:
	CMPQ       CX, $64
	JB         lanes
	VMOVDQU64  (SI), Z8
	VPCLMULQDQ $0x00, Z5, Z3, Z12
	VPCLMULQDQ $0x11, Z5, Z3, Z3
	VPTERNLOGD $0x96, Z8, Z12, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        loop64

lanes:
	// The four lanes onto the last: its product is zero, so it is
	// added in as it is.
	VMOVDQU64      kLanes<>(SB), Z5
	VPCLMULQDQ     $0x00, Z5, Z3, Z12
	VPCLMULQDQ     $0x11, Z5, Z3, Z13
	VPXORQ         Z12, Z13, Z12
	VEXTRACTI64X4  $1, Z12, Y13
	VPXORQ         Y13, Y12, Y12
	VEXTRACTI32X4  $1, Y12, X13
	VPXORQ         X13, X12, X12
	VEXTRACTI32X4  $3, Z3, X13
	VPXORQ         X13, X12, X12
	VMOVDQU        X12, (DI)
	VZEROUPPER
	RET
