/*
 * qperf-shim.so: preloaded into the lab guest's qperf processes (its
 * server and its clients), to take two races out of Debian's qperf 0.4.11.
 * Every program on the host side runs unmodified.
 *
 * 1. Listen before telling the client where. Its server child binds an
 *    RDMA CM id to port 0, sends the client the port it got
 *    (rdma_get_src_port), and only then calls rdma_listen. Upstream qperf
 *    listens first. A client that is quick (the host's, over libgoroce.so)
 *    reaches the emulated guest's CM before the listen, and the kernel
 *    answers its REQ with REJ reason 8 (invalid service ID), as it would
 *    to any client, rxe's own included. Here a successful rdma_bind_addr
 *    listens at once (qperf's server binds only the id it listens on), and
 *    the program's own rdma_listen of that id later is a success that does
 *    nothing: the order upstream qperf has, nothing else changed.
 *
 * 2. Exit once. qperf calls exit() from its SIGURG handler (support.c's
 *    urgent_error, when the other side reports an error). When both sides
 *    fail at once (a refused UD test), the signal can land while the
 *    program is already in exit() on its own error path, holding glibc's
 *    __exit_funcs_lock; the handler's exit() then waits on that lock for
 *    ever (seen in the guest: one thread, SIGURG blocked, in
 *    __lll_lock_wait_private on __exit_funcs_lock). Here a second exit()
 *    while one is under way ends the process at once (_exit) with the
 *    status it asks for: what the program meant, without the hang.
 *
 * No header of rdma-core: the ids are opaque here, and the lab host needs
 * only a C compiler (the one cgo uses) to build it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

struct rdma_cm_id;
struct sockaddr;

typedef int (*bind_fn)(struct rdma_cm_id *, struct sockaddr *);
typedef int (*listen_fn)(struct rdma_cm_id *, int);

/* The ids already listening: qperf's server child has one at a time. */
#define MAX_EARLY 16
static struct rdma_cm_id *early[MAX_EARLY];
static pthread_mutex_t early_mu = PTHREAD_MUTEX_INITIALIZER;

static void *real(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (f == NULL)
		errno = ENOSYS;
	return f;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	bind_fn bind = (bind_fn)real("rdma_bind_addr");
	listen_fn listen = (listen_fn)real("rdma_listen");
	int i, ret;

	if (bind == NULL || listen == NULL)
		return -1;
	ret = bind(id, addr);
	if (ret != 0)
		return ret;
	/* Backlog 0: the CM's default, as qperf's own call would get. */
	if (listen(id, 0) != 0)
		return 0; /* qperf's own rdma_listen will report it */
	pthread_mutex_lock(&early_mu);
	for (i = 0; i < MAX_EARLY; i++) {
		if (early[i] == NULL) {
			early[i] = id;
			break;
		}
	}
	pthread_mutex_unlock(&early_mu);
	return 0;
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	listen_fn listen = (listen_fn)real("rdma_listen");
	int i;

	pthread_mutex_lock(&early_mu);
	for (i = 0; i < MAX_EARLY; i++) {
		if (early[i] == id) {
			early[i] = NULL;
			pthread_mutex_unlock(&early_mu);
			return 0;
		}
	}
	pthread_mutex_unlock(&early_mu);
	if (listen == NULL)
		return -1;
	return listen(id, backlog);
}

static volatile sig_atomic_t exiting;

void exit(int status)
{
	void (*real_exit)(int);

	if (exiting)
		_exit(status); /* the exit under way may hold glibc's lock */
	exiting = 1;
	real_exit = (void (*)(int))dlsym(RTLD_NEXT, "exit");
	if (real_exit == NULL)
		_exit(status);
	real_exit(status);
	_exit(status); /* not reached: exit does not return */
}
