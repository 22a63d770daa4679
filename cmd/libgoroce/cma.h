/*
 * cma.h: librdmacm's objects as libgoroce hands them to programs, and the
 * flat records cma.c and cma.go pass each other (as shim.h for the
 * verbs). An rdma_cm_id is the start of a malloc'ed gq_cm_id whose h
 * names the Go object; a channel's fd is an eventfd counting its events.
 */
#ifndef GOROCE_CMA_H
#define GOROCE_CMA_H

#include <rdma/rdma_cma.h>
#include "shim.h"

struct gq_cm_channel {
	struct rdma_event_channel ch;
	uintptr_t h;
};

struct gq_cm_id {
	struct rdma_cm_id id;
	uintptr_t h;
	/* sync: created without a channel (rdma_create_ep, rdma_create_id
	 * with NULL): the id has a channel of its own and each call waits
	 * for its event, as librdmacm's synchronous ids. */
	int sync;
	/* A passive endpoint's QP attributes (rdma_create_ep), for the QP
	 * rdma_get_request makes on each request's id. */
	struct ibv_qp_init_attr *qp_init;
	/* What rdma_create_qp made for the id and rdma_destroy_qp frees. */
	unsigned own;
};

/* An event as rdma_get_cm_event hands it over, with room for its
 * private data (param.conn/ud.private_data points at priv). */
struct gq_cm_event {
	struct rdma_cm_event ev;
	uint8_t priv[256];
};

/* An address and port, flattened from a sockaddr: IPv4 as IPv4-mapped
 * IPv6, port in host order; family 0: none given. */
struct gq_sa {
	uint8_t addr[16];
	uint16_t port, family;
};

/* rdma_conn_param, flattened; given is 0 for a NULL conn_param. */
struct gq_conn {
	const void *priv;
	uint32_t priv_len, qp_num, given;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
};

/* One event, flattened. A UD event (ud set) carries the peer's QPN,
 * Q_Key and address vector. */
struct gq_cm_ev {
	struct rdma_cm_id *id, *listen_id;
	int32_t event, status;
	uint8_t priv[256];
	uint32_t priv_len, qp_num, qkey, ud;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
	struct gq_ah_attr ah;
};

/* Called from Go: a new cm_id for a connection request to listen, on
 * device dev (NULL when out of memory); the addresses and the device of
 * an id. */
struct rdma_cm_id *gq_cm_child(struct rdma_cm_id *listen, int dev);
void gq_cm_set_addr(struct rdma_cm_id *id, int dst, const struct gq_sa *a);
void gq_cm_set_dev(struct rdma_cm_id *id, int dev);

#endif
