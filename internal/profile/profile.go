// Package profile writes the Go runtime's profiles of a run that asks for
// them in its environment, for roced and for libgoroce.so alike, where no
// debugger reaches (inside the lab guest, or inside someone else's
// program):
//
//	GOROCE_CPUPROFILE=FILE    where the CPU went
//	GOROCE_BLOCKPROFILE=FILE  where goroutines, and C threads inside a
//	                          call into the engine, waited: mutexes,
//	                          channels, sync.Cond, select (every event)
//
// go tool pprof reads both. "%p" in FILE becomes the process's ID, so that
// several processes (MPI ranks, a forking server) write one file each.
// The block profile is the one that names a lock held across a system
// call: it found the QP lock that ib_send_lat's post_recv waited on while
// the receive goroutine sent an ACK (docs/performance.md).
package profile

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
)

// Env is what a run asked for: file names, empty for none.
type Env struct {
	CPU   string // GOROCE_CPUPROFILE
	Block string // GOROCE_BLOCKPROFILE
}

// FromEnv reads the process's environment.
func FromEnv() Env {
	return Env{CPU: os.Getenv("GOROCE_CPUPROFILE"), Block: os.Getenv("GOROCE_BLOCKPROFILE")}
}

// Start starts the profiles e asks for and returns the function that
// stops them and writes them; it may be called more than once, and writes
// once. A profile that cannot be started or written is said on w, prefixed
// with who, and the run goes on without it.
func Start(e Env, who string, w io.Writer) (stop func()) {
	say := func(env string, err error) { fmt.Fprintf(w, "%s: %s: %v\n", who, env, err) }
	var cpu *os.File
	if e.CPU != "" {
		f, err := os.Create(expand(e.CPU))
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			say("GOROCE_CPUPROFILE", err)
		} else {
			cpu = f
		}
	}
	block := ""
	if e.Block != "" {
		block = expand(e.Block)
		// Every event: the diagnosis is of rare waits as much as of
		// frequent ones, and a run that asks accepts the cost.
		runtime.SetBlockProfileRate(1)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if cpu != nil {
				pprof.StopCPUProfile()
				if err := cpu.Close(); err != nil {
					say("GOROCE_CPUPROFILE", err)
				}
			}
			if block != "" {
				if err := write(block, "block"); err != nil {
					say("GOROCE_BLOCKPROFILE", err)
				}
				runtime.SetBlockProfileRate(0)
			}
		})
	}
}

// write writes the runtime's named profile to file.
func write(file, name string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// expand replaces "%p" in a file name with the process's ID.
func expand(file string) string {
	return strings.ReplaceAll(file, "%p", strconv.Itoa(os.Getpid()))
}
