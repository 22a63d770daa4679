//go:build goroce_engine

/*
 * engine.c: the C side of libgoroce-engine.so (built with the
 * goroce_engine tag, which leaves out verbs.c and cma.c: the entry points
 * live in libgoroce.so, which loads this library at its first call that
 * needs the engine). The Go side calls gq_channel_push and the gq_cm_*
 * functions as it does in a single library; here they reach the front's
 * through the pointers goroce_engine_attach was given.
 */
#include "engine.h"

static struct gq_callbacks cb;

__attribute__((visibility("default"))) int goroce_engine_attach(const struct gq_callbacks *c)
{
	if (!c || c->abi != GQ_ENGINE_ABI)
		return -1;
	cb = *c;
	return 0;
}

void gq_channel_push(struct gq_channel *c, struct ibv_cq *cq)
{
	cb.channel_push(c, cq);
}

struct rdma_cm_id *gq_cm_child(struct rdma_cm_id *listen, int dev)
{
	return cb.cm_child(listen, dev);
}

void gq_cm_set_addr(struct rdma_cm_id *id, int dst, const struct gq_sa *a)
{
	cb.cm_set_addr(id, dst, a);
}

void gq_cm_set_dev(struct rdma_cm_id *id, int dev)
{
	cb.cm_set_dev(id, dev);
}
