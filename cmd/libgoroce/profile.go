package main

/*
int gq_profile_register(void);
*/
import "C"

import (
	"os"

	"github.com/goroce/goroce/internal/profile"
)

// The profiles of a program that asked for them (GOROCE_CPUPROFILE,
// GOROCE_BLOCKPROFILE: internal/profile) start when the engine loads and
// are written when the program exits (atexit): a library has no end of
// its own. A process killed, or one that leaves by _exit, writes none; a
// child forked after the engine loaded writes none either (its Go runtime
// does not survive the fork).
var (
	stopProfiles = func() {}
	profilePID   int
)

func init() {
	e := profile.FromEnv()
	if e == (profile.Env{}) {
		return
	}
	stopProfiles = profile.Start(e, "libgoroce", os.Stderr)
	profilePID = os.Getpid()
	C.gq_profile_register()
}

//export gq_profile_exit
func gq_profile_exit() {
	if os.Getpid() == profilePID {
		stopProfiles()
	}
}
