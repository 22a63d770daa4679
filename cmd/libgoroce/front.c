//go:build ignore

/*
 * front.c: how libgoroce.so, a plain C library, reaches the Go engine.
 *
 * A Go c-shared library starts the Go runtime (its threads) when it is
 * loaded, and those threads do not survive fork(): a child forked by a
 * process that had loaded one finds the runtime's locks held by threads
 * that no longer exist, and its first call into Go waits forever. So the
 * entry points (verbs.c, cma.c) are built into this C library, and the
 * engine (main.go, cma.go, engine.c: libgoroce-engine.so, beside this
 * library) is dlopen'ed at the first goroce_* call. Each goroce_* function
 * here (generated at build time from the engine's header: see
 * scripts/build-libgoroce.sh) is a jump through a pointer that starts at
 * a loader and, once the engine is in, points into it.
 *
 * A child forked after the engine was loaded cannot use that copy: the
 * pointers go back to the loaders (pthread_atfork), and the child's first
 * call loads a second, fresh copy of the engine (a new runtime) from a
 * memfd holding the same file: the dynamic linker tells loaded objects
 * apart by file identity, so the same path would give back the dead one.
 *
 * Built with the C compiler only (the //go:build ignore line keeps the Go
 * tool from compiling it into the package).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#include "engine.h"
#include "front.h"

#define EXPORT __attribute__((visibility("default")))

enum {
	ENGINE_NONE,  /* never loaded in this process */
	ENGINE_READY, /* loaded, the pointers into it */
	ENGINE_DEAD,  /* loaded before a fork(): this process needs a copy of its own */
	ENGINE_FAILED /* a load failed: every call fails (no retry, no repeated message) */
};

static pthread_mutex_t engine_mu = PTHREAD_MUTEX_INITIALIZER;
static int engine_state = ENGINE_NONE;
static int engine_err;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* fork() waits for a load in progress (prepare takes the lock), so that
 * the child never inherits it held. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&engine_mu);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&engine_mu);
}

static void atfork_child(void)
{
	/* The engine's runtime has no threads here: every goroce_* call
	 * goes back through the loader, which loads a fresh copy. */
	if (engine_state == ENGINE_READY) {
		engine_state = ENGINE_DEAD;
		gq_engine_unbind();
	}
	pthread_mutex_unlock(&engine_mu);
}

static void register_atfork(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* GOROCE_ENGINE names the engine; else libgoroce-engine.so in the
 * directory this library was loaded from. */
static int engine_path(char *path, size_t n)
{
	const char *env = getenv("GOROCE_ENGINE");
	Dl_info info;
	const char *slash;

	if (env && *env) {
		if ((size_t)snprintf(path, n, "%s", env) >= n)
			return ENAMETOOLONG;
		return 0;
	}
	if (!dladdr((void *)engine_path, &info) || !info.dli_fname)
		return ENOENT;
	slash = strrchr(info.dli_fname, '/');
	if ((size_t)snprintf(path, n, "%.*s%s", slash ? (int)(slash - info.dli_fname + 1) : 0,
			     info.dli_fname, "libgoroce-engine.so") >= n)
		return ENAMETOOLONG;
	return 0;
}

/* A second copy of the file at path, for a child whose inherited copy is
 * dead: a memfd with the same bytes, opened through /proc/self/fd. */
static void *open_copy(const char *path, char *why, size_t n)
{
	char fdpath[64];
	struct stat st;
	void *h = NULL;
	int src, dst;
	off_t off = 0;

	src = open(path, O_RDONLY | O_CLOEXEC);
	if (src < 0) {
		snprintf(why, n, "%s: %s", path, strerror(errno));
		return NULL;
	}
	dst = memfd_create("libgoroce-engine.so", MFD_CLOEXEC);
	if (dst < 0 || fstat(src, &st) < 0) {
		snprintf(why, n, "memfd_create: %s", strerror(errno));
		goto out;
	}
	while (off < st.st_size) {
		ssize_t k = sendfile(dst, src, &off, st.st_size - off);

		if (k <= 0) {
			snprintf(why, n, "copying %s: %s", path, k < 0 ? strerror(errno) : "short file");
			goto out;
		}
	}
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", dst);
	h = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		snprintf(why, n, "%s", dlerror());
out:
	/* The mapping keeps the memfd's pages: the fd itself is not needed. */
	if (dst >= 0)
		close(dst);
	close(src);
	return h;
}

static const struct gq_callbacks callbacks = {
	.abi = GQ_ENGINE_ABI,
	.channel_push = gq_channel_push,
	.cm_child = gq_cm_child,
	.cm_set_addr = gq_cm_set_addr,
	.cm_set_dev = gq_cm_set_dev,
};

/* gq_engine_load makes the goroce_* pointers point into a running
 * engine: 0, or an errno (ENODEV when the engine cannot be loaded: the
 * library then has no devices). */
int gq_engine_load(void)
{
	char path[PATH_MAX], why[PATH_MAX + 128];
	gq_engine_attach_fn attach;
	void *h;
	int rc;

	pthread_once(&atfork_once, register_atfork);
	pthread_mutex_lock(&engine_mu);
	switch (engine_state) {
	case ENGINE_READY:
		pthread_mutex_unlock(&engine_mu);
		return 0;
	case ENGINE_FAILED:
		rc = engine_err;
		pthread_mutex_unlock(&engine_mu);
		return rc;
	}
	rc = engine_path(path, sizeof(path));
	if (rc) {
		snprintf(why, sizeof(why), "finding libgoroce-engine.so: %s", strerror(rc));
		goto fail;
	}
	if (engine_state == ENGINE_DEAD) {
		h = open_copy(path, why, sizeof(why));
	} else {
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h)
			snprintf(why, sizeof(why), "%s", dlerror());
	}
	if (!h)
		goto fail;
	attach = (gq_engine_attach_fn)dlsym(h, GQ_ENGINE_ATTACH);
	if (!attach || attach(&callbacks) != 0) {
		snprintf(why, sizeof(why), "%s: not an engine of this libgoroce.so (%s)", path,
			 attach ? "another ABI" : "no " GQ_ENGINE_ATTACH);
		goto fail;
	}
	if (gq_engine_bind(h, why, sizeof(why)) != 0)
		goto fail;
	engine_state = ENGINE_READY;
	pthread_mutex_unlock(&engine_mu);
	return 0;
fail:
	fprintf(stderr, "libgoroce: %s\n", why);
	engine_state = ENGINE_FAILED;
	engine_err = ENODEV;
	pthread_mutex_unlock(&engine_mu);
	return ENODEV;
}

/*
 * fork() support as libibverbs defines it (ibv_fork_init(3)). Its
 * purpose there is memory a NIC writes by DMA: after fork() the parent's
 * registered pages are copy-on-write, a write by the parent moves it to
 * a new page, and the NIC keeps writing the old one, now the child's;
 * ibv_fork_init marks registered ranges MADV_DONTFORK to prevent it. No
 * device writes goroce's registered memory: the engine reads and writes
 * it through the process's own mappings, so after fork() each process's
 * engine works on that process's pages, as the kernel's copy-on-fork of
 * DMA pages gives. That is IBV_FORK_UNNEEDED, which the man page says
 * takes precedence whether or not ibv_fork_init was called; and no range
 * is marked MADV_DONTFORK, which would leave a child without the memory
 * it inherited. RDMAV_FORK_SAFE and IBV_FORK_SAFE (libibverbs calls
 * ibv_fork_init at its initialisation when either is set) change nothing
 * for the same reason.
 */
EXPORT int ibv_fork_init(void)
{
	return 0;
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
