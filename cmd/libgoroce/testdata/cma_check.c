/*
 * cma_check.c: librdmacm's calls through libgoroce.so, in one process
 * with two devices (goroce0 on the first address, goroce1 on the
 * second), every event awaited with poll() on the channel's fd:
 *
 *   - an RC connection from goroce1 to a listener on goroce0, the QPs
 *     made by rdma_create_qp with no CQs (the library makes them, with
 *     completion channels, as librdmacm does) and a SEND each way with
 *     rdma_post_send's inline data (lkey 0) and rdma_get_*_comp;
 *   - rdma_init_qp_attr: INIT before any connection (no remote access)
 *     and on a request asking for responder resources (WRITE, READ,
 *     ATOMIC), RTR and RTS refused (EINVAL) before the REQ, given for a
 *     request before it is accepted (the same as the connection's after)
 *     and, after, the connection's path: each side's remote QPN is the
 *     other's QP and each side's send PSN the other's receive PSN;
 *   - rdma_establish on an id with a QP (EINVAL), rdma_get_request on an
 *     id with a channel (EINVAL);
 *   - an external QP's connection, both sides (ids with no QP, as
 *     rdma-core's test_rdmacm_async_traffic_external_qp): each side makes
 *     its QP with ibv_create_qp on id->pd and moves it by
 *     rdma_init_qp_attr, the passive side before rdma_accept, the active
 *     side after RDMA_CM_EVENT_CONNECT_RESPONSE (the REP's private data,
 *     the passive side not established yet), then rdma_establish; a SEND
 *     each way through the programs' QPs and CQs, and the disconnection
 *     leaves the QPs in RTS (the CM moves only an id's own QP);
 *   - address errors: a destination routed over an interface no device
 *     is on is RDMA_CM_EVENT_ADDR_ERROR with status -ENODEV, one with no
 *     route fails at once with ENETUNREACH;
 *   - synchronous ids (rdma_create_ep): the same errors as the call's
 *     errno, and rdma_connect to a port nobody listens on ECONNREFUSED.
 *
 * usage: cma_check ADDR0 ADDR1 OFFDEV_DST UNROUTABLE_DST PORT
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "check.h"

static const char *prog = "cma_check";

/* next waits (20 s at most) for the channel's next event. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, const char *what)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *e;

	CHECK(poll(&p, 1, 20000) == 1, "no event within 20 s waiting for %s", what);
	CHECK(!rdma_get_cm_event(ch, &e), "rdma_get_cm_event: %s", strerror(errno));
	return e;
}

/* expect waits for the next event and checks its type, id and status. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
				    struct rdma_cm_id *id, int status)
{
	struct rdma_cm_event *e = next(ch, rdma_event_str(type));

	CHECK(e->event == type, "got %s (status %d), want %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(type));
	CHECK(!id || e->id == id, "%s for another id", rdma_event_str(type));
	CHECK(e->status == status, "%s status %d, want %d", rdma_event_str(type), e->status, status);
	return e;
}

static void sockaddr_of(const char *addr, int port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;

	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (strchr(addr, ':')) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		CHECK(inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1, "bad address %s", addr);
		return;
	}
	in->sin_family = AF_INET;
	in->sin_port = htons(port);
	CHECK(inet_pton(AF_INET, addr, &in->sin_addr) == 1, "bad address %s", addr);
}

#define INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define RTR_MASK                                                                                   \
	(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |            \
	 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RTS_MASK                                                                                   \
	(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |      \
	 IBV_QP_MAX_QP_RD_ATOMIC)

static void qp_attr(struct rdma_cm_id *id, enum ibv_qp_state state, struct ibv_qp_attr *a, int want_mask)
{
	int mask = 0;

	memset(a, 0xa5, sizeof(*a)); /* whatever the program left there */
	a->qp_state = state;
	CHECK(!rdma_init_qp_attr(id, a, &mask), "rdma_init_qp_attr(%d): %s", state, strerror(errno));
	CHECK(mask == want_mask, "rdma_init_qp_attr(%d): mask %#x, want %#x", state, mask, want_mask);
	CHECK(a->qp_state == state, "rdma_init_qp_attr: state %d, want %d", a->qp_state, state);
}

