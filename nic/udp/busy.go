package udp

import "time"

// AdaptiveBusyPoll is the longest a receive busy-polls by default
// (Config.BusyPoll 0): a receive that finds the socket empty asks again
// for up to this long, rather than sleep in the runtime's poller, while
// packets have been coming within flowGap of each other on average, and
// sleeps at once when they have not.
// A flow of requests and replies (a ping-pong, a CM exchange, a stream)
// thus saves the poller's wake-up, and the hand-off between threads it
// brings, at each packet: on this project's 2-core host, roced send_lat
// 64 B across loopback went from 48-60 µs to 8 µs (t_typical) with a
// fixed 100 µs budget. A link that goes quiet, or carries sparse traffic,
// spins for nothing, as Linux's net.core.busy_poll (50 µs is its
// documented setting) does only where it is asked for.
const AdaptiveBusyPoll = 100 * time.Microsecond

// flowGap is the average gap between receives up to which adaptive busy
// polling spins: longer than AdaptiveBusyPoll, because a flow that is
// slow only for want of polling (each side's wake-up in every round
// trip: roced send_lat's round trips were about 100 µs) must speed up once
// it polls. Traffic sparser than this spins for nothing at most
// AdaptiveBusyPoll a receive, a quarter of a core.
const flowGap = 4 * AdaptiveBusyPoll

// NoBusyPoll, as Config.BusyPoll, never busy-polls: a receive that finds
// the socket empty sleeps in the runtime's poller at once.
const NoBusyPoll = -1

// rxGaps follows the gaps between a queue's receives, for adaptive busy
// polling: an average that weighs the last gap an eighth, so that one
// long pause (the peer's application thinking) does not stop the polling
// of a flow, nor one burst start it.
type rxGaps struct {
	last    time.Time
	avg     time.Duration // 0: fewer than two receives yet
	vain    int           // busy polls in a row that ran out with nothing
	skipped int           // busy polls not made since vain reached maxVain
}

// maxVain is how many busy polls in a row may run out before adaptive
// polling stops; retryVain is how often it tries once more then.
const (
	maxVain   = 4
	retryVain = 64
)

// spun records how a busy poll ended: a packet came (found) or the
// budget ran out.
func (g *rxGaps) spun(found bool) {
	if found {
		g.vain, g.skipped = 0, 0
	} else {
		g.vain++
	}
}

// received records a receive at now.
func (g *rxGaps) received(now time.Time) {
	if !g.last.IsZero() {
		// A silence counts as twice flowGap however long it was, so that
		// the average comes back within a few receives when a flow
		// resumes.
		d := min(now.Sub(g.last), 2*flowGap)
		if g.avg == 0 {
			g.avg = max(d, 1)
		} else {
			g.avg += (d - g.avg) / 8
			g.avg = max(g.avg, 1)
		}
	}
	g.last = now
}

// budget is how long an empty receive busy-polls: AdaptiveBusyPoll while
// receives come within flowGap of each other on average, unless the last
// maxVain polls ran out (then once in retryVain), else 0.
func (g *rxGaps) budget() time.Duration {
	if g.avg == 0 || g.avg > flowGap {
		return 0
	}
	if g.vain >= maxVain {
		if g.skipped++; g.skipped%retryVain != 0 {
			return 0
		}
	}
	return AdaptiveBusyPoll
}
