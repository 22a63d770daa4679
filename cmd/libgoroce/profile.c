/*
 * profile.c: the exit hook that writes the profiles GOROCE_CPUPROFILE and
 * GOROCE_BLOCKPROFILE ask for (profile.go), in the engine, whichever way
 * it is built.
 */
#include <stdlib.h>
#include "_cgo_export.h"

static void at_exit(void)
{
	gq_profile_exit();
}

int gq_profile_register(void)
{
	return atexit(at_exit);
}