static void refused_attr(struct rdma_cm_id *id, enum ibv_qp_state state, const char *when)
{
	struct ibv_qp_attr a = {.qp_state = state};
	int mask;

	CHECK(rdma_init_qp_attr(id, &a, &mask) == -1 && errno == EINVAL,
	      "rdma_init_qp_attr(%d) %s: want EINVAL, got %s", state, when, strerror(errno));
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = {0};

	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = 64;
	qa.sq_sig_all = 1;
	CHECK(!rdma_create_qp(id, NULL, &qa), "rdma_create_qp: %s", strerror(errno));
	CHECK(id->qp && id->pd && id->send_cq && id->recv_cq && id->send_cq_channel && id->recv_cq_channel,
	      "rdma_create_qp with no CQs: the id lacks its QP, PD, CQs or channels");
	CHECK(qa.send_cq == id->send_cq && qa.recv_cq == id->recv_cq, "the attributes do not name the CQs made");
}

/* send_one SENDs msg inline from a to b (b's receive posted first). */
static void send_one(struct rdma_cm_id *a, struct rdma_cm_id *b, const char *msg)
{
	char buf[64] = {0};
	struct ibv_mr *mr = rdma_reg_msgs(b, buf, sizeof(buf));
	struct ibv_wc wc;
	char out[64];

	CHECK(mr, "rdma_reg_msgs: %s", strerror(errno));
	CHECK(!rdma_post_recv(b, NULL, buf, sizeof(buf), mr), "rdma_post_recv: %s", strerror(errno));
	snprintf(out, sizeof(out), "%s", msg);
	CHECK(!rdma_post_send(a, NULL, out, strlen(out) + 1, NULL, IBV_SEND_INLINE), "rdma_post_send: %s",
	      strerror(errno));
	CHECK(rdma_get_send_comp(a, &wc) > 0 && wc.status == IBV_WC_SUCCESS, "send completion: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(rdma_get_recv_comp(b, &wc) > 0 && wc.status == IBV_WC_SUCCESS, "receive completion: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(wc.byte_len == strlen(msg) + 1 && !strcmp(buf, msg), "received %u bytes \"%s\", want \"%s\"",
	      wc.byte_len, buf, msg);
	rdma_dereg_mr(mr);
}

/* loopback: as the kernel's rdma_cm takes it on a host whose RDMA device
 * is not on the loopback interface (seen on rxe, kernels 6.1 and 6.12), a
 * bind to addr (127.0.0.1 or ::1) succeeds with no device, showing the
 * address given, and the id listens as a wildcard one would. goroce then
 * goes further than rxe, whose rdma_resolve_route fails with ENODEV: a
 * connection to addr reaches the device's own listener
 * (cma_resolve_loopback's intent), and a SEND crosses it. */
static void loopback(struct rdma_event_channel *ch, const char *addr, int port)
{
	struct sockaddr_storage lo;
	struct sockaddr *la;
	struct rdma_cm_id *ll, *lc, *ls;
	struct rdma_conn_param cp = {0};
	struct rdma_cm_event *e;
	struct ibv_device_attr da;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	size_t alen;
	int est;

	sockaddr_of(addr, port, &lo);
	alen = lo.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	CHECK(!rdma_create_id(ch, &ll, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_bind_addr(ll, (struct sockaddr *)&lo), "rdma_bind_addr(%s): %s", addr, strerror(errno));
	la = rdma_get_local_addr(ll);
	CHECK(!ll->verbs && !memcmp(la, &lo, alen), "bound to %s: device %p (want none), or another address shown",
	      addr, (void *)ll->verbs);
	CHECK(!ll->pd, "bound to %s with no device: id->pd %p", addr, (void *)ll->pd);
	CHECK(!rdma_listen(ll, 0), "rdma_listen on %s: %s", addr, strerror(errno));
	CHECK(!rdma_create_id(ch, &lc, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_resolve_addr(lc, NULL, (struct sockaddr *)&lo, 2000), "rdma_resolve_addr(%s): %s", addr,
	      strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, lc, 0));
	CHECK(lc->verbs, "resolving %s chose no device", addr);
	/* librdmacm gives an id with a device the device's PD (rdma-core's
	 * tests make their QPs and AHs on cmid.pd). */
	CHECK(lc->pd && lc->pd->context == lc->verbs, "resolved %s: id->pd %p, not the device's PD", addr,
	      (void *)lc->pd);
	CHECK(!memcmp(rdma_get_peer_addr(lc), &lo, alen), "resolved %s: another destination shown", addr);
	CHECK(!rdma_resolve_route(lc, 2000), "rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, lc, 0));
	make_qp(lc);
	/* Depths past the device's are refused, as librdmacm's
	 * ucma_valid_param refuses them; RDMA_MAX_RESP_RES and
	 * RDMA_MAX_INIT_DEPTH (libfabric's verbs provider passes them) are
	 * the device's maximum, each side's. */
	CHECK(!ibv_query_device(lc->verbs, &da), "ibv_query_device: %s", strerror(errno));
	cp.retry_count = cp.rnr_retry_count = 7;
	cp.responder_resources = cp.initiator_depth = da.max_qp_rd_atom + 1;
	CHECK(rdma_connect(lc, &cp) == -1 && errno == EINVAL, "rdma_connect with depths %d past the device's: %s",
	      da.max_qp_rd_atom + 1, strerror(errno));
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	CHECK(!rdma_connect(lc, &cp), "rdma_connect to %s: %s", addr, strerror(errno));
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, 0);
	ls = e->id;
	CHECK(ls->verbs == lc->verbs && ls->pd == lc->pd, "a request's id: device %p, PD %p, not the device's (%p, %p)",
	      (void *)ls->verbs, (void *)ls->pd, (void *)lc->verbs, (void *)lc->pd);
	rdma_ack_cm_event(e);
	make_qp(ls);
	CHECK(!rdma_accept(ls, &cp), "rdma_accept over %s: %s", addr, strerror(errno));
	for (est = 0; est < 2; est++) {
		e = next(ch, "ESTABLISHED over loopback");
		CHECK(e->event == RDMA_CM_EVENT_ESTABLISHED && (e->id == lc || e->id == ls),
		      "got %s (status %d) waiting for ESTABLISHED over %s", rdma_event_str(e->event), e->status, addr);
		rdma_ack_cm_event(e);
	}
	CHECK(!ibv_query_qp(lc->qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &qi) &&
		      qa.max_rd_atomic == da.max_qp_init_rd_atom && qa.max_dest_rd_atomic == da.max_qp_rd_atom,
	      "RDMA_MAX_INIT_DEPTH and RDMA_MAX_RESP_RES gave depths %d and %d, want the device's %d and %d",
	      qa.max_rd_atomic, qa.max_dest_rd_atomic, da.max_qp_init_rd_atom, da.max_qp_rd_atom);
	send_one(lc, ls, "ping over loopback");
	CHECK(!rdma_disconnect(lc), "rdma_disconnect: %s", strerror(errno));
	for (est = 0; est < 2; est++) {
		e = next(ch, "DISCONNECTED over loopback");
		CHECK(e->event == RDMA_CM_EVENT_DISCONNECTED, "got %s waiting for DISCONNECTED",
		      rdma_event_str(e->event));
		rdma_ack_cm_event(e);
	}
	rdma_destroy_qp(lc);
	rdma_destroy_qp(ls);
	rdma_destroy_id(lc);
	rdma_destroy_id(ls);
	rdma_destroy_id(ll);
}

/* An external QP: one the program makes with ibv_create_qp on id->pd,
 * with a CQ of its own, and moves itself. */
struct ext {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[64];
};

static void ext_make(struct rdma_cm_id *id, struct ext *x)
{
	struct ibv_qp_init_attr qa = {0};

	CHECK(id->pd, "no id->pd for the external QP");
	x->cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	CHECK(x->cq, "ibv_create_cq: %s", strerror(errno));
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = qa.recv_cq = x->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.sq_sig_all = 1;
	x->qp = ibv_create_qp(id->pd, &qa);
	CHECK(x->qp, "ibv_create_qp: %s", strerror(errno));
	x->mr = ibv_reg_mr(id->pd, x->buf, sizeof(x->buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(x->mr, "ibv_reg_mr: %s", strerror(errno));
}

/* ext_rts moves x's QP to RTS by rdma_init_qp_attr, as rdma-core's
 * modify_ext_qp_to_rts. */
static void ext_rts(struct rdma_cm_id *id, struct ext *x)
{
	static const enum ibv_qp_state states[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};
	static const int masks[] = {INIT_MASK, RTR_MASK, RTS_MASK};
	struct ibv_qp_attr a;
	int i;

	for (i = 0; i < 3; i++) {
		qp_attr(id, states[i], &a, masks[i]);
		CHECK(!ibv_modify_qp(x->qp, &a, masks[i]), "ibv_modify_qp to %d by rdma_init_qp_attr: %s", states[i],
		      strerror(errno));
	}
}

static enum ibv_qp_state ext_state(struct ext *x)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(!ibv_query_qp(x->qp, &a, IBV_QP_STATE, &ia), "ibv_query_qp: %s", strerror(errno));
	return a.qp_state;
}

static void ext_poll(struct ext *x, const char *what)
{
	struct ibv_wc wc;
	int i, n = 0;

	for (i = 0; i < 2000000 && !n; i++)
		n = ibv_poll_cq(x->cq, 1, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "%s: %d completions, status %s", what, n,
	      n == 1 ? ibv_wc_status_str(wc.status) : "-");
}

/* ext_send SENDs msg from a's QP to b's (b's receive posted first). */
static void ext_send(struct ext *a, struct ext *b, const char *msg)
{
	struct ibv_sge rs = {.addr = (uintptr_t)b->buf, .length = sizeof(b->buf), .lkey = b->mr->lkey};
	struct ibv_sge ss = {.addr = (uintptr_t)a->buf, .length = strlen(msg) + 1, .lkey = a->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad_s;

	memset(b->buf, 0, sizeof(b->buf));
	snprintf(a->buf, sizeof(a->buf), "%s", msg);
	CHECK(!ibv_post_recv(b->qp, &rw, &bad_r), "ibv_post_recv: %s", strerror(errno));
	CHECK(!ibv_post_send(a->qp, &sw, &bad_s), "ibv_post_send: %s", strerror(errno));
	ext_poll(a, "send completion");
	ext_poll(b, "receive completion");
	CHECK(!strcmp(b->buf, msg), "received \"%s\", want \"%s\"", b->buf, msg);
}

static void ext_free(struct ext *x)
{
	ibv_dereg_mr(x->mr);
	ibv_destroy_qp(x->qp);
	ibv_destroy_cq(x->cq);
}

/* external connects a QP of the program's each side: ids with no QP,
 * conn_param->qp_num naming the programs' QPs. */
static void external(struct rdma_event_channel *ch, struct sockaddr_storage *a0, struct sockaddr_storage *a1,
		     int port)
{
	struct sockaddr_storage l = *a0;
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_conn_param cp = {0}, sp = {0};
	struct rdma_cm_event *e;
	struct ext c, s;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int i;

	if (l.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&l)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)&l)->sin_port = htons(port);
	CHECK(!rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_bind_addr(lid, (struct sockaddr *)&l), "rdma_bind_addr: %s", strerror(errno));
	CHECK(!rdma_listen(lid, 0), "rdma_listen: %s", strerror(errno));
	CHECK(!rdma_create_id(ch, &cid, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_resolve_addr(cid, (struct sockaddr *)a1, (struct sockaddr *)&l, 2000), "rdma_resolve_addr: %s",
	      strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, cid, 0));
	CHECK(!rdma_resolve_route(cid, 2000), "rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, cid, 0));
	ext_make(cid, &c);
	cp.qp_num = c.qp->qp_num;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = cp.rnr_retry_count = 7;
	CHECK(!rdma_connect(cid, &cp), "rdma_connect with an external QP: %s", strerror(errno));
	refused_attr(cid, IBV_QPS_RTR, "before the REP");

	/* The passive side moves its QP before it accepts. */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, 0);
	sid = e->id;
	rdma_ack_cm_event(e);
	ext_make(sid, &s);
	ext_rts(sid, &s);
	sp = cp;
	sp.qp_num = s.qp->qp_num;
	sp.private_data = "external rep";
	sp.private_data_len = sizeof("external rep");
	CHECK(!rdma_accept(sid, &sp), "rdma_accept with an external QP: %s", strerror(errno));

	/* The active side: CONNECT_RESPONSE, no RTU yet. */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, cid, 0);
	CHECK(e->param.conn.private_data && !strcmp(e->param.conn.private_data, "external rep"),
	      "CONNECT_RESPONSE without the REP's private data");
	rdma_ack_cm_event(e);
	CHECK(poll(&p, 1, 200) == 0, "an event before rdma_establish sent the RTU");
	CHECK(ext_state(&c) == IBV_QPS_RESET, "the CM moved the active side's external QP");
	ext_rts(cid, &c);
	CHECK(!rdma_establish(cid), "rdma_establish: %s", strerror(errno));
	CHECK(rdma_establish(cid) == -1 && errno == EINVAL, "a second rdma_establish: want EINVAL, got %s",
	      strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED, sid, 0));

	ext_send(&c, &s, "ping through the programs' QPs");
	ext_send(&s, &c, "pong");

	CHECK(!rdma_disconnect(cid), "rdma_disconnect: %s", strerror(errno));
	for (i = 0; i < 2; i++) {
		e = next(ch, "DISCONNECTED");
		CHECK(e->event == RDMA_CM_EVENT_DISCONNECTED && (e->id == cid || e->id == sid),
		      "got %s waiting for DISCONNECTED", rdma_event_str(e->event));
		rdma_ack_cm_event(e);
	}
	CHECK(ext_state(&c) == IBV_QPS_RTS && ext_state(&s) == IBV_QPS_RTS,
	      "after the disconnection the external QPs are in %d and %d: the CM moved them", ext_state(&c),
	      ext_state(&s));
	rdma_destroy_id(cid);
	rdma_destroy_id(sid);
	rdma_destroy_id(lid);
	ext_free(&c);
	ext_free(&s);
}

