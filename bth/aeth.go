package bth

import (
	"fmt"
	"time"
)

// AETH is a view of the ACK Extended Transport Header (IBA 9.3.5): an
// 8-bit syndrome and the 24-bit message sequence number (MSN).
type AETH []byte

// Syndrome returns the syndrome byte.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN returns the message sequence number (24 bits).
func (a AETH) MSN() uint32 { return get24(a[1:]) }

// SetSyndrome sets the syndrome byte.
func (a AETH) SetSyndrome(s Syndrome) { a[0] = byte(s) }

// SetMSN sets the message sequence number.
func (a AETH) SetMSN(m uint32) { put24(a[1:], m) }

// Encode writes the syndrome and MSN.
func (a AETH) Encode(s Syndrome, msn uint32) {
	a[0] = byte(s)
	put24(a[1:], msn)
}

// Syndrome is the AETH syndrome byte (IBA table 42): bits 6-5 give the
// class, bits 4-0 its value (credit count, RNR timer or NAK code).
type Syndrome uint8

// AckClass is the class of a syndrome.
type AckClass uint8

// Syndrome classes.
const (
	ClassACK      AckClass = 0 // value: credit count
	ClassRNRNAK   AckClass = 1 // value: RNR timer code
	ClassReserved AckClass = 2
	ClassNAK      AckClass = 3 // value: NAK code
)

// NAKCode is the value of a NAK syndrome (IBA table 43).
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError  NAKCode = 0
	NAKInvalidRequest    NAKCode = 1
	NAKRemoteAccessError NAKCode = 2
	NAKRemoteOperational NAKCode = 3
	NAKInvalidRDRequest  NAKCode = 4
)

var nakNames = [...]string{"PSN sequence error", "invalid request", "remote access error",
	"remote operational error", "invalid RD request"}

// String returns the NAK's name as the specification gives it.
func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return fmt.Sprintf("reserved NAK code %d", uint8(c))
}

// CreditsInvalid is the credit-count code meaning "no end-to-end flow control
// information": what Linux rxe always advertises.
const CreditsInvalid = 0x1f

// Syndrome constructors.
// ACKSyndrome returns an ACK syndrome with a credit count code.
func ACKSyndrome(creditCode uint8) Syndrome { return Syndrome(creditCode & 0x1f) }

// RNRNAKSyndrome returns an RNR NAK syndrome with an RNR timer code.
func RNRNAKSyndrome(timerCode uint8) Syndrome { return Syndrome(0x20 | timerCode&0x1f) }

// NAKSyndrome returns a NAK syndrome with a NAK code.
func NAKSyndrome(code NAKCode) Syndrome { return Syndrome(0x60 | uint8(code)&0x1f) }

// Class returns the syndrome's class (bits 6-5).
func (s Syndrome) Class() AckClass { return AckClass(s>>5) & 3 }

// Value returns the class's value (bits 4-0).
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// IsACK reports an ACK.
func (s Syndrome) IsACK() bool { return s.Class() == ClassACK }

// IsRNRNAK reports an RNR NAK.
func (s Syndrome) IsRNRNAK() bool { return s.Class() == ClassRNRNAK }

// IsNAK reports a NAK (not an RNR NAK).
func (s Syndrome) IsNAK() bool { return s.Class() == ClassNAK }

// NAKCode returns a NAK's code.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String names the class and value ("ACK credits=invalid", "NAK remote
// access error").
func (s Syndrome) String() string {
	switch s.Class() {
	case ClassACK:
		if s.Value() == CreditsInvalid {
			return "ACK credits=invalid"
		}
		return fmt.Sprintf("ACK credits=%d", CreditCount(s.Value()))
	case ClassRNRNAK:
		return fmt.Sprintf("RNR NAK timer=%d (%v)", s.Value(), RNRTimer(s.Value()))
	case ClassNAK:
		return "NAK " + s.NAKCode().String()
	}
	return fmt.Sprintf("reserved syndrome 0x%02x", uint8(s))
}

// rnrTimerTable is IBA table 45 in units of 10 µs: the minimum RNR NAK timer
// field value to the time the requester must wait before retrying.
var rnrTimerTable = [32]uint32{
	65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
}

// RNRTimer converts a 5-bit RNR timer code to its duration (code 12 = 0.64 ms,
// code 0 = 655.36 ms).
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTimerTable[code&0x1f]) * 10 * time.Microsecond
}

// RNRTimerCode returns the smallest code whose timer is at least d.
func RNRTimerCode(d time.Duration) uint8 {
	best := uint8(0) // 655.36 ms, the longest
	for c := uint8(1); c < 32; c++ {
		if RNRTimer(c) >= d && RNRTimer(c) < RNRTimer(best) {
			best = c
		}
	}
	return best
}

// creditTable is IBA table 44: the credit count encoding.
var creditTable = [31]uint32{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// CreditCount decodes a credit-count code to a number of receive WQEs; code
// 0x1f (invalid) returns -1.
func CreditCount(code uint8) int {
	if code&0x1f == CreditsInvalid {
		return -1
	}
	return int(creditTable[code&0x1f])
}

// CreditCode encodes n available receive WQEs as the largest code not above n.
func CreditCode(n int) uint8 {
	c := uint8(0)
	for i, v := range creditTable {
		if int(v) <= n {
			c = uint8(i)
		}
	}
	return c
}
