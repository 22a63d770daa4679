/*
 * pair.h: what mw_check.c and wr_check.c share: two devices of one
 * process (goroce0 and goroce1, two loopback addresses), a PD and a CQ on
 * each, and RC QPs between them that a test can tear down and connect
 * anew (a remote access error leaves both QPs in the error state).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "check.h"

static const char *prog;

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
};

static void open_side(struct side *s, struct ibv_device *dev)
{
	s->ctx = ibv_open_device(dev);
	CHECK(s->ctx, "open %s: %s", ibv_get_device_name(dev), strerror(errno));
	CHECK(!ibv_query_gid(s->ctx, 1, 1, &s->gid), "query_gid");
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "alloc_pd");
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	CHECK(s->cq, "create_cq");
}

/* The attributes of an RC QP on s; ops, if not 0, asks for the ibv_wr_*
 * builders (ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS). */
static struct ibv_qp *make_qp(struct side *s, enum ibv_qp_type type, uint64_t ops, uint32_t max_inline)
{
	struct ibv_qp_init_attr_ex ia = {0};
	struct ibv_qp *qp;

	ia.send_cq = ia.recv_cq = s->cq;
	ia.qp_type = type;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
	ia.cap.max_inline_data = max_inline;
	ia.pd = s->pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	if (ops) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = ops;
	}
	qp = ibv_create_qp_ex(s->ctx, &ia);
	CHECK(qp, "create_qp_ex: %s", strerror(errno));
	return qp;
}

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "modify INIT");
}

/* to_rts_from moves qp from INIT to RTS towards dqpn at dgid, sending
 * from the GID at sgid_index, PSNs 100 both ways; min_rnr_timer is the
 * RNR NAK's timer it asks of its requesters. */
static void to_rts_from(struct ibv_qp *qp, uint32_t dqpn, union ibv_gid dgid, uint8_t sgid_index,
			uint8_t min_rnr_timer)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = dgid;
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "modify RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify RTS");
}

/* to_rts: from the device's GID 1, the requesters' RNR timer 0.64 ms. */
static void to_rts(struct ibv_qp *qp, uint32_t dqpn, union ibv_gid dgid)
{
	to_rts_from(qp, dqpn, dgid, 1, 12);
}

/* connect makes a fresh RC QP on each side (destroying the old ones) and
 * connects them; aops and bops are their ibv_wr_* send ops (0: none). */
static void connect_pair(struct side *a, struct side *b, uint64_t aops, uint64_t bops)
{
	for (struct side *s = a; s; s = s == a ? b : NULL) {
		if (s->qp)
			CHECK(!ibv_destroy_qp(s->qp), "destroy_qp");
		s->qp = make_qp(s, IBV_QPT_RC, s == a ? aops : bops, 64);
		to_init(s->qp);
	}
	to_rts(a->qp, b->qp->qp_num, b->gid);
	to_rts(b->qp, a->qp->qp_num, a->gid);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* wait_wc returns the CQ's next completion, within 10 s. */
static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = now_ms() + 10000;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(now_ms() < end, "no completion within 10 s");
	CHECK(n == 1, "poll_cq: %d", n);
	return wc;
}

/* expect waits for a completion and checks its wr_id and status, and
 * its opcode if the status is success (an error completion's opcode is
 * not defined). */
static struct ibv_wc expect(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, enum ibv_wc_status st)
{
	struct ibv_wc wc = wait_wc(cq);

	CHECK(wc.wr_id == wr_id && wc.status == st && (st != IBV_WC_SUCCESS || wc.opcode == op),
	      "completion wr_id %llu %s opcode %d, want wr_id %llu %s opcode %d",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
	      (unsigned long long)wr_id, ibv_wc_status_str(st), op);
	return wc;
}

/* quiet checks that the CQ stays empty for a while. */
static void quiet(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	double end = now_ms() + ms;

	while (now_ms() < end)
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "unexpected completion wr_id %llu %s",
		      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
}

static void fill(char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 31 + seed);
}