int main(int argc, char **argv)
{
	struct sockaddr_storage a0, a1, off, unroutable;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *cid, *sid = NULL, *eid, *x;
	struct rdma_conn_param cp = {0};
	struct rdma_cm_event *e;
	struct ibv_qp_attr c_rtr, c_rts, s_rtr, s_rts, pre_rtr, a;
	struct rdma_addrinfo hints = {0}, *res;
	char portstr[16];
	int port, est = 0;

	if (argc == 3 && !strcmp(argv[1], "loopback")) {
		/* Run with the device off the loopback interface. */
		ch = rdma_create_event_channel();
		CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
		loopback(ch, "127.0.0.1", atoi(argv[2]));
		loopback(ch, "::1", atoi(argv[2]) + 1);
		rdma_destroy_event_channel(ch);
		printf("cma_check: ok\n");
		return 0;
	}
	CHECK(argc == 6, "usage: cma_check ADDR0 ADDR1 OFFDEV_DST UNROUTABLE_DST PORT | loopback PORT");
	port = atoi(argv[5]);
	sockaddr_of(argv[1], port, &a0);
	sockaddr_of(argv[2], 0, &a1);
	sockaddr_of(argv[3], port, &off);
	sockaddr_of(argv[4], port, &unroutable);
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));

	/* A listener on goroce0. */
	CHECK(!rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_bind_addr(lid, (struct sockaddr *)&a0), "rdma_bind_addr: %s", strerror(errno));
	CHECK(!rdma_listen(lid, 0), "rdma_listen: %s", strerror(errno));
	CHECK(rdma_get_request(lid, &x) == -1 && errno == EINVAL,
	      "rdma_get_request on an id with a channel: want EINVAL, got %s", strerror(errno));

	/* The client on goroce1: INIT with no remote access before any
	 * connection; RTR and RTS refused. */
	CHECK(!rdma_create_id(ch, &cid, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_resolve_addr(cid, (struct sockaddr *)&a1, (struct sockaddr *)&a0, 2000),
	      "rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, cid, 0));
	qp_attr(cid, IBV_QPS_INIT, &a, INIT_MASK);
	CHECK(a.qp_access_flags == 0 && a.port_num == 1 && a.pkey_index == 0,
	      "INIT before a connection: access %#x port %d pkey index %d", a.qp_access_flags, a.port_num,
	      a.pkey_index);
	refused_attr(cid, IBV_QPS_RTR, "before a connection");
	refused_attr(cid, IBV_QPS_RTS, "before a connection");
	CHECK(!rdma_resolve_route(cid, 2000), "rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, cid, 0));
	make_qp(cid);
	CHECK(rdma_establish(cid) == -1 && errno == EINVAL, "rdma_establish with the CM's QP: want EINVAL, got %s",
	      strerror(errno));
	cp.responder_resources = cp.initiator_depth = 1;
	/* Beyond the 3 bits the REQ has: the kernel's rdma_cm takes 7 for
	 * them (cma_connect_ib, cma_accept_ib), checked in RTS below. */
	cp.retry_count = 10;
	cp.rnr_retry_count = 255;
	CHECK(!rdma_connect(cid, &cp), "rdma_connect: %s", strerror(errno));

	/* The request: INIT grants WRITE, READ and ATOMIC (responder
	 * resources asked); RTR given already, as the kernel's rdma_cm
	 * gives it for a request (towards the requester's QP). */
	e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, 0);
	sid = e->id;
	CHECK(e->listen_id == lid, "CONNECT_REQUEST: listen_id is not the listener");
	CHECK(e->param.conn.responder_resources == 1 && e->param.conn.initiator_depth == 1,
	      "CONNECT_REQUEST: responder resources %d, initiator depth %d", e->param.conn.responder_resources,
	      e->param.conn.initiator_depth);
	rdma_ack_cm_event(e);
	qp_attr(sid, IBV_QPS_INIT, &a, INIT_MASK);
	CHECK(a.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC),
	      "INIT of a request with responder resources: access %#x", a.qp_access_flags);
	qp_attr(sid, IBV_QPS_RTR, &pre_rtr, RTR_MASK);
	make_qp(sid);
	CHECK(!rdma_accept(sid, &cp), "rdma_accept: %s", strerror(errno));
	while (est < 2) {
		e = next(ch, "ESTABLISHED");
		CHECK(e->event == RDMA_CM_EVENT_ESTABLISHED && (e->id == cid || e->id == sid),
		      "got %s (status %d) waiting for ESTABLISHED", rdma_event_str(e->event), e->status);
		est++;
		rdma_ack_cm_event(e);
	}

	/* The connection's attributes: each side's remote QPN is the other's
	 * QP, its send PSN the other's receive PSN. */
	qp_attr(cid, IBV_QPS_RTR, &c_rtr, RTR_MASK);
	qp_attr(cid, IBV_QPS_RTS, &c_rts, RTS_MASK);
	qp_attr(sid, IBV_QPS_RTR, &s_rtr, RTR_MASK);
	qp_attr(sid, IBV_QPS_RTS, &s_rts, RTS_MASK);
	CHECK(c_rtr.dest_qp_num == sid->qp->qp_num && s_rtr.dest_qp_num == cid->qp->qp_num,
	      "remote QPNs %#x/%#x, want %#x/%#x", c_rtr.dest_qp_num, s_rtr.dest_qp_num, sid->qp->qp_num,
	      cid->qp->qp_num);
	CHECK(c_rts.sq_psn == s_rtr.rq_psn && s_rts.sq_psn == c_rtr.rq_psn, "PSNs: %#x->%#x, %#x->%#x",
	      c_rts.sq_psn, s_rtr.rq_psn, s_rts.sq_psn, c_rtr.rq_psn);
	CHECK(c_rtr.path_mtu == s_rtr.path_mtu && c_rtr.path_mtu >= IBV_MTU_256, "path MTUs %d and %d",
	      c_rtr.path_mtu, s_rtr.path_mtu);
	CHECK(c_rtr.ah_attr.is_global && !memcmp(&c_rtr.ah_attr.grh.dgid.raw[12],
						 &((struct sockaddr_in *)&a0)->sin_addr, 4),
	      "the client's path does not lead to %s", argv[1]);
	CHECK(c_rts.max_rd_atomic == 1 && s_rtr.max_dest_rd_atomic == 1,
	      "RDMA READ depths %d (initiator) and %d (responder), want 1 and 1", c_rts.max_rd_atomic,
	      s_rtr.max_dest_rd_atomic);
	CHECK(c_rts.retry_cnt == 7 && c_rts.rnr_retry == 7, "retry counts %d and %d, want 7 and 7",
	      c_rts.retry_cnt, c_rts.rnr_retry);
	CHECK(pre_rtr.dest_qp_num == s_rtr.dest_qp_num && pre_rtr.rq_psn == s_rtr.rq_psn &&
		      pre_rtr.path_mtu == s_rtr.path_mtu,
	      "the request's RTR (QPN %#x, PSN %#x, MTU %d) is not the connection's (%#x, %#x, %d)",
	      pre_rtr.dest_qp_num, pre_rtr.rq_psn, pre_rtr.path_mtu, s_rtr.dest_qp_num, s_rtr.rq_psn, s_rtr.path_mtu);
	send_one(cid, sid, "ping through the CM's CQs");
	send_one(sid, cid, "pong");

	CHECK(!rdma_disconnect(cid), "rdma_disconnect: %s", strerror(errno));
	for (est = 0; est < 2; est++) {
		e = next(ch, "DISCONNECTED");
		CHECK(e->event == RDMA_CM_EVENT_DISCONNECTED && (e->id == cid || e->id == sid),
		      "got %s waiting for DISCONNECTED", rdma_event_str(e->event));
		rdma_ack_cm_event(e);
	}
	rdma_destroy_qp(cid);
	rdma_destroy_qp(sid);
	CHECK(!cid->send_cq && !cid->recv_cq && !cid->send_cq_channel, "rdma_destroy_qp left the CQs it made");
	rdma_destroy_id(cid);
	rdma_destroy_id(sid);
	rdma_destroy_id(lid);

	external(ch, &a0, &a1, port + 2);

	/* Address errors. */
	CHECK(!rdma_create_id(ch, &eid, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_resolve_addr(eid, NULL, (struct sockaddr *)&off, 2000), "rdma_resolve_addr(%s): %s", argv[3],
	      strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_ERROR, eid, -ENODEV));
	rdma_destroy_id(eid);
	CHECK(!rdma_create_id(ch, &eid, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(rdma_resolve_addr(eid, NULL, (struct sockaddr *)&unroutable, 2000) == -1 && errno == ENETUNREACH,
	      "rdma_resolve_addr(%s): want ENETUNREACH, got %s", argv[4], strerror(errno));
	rdma_destroy_id(eid);

	/* Synchronous ids: the event's error is the call's. */
	snprintf(portstr, sizeof(portstr), "%d", port + 1);
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(!rdma_getaddrinfo(argv[3], portstr, &hints, &res), "rdma_getaddrinfo(%s)", argv[3]);
	CHECK(rdma_create_ep(&x, res, NULL, NULL) == -1 && errno == ENODEV,
	      "rdma_create_ep towards %s: want ENODEV, got %s", argv[3], strerror(errno));
	rdma_freeaddrinfo(res);
	CHECK(!rdma_getaddrinfo(argv[1], portstr, &hints, &res), "rdma_getaddrinfo(%s)", argv[1]);
	{
		struct ibv_qp_init_attr qa = {0};

		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		CHECK(!rdma_create_ep(&x, res, NULL, &qa), "rdma_create_ep: %s", strerror(errno));
	}
	rdma_freeaddrinfo(res);
	CHECK(x->qp && x->send_cq && x->recv_cq, "rdma_create_ep made no QP or CQs");
	CHECK(rdma_connect(x, NULL) == -1 && errno == ECONNREFUSED,
	      "rdma_connect to a port nobody listens on: want ECONNREFUSED, got %s", strerror(errno));
	CHECK(x->event && x->event->event == RDMA_CM_EVENT_REJECTED && x->event->status == 8,
	      "the synchronous id's event is not the REJ of reason 8");
	rdma_destroy_ep(x);
	rdma_destroy_event_channel(ch);
	printf("cma_check: ok\n");
	return 0;
}
