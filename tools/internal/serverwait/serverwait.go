// Package serverwait lets a roced client wait for its server: a client
// started before its server listens (a recipe's "roced X server &" then
// the client on the next line) retries its connection until the server
// answers or a bound passes, where the real tools try once and fail. The
// bound is GOROCE_SERVER_WAIT (a Go duration, or seconds); 0 makes roced
// try once, as the real tools do.
package serverwait

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
)

// Env names the variable that bounds the wait.
const Env = "GOROCE_SERVER_WAIT"

// Default is the bound when Env is unset: long enough for a server started
// in the same breath to listen on a loaded machine, short enough that a
// client with a wrong address still fails in the time a person waits.
const Default = 10 * time.Second

// Usage is the line the tools' usage texts print about Env.
const Usage = "  " + Env + "=<d>  (environment) a client retries a server that does not\n" +
	"                         listen yet this long (default 10s; 0: once, as the real tools)"

// Bound reads Env: a Go duration ("30s", "1m") or a number of seconds;
// unset or empty, Default.
func Bound() (time.Duration, error) {
	v := os.Getenv(Env)
	if v == "" {
		return Default, nil
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e9 {
		return time.Duration(s * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%s=%q: not a duration (such as 10s) or a number of seconds", Env, v)
}

// first and most are the pauses between tries: short at first, so that a
// server that listens a moment later is reached at once, then longer, so
// that a client kept waiting does not flood the server's host with tries.
const (
	first = 10 * time.Millisecond
	most  = 250 * time.Millisecond
)

// Retry calls try until it succeeds, fails with an error notYet does not
// call a server's absence, ctx ends, or Bound passes; then it returns
// try's last result. try gets ctx itself: the bound limits the retries,
// not a try that reached its server.
func Retry[T any](ctx context.Context, try func(context.Context) (T, error), notYet func(error) bool) (T, error) {
	bound, err := Bound()
	if err != nil {
		var zero T
		return zero, err
	}
	deadline := time.Now().Add(bound)
	pause := first
	for {
		v, err := try(ctx)
		if err == nil || !notYet(err) || ctx.Err() != nil || !time.Now().Add(pause).Before(deadline) {
			return v, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		pause = min(2*pause, most)
	}
}

// Refused reports whether a TCP connect failed for want of a listener.
func Refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// NoListener reports whether the RDMA connection manager refused a
// connection or a UD service for want of a listener: a REJ with reason 8
// (invalid service ID), as Linux's cm.c and package cm send, or a
// SIDR_REP of status 1 (service ID not supported).
func NoListener(err error) bool {
	var rej *cm.RejectError
	var sidr *cm.SIDRError
	return errors.As(err, &rej) && rej.Reason == mad.RejInvalidServiceID ||
		errors.As(err, &sidr) && sidr.Status == mad.SIDRUnsupported
}
