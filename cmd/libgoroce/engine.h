/*
 * engine.h: what libgoroce.so (front.c, plain C) and the Go engine
 * (libgoroce-engine.so, the goroce_* functions) hand each other when the
 * front loads the engine. The engine's C callbacks into the front are
 * function pointers: the engine is dlopen'ed RTLD_LOCAL (and, in a child
 * forked after the engine ran, loaded a second time), so it cannot bind
 * the front's symbols by name.
 */
#ifndef GOROCE_ENGINE_H
#define GOROCE_ENGINE_H

#include "cma.h"

/* GQ_ENGINE_ABI changes whenever struct gq_callbacks or a record of
 * shim.h/cma.h does: a front and an engine of different builds refuse
 * each other rather than misread each other's memory. */
#define GQ_ENGINE_ABI 2

struct gq_callbacks {
	unsigned abi; /* GQ_ENGINE_ABI */
	void (*channel_push)(struct gq_channel *c, struct ibv_cq *cq);
	struct rdma_cm_id *(*cm_child)(struct rdma_cm_id *listen, int dev);
	void (*cm_set_addr)(struct rdma_cm_id *id, int dst, const struct gq_sa *a);
	void (*cm_set_dev)(struct rdma_cm_id *id, int dev);
};

/* The engine's one C entry point besides the goroce_* functions: takes
 * the front's callbacks; 0, or -1 when abi is not the engine's. */
typedef int (*gq_engine_attach_fn)(const struct gq_callbacks *cb);
#define GQ_ENGINE_ATTACH "goroce_engine_attach"

#endif
