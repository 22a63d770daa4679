/*
 * qperf-shim.so: preloaded into the lab guest's qperf server only,
 * so that Debian's qperf 0.4.11 listens before it tells the client where.
 *
 * Its server child binds an RDMA CM id to port 0, sends the client the
 * port it got (rdma_get_src_port), and only then calls rdma_listen.
 * Upstream qperf listens first. A client that is quick (the host's, over
 * libgoroce.so) reaches the emulated guest's CM before the listen, and the
 * kernel answers its REQ with REJ reason 8 (invalid service ID), as it
 * would to any client, rxe's own included. Here a successful
 * rdma_bind_addr listens at once (qperf's server binds only the id it
 * listens on), and the program's own rdma_listen of that id later is a
 * success that does nothing: the order upstream qperf has, nothing else
 * changed. The interop stage preloads it into the guest's server alone;
 * every program on the host side runs unmodified.
 *
 * No header: the ids are opaque here, and the lab host needs only a C
 * compiler (the one cgo uses) to build it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

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
