// Package spin paces goroce's busy-wait loops: how often a goroutine that
// busy-polls a CQ (transport.CQ.Yield) gives its processor back to the scheduler.
//
// A yield (runtime.Gosched) runs the scheduler, which reads the monotonic
// clock whenever a timer is pending, and a device in use always has one
// (retransmission, a burst's flush). Where the clock is read in user space
// (the vDSO over a TSC or a paravirtual clock) that costs tens of
// nanoseconds, and a poller yields after every empty poll, so that another
// goroutine of its process never waits more than one poll for the CPU.
// Where each read is a system call (a clock source the vDSO cannot read:
// the lab's TCG guests run on an emulated HPET) the scheduler's clock read
// cost more than a poll that reads memory: 36-43% of a polling roced's
// CPU in the bookworm guest (send_lat 64 B over afxdp in poll mode,
// GOMAXPROCS=1), so there a poller of such a link (nic.Info.PollNoSyscall)
// yields after every 64th empty poll.
package spin

import (
	"runtime"
	"sync/atomic"
	"time"
)

// SlowClock is the cost of a clock read from which the clock counts as a
// system call's: the vDSO's reads take 20-50 ns, a system call in the
// lab's guest several microseconds.
const SlowClock = time.Microsecond

// SlowEvery is how many empty polls a poller makes per yield where the
// clock is slow.
const SlowEvery = 64

// cheapPeriod is the yield period of loops whose polls make no system
// call, measured at the first Every(true); 0: not yet. Two first calls at
// once both measure, and agree.
var cheapPeriod atomic.Int32

// Every returns the yield period for a loop whose polls make no system
// call (cheapPolls) or do: 1, or SlowEvery when the polls are cheap and
// this process's clock is slow (measured at the first call). A loop whose
// polls are system calls yields at each: spacing its yields out saved
// nothing there and, over the udp link in the lab's guest, lengthened the
// tail (the receive goroutine, once woken, waited longer for the CPU).
func Every(cheapPolls bool) int {
	if !cheapPolls {
		return 1
	}
	n := cheapPeriod.Load()
	if n == 0 {
		n = int32(period(time.Now))
		cheapPeriod.Store(n)
	}
	return int(n)
}

// Yield is called by a busy-wait loop after its i-th empty poll (i counting
// up from 0 or 1, one per poll), with the loop's period (Every), and
// yields the processor once in every polls.
func Yield(i, every int) {
	if yields(i, every) {
		runtime.Gosched()
	}
}

// yields says whether the i-th empty poll yields at period n.
func yields(i, n int) bool { return n <= 1 || i%n == n-1 }

// period measures now and returns the yield period it calls for: 1, or
// SlowEvery when a read costs SlowClock or more. The cost is the fastest of
// eight runs of 16 reads, so that a run the scheduler interrupts does not
// count.
func period(now func() time.Time) int {
	const runs, reads = 8, 16
	best := time.Duration(1<<63 - 1)
	for range runs {
		t0 := now()
		t := t0
		for range reads {
			t = now()
		}
		if d := t.Sub(t0); d < best {
			best = d
		}
	}
	if best >= reads*SlowClock {
		return SlowEvery
	}
	return 1
}
