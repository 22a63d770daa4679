/*
 * poll_check: poll mode's C fast path (an empty ibv_poll_cq answered in C,
 * verbs.c's empty()) between two devices of one process, run by
 * TestPollCheck and TestPollModeEveryGID with GOROCE_POLL_MODE=1:
 *
 *   poll_check concurrent  one thread posts SENDs, each carrying its
 *       sequence number, while two threads poll the sender's CQ and two the
 *       receiver's (one taking 1 completion a call, the other up to 8),
 *       reposting receives: every send and every receive completes once,
 *       none lost or seen twice. Then a CQ overrun (requests flushed by a
 *       QP in the error state into a CQ too small for them) still makes
 *       ibv_poll_cq fail and raises IBV_EVENT_CQ_ERR; and a CQ armed with
 *       ibv_req_notify_cq, polled empty, gets its event on its channel for
 *       the next SEND, whose completion a poll then finds.
 *   poll_check gids N      an RC pair over each GID index 1..N in turn,
 *       SENDs both ways, data checked: traffic to every GID completes.
 *
 * Prints "poll_check: ok" and exits 0, or names the first failure.
 */
#include <pthread.h>
#include <stdatomic.h>
/* pair.h's helpers this program does not use */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "pair.h"

static const char *prog = "poll_check";

enum { K = 4000, SQ = 16, RQ = 64, MSG = 64 };

static struct side A, B;
static char *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;

/* connect_gid is connect_pair over GID index idx on both sides. */
static void connect_gid(int idx)
{
	union ibv_gid ga, gb;
	struct side *s[2] = {&A, &B};

	CHECK(!ibv_query_gid(A.ctx, 1, idx, &ga) && !ibv_query_gid(B.ctx, 1, idx, &gb), "query_gid %d", idx);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {0};

		if (s[i]->qp)
			CHECK(!ibv_destroy_qp(s[i]->qp), "destroy_qp");
		ia.send_cq = ia.recv_cq = s[i]->cq;
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = SQ;
		ia.cap.max_recv_wr = RQ;
		ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
		s[i]->qp = ibv_create_qp(s[i]->pd, &ia);
		CHECK(s[i]->qp, "create_qp: %s", strerror(errno));
		to_init(s[i]->qp);
	}
	to_rts_from(A.qp, B.qp->qp_num, gb, idx, 1);
	to_rts_from(B.qp, A.qp->qp_num, ga, idx, 1);
}

static void post_recv(struct side *s, char *buf, struct ibv_mr *mr, uint64_t slot)
{
	struct ibv_sge sge = {(uintptr_t)(buf + slot * MSG), MSG, mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;

	CHECK(!ibv_post_recv(s->qp, &wr, &bad), "post_recv: %s", strerror(errno));
}

static void post_send(struct side *s, char *buf, struct ibv_mr *mr, uint64_t seq)
{
	char *p = buf + (seq % SQ) * MSG;
	struct ibv_sge sge = {(uintptr_t)p, MSG, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = seq, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;

	memcpy(p, &seq, sizeof(seq));
	memset(p + sizeof(seq), (int)(seq & 0xff), MSG - sizeof(seq));
	CHECK(!ibv_post_send(s->qp, &wr, &bad), "post_send %lu: %s", (unsigned long)seq, strerror(errno));
}

/* ---- concurrent ---- */

static atomic_uchar sent_seen[K], recv_seen[K];
static atomic_long sends_done, recvs_done;

struct poller {
	int recv; /* B's receives, else A's sends */
	int batch;
};

static void *poll_loop(void *arg)
{
	struct poller *p = arg;
	struct ibv_cq *cq = p->recv ? B.cq : A.cq;
	atomic_long *done = p->recv ? &recvs_done : &sends_done;
	struct ibv_wc wc[8];
	double end = now_ms() + 60000;

	while (atomic_load(done) < K) {
		int n = ibv_poll_cq(cq, p->batch, wc);

		CHECK(n >= 0, "poll_cq: %d", n);
		CHECK(now_ms() < end, "%s: %ld of %d completions within 60 s", p->recv ? "receives" : "sends",
		      (long)atomic_load(done), K);
		for (int i = 0; i < n; i++) {
			uint64_t seq;

			CHECK(wc[i].status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(wc[i].status));
			if (!p->recv) {
				seq = wc[i].wr_id;
				CHECK(seq < K && wc[i].opcode == IBV_WC_SEND, "send completion wr_id %lu opcode %d",
				      (unsigned long)seq, wc[i].opcode);
				CHECK(!atomic_exchange(&sent_seen[seq], 1), "send %lu completed twice", (unsigned long)seq);
				atomic_fetch_add(&sends_done, 1);
				continue;
			}
			CHECK(wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == MSG && wc[i].wr_id < RQ,
			      "receive: opcode %d, %u bytes, wr_id %lu", wc[i].opcode, wc[i].byte_len,
			      (unsigned long)wc[i].wr_id);
			memcpy(&seq, bbuf + wc[i].wr_id * MSG, sizeof(seq));
			CHECK(seq < K, "received sequence %lu", (unsigned long)seq);
			for (int j = sizeof(seq); j < MSG; j++)
				CHECK((unsigned char)bbuf[wc[i].wr_id * MSG + j] == (seq & 0xff), "message %lu byte %d",
				      (unsigned long)seq, j);
			CHECK(!atomic_exchange(&recv_seen[seq], 1), "message %lu received twice", (unsigned long)seq);
			atomic_fetch_add(&recvs_done, 1);
			post_recv(&B, bbuf, bmr, wc[i].wr_id);
		}
	}
	return NULL;
}

static void concurrent(void)
{
	pthread_t t[4];
	struct poller ps[4] = {{0, 1}, {0, 8}, {1, 1}, {1, 8}};

	connect_gid(1);
	for (uint64_t i = 0; i < RQ; i++)
		post_recv(&B, bbuf, bmr, i);
	for (int i = 0; i < 4; i++)
		CHECK(!pthread_create(&t[i], NULL, poll_loop, &ps[i]), "pthread_create");
	/* The poster: at most SQ sends outstanding, each slot's bytes
	 * rewritten only after its send completed. */
	for (uint64_t seq = 0; seq < K; seq++) {
		double end = now_ms() + 60000;

		while ((long)seq - atomic_load(&sends_done) >= SQ)
			CHECK(now_ms() < end, "send %lu: the queue stayed full for 60 s", (unsigned long)seq);
		post_send(&A, abuf, amr, seq);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(sends_done == K && recvs_done == K, "%ld sends, %ld receives, want %d each", (long)sends_done,
	      (long)recvs_done, K);
}

/* overrun: a QP in the error state flushes every request it is given into
 * its CQ; more than the CQ holds is an overrun, which poll reports. */
static void overrun(void)
{
	struct ibv_cq *small = ibv_create_cq(A.ctx, 2, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {0};
	struct ibv_qp_attr a = {0};
	struct ibv_async_event ev;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	int n, got = 0, polls = 0;

	CHECK(small, "create_cq");
	ia.send_cq = small;
	ia.recv_cq = A.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = SQ;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(A.pd, &ia);
	CHECK(qp, "create_qp");
	to_init(qp);
	a.qp_state = IBV_QPS_ERR;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "modify ERR");
	for (int i = 0; i < small->cqe + 2; i++) {
		struct ibv_sge sge = {(uintptr_t)abuf, 8, amr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad;

		CHECK(!ibv_post_send(qp, &wr, &bad), "post_send to the QP in error");
	}
	while ((n = ibv_poll_cq(small, 1, &wc)) >= 0) {
		got += n;
		CHECK(got <= small->cqe, "%d completions from a CQ of %d", got, small->cqe);
		CHECK(++polls < 1000000, "the overrun CQ's polls never failed");
	}
	CHECK(!ibv_get_async_event(A.ctx, &ev), "get_async_event");
	CHECK(ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == small, "async event %s, want IBV_EVENT_CQ_ERR",
	      ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_cq(small), "destroy");
}

/* events: B's receives complete on a CQ with a channel; armed and polled
 * empty (the fast path answers), it gets an event for the next SEND. */
static void events(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(B.ctx);
	struct ibv_cq *cq, *evcq;
	void *cqctx;
	struct ibv_wc wc;

	CHECK(ch, "create_comp_channel");
	evcq = ibv_create_cq(B.ctx, 16, &B, ch, 0);
	CHECK(evcq, "create_cq");
	/* B's QP receives on evcq: a fresh pair whose B side does. */
	{
		struct ibv_cq *keep = B.cq;

		B.cq = evcq;
		connect_gid(1);
		B.cq = keep;
	}
	post_recv(&B, bbuf, bmr, 0);
	for (int round = 0; round < 3; round++) {
		CHECK(!ibv_req_notify_cq(evcq, 0), "req_notify_cq");
		for (int i = 0; i < 1000; i++)
			CHECK(ibv_poll_cq(evcq, 1, &wc) == 0, "a completion before the SEND");
		post_send(&A, abuf, amr, round);
		CHECK(!ibv_get_cq_event(ch, &cq, &cqctx), "get_cq_event: %s", strerror(errno));
		CHECK(cq == evcq && cqctx == &B, "the event names another CQ");
		ibv_ack_cq_events(cq, 1);
		wc = wait_wc(evcq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "receive after the event: %s",
		      ibv_wc_status_str(wc.status));
		post_recv(&B, bbuf, bmr, 0);
		wc = wait_wc(A.cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)round, "send %d", round);
	}
	CHECK(!ibv_destroy_qp(B.qp), "destroy_qp");
	B.qp = NULL;
	CHECK(!ibv_destroy_cq(evcq) && !ibv_destroy_comp_channel(ch), "destroy");
}

/* gids: a pair over each GID index 1..n, K/10 SENDs each way. */
static void gids(int n)
{
	for (int idx = 1; idx <= n; idx++) {
		connect_gid(idx);
		for (uint64_t i = 0; i < RQ; i++) {
			post_recv(&A, abuf + SQ * MSG, amr, i);
			post_recv(&B, bbuf, bmr, i);
		}
		for (uint64_t seq = 0; seq < K / 10; seq++) {
			struct side *from = seq & 1 ? &B : &A, *to = seq & 1 ? &A : &B;
			char *rbuf = seq & 1 ? abuf + SQ * MSG : bbuf;
			struct ibv_wc wc;
			uint64_t got;

			post_send(from, seq & 1 ? bbuf + RQ * MSG : abuf, seq & 1 ? bmr : amr, seq);
			wc = wait_wc(to->cq);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "GID %d: receive %lu: %s", idx,
			      (unsigned long)seq, ibv_wc_status_str(wc.status));
			memcpy(&got, rbuf + wc.wr_id * MSG, sizeof(got));
			CHECK(got == seq, "GID %d: received %lu, want %lu", idx, (unsigned long)got, (unsigned long)seq);
			post_recv(to, rbuf, to == &A ? amr : bmr, wc.wr_id);
			wc = wait_wc(from->cq);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == seq, "GID %d: send %lu", idx, (unsigned long)seq);
		}
		printf("poll_check: GID %d: %d SENDs completed\n", idx, K / 10);
	}
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	size_t size = (SQ + RQ) * MSG * 2;

	CHECK(argc >= 2, "usage: poll_check concurrent | gids N");
	CHECK(list && list[0] && list[1], "two devices");
	abuf = aligned_alloc(4096, size);
	bbuf = aligned_alloc(4096, size);
	CHECK(abuf && bbuf, "alloc");
	open_side(&A, list[0]);
	open_side(&B, list[1]);
	amr = ibv_reg_mr(A.pd, abuf, size, IBV_ACCESS_LOCAL_WRITE);
	bmr = ibv_reg_mr(B.pd, bbuf, size, IBV_ACCESS_LOCAL_WRITE);
	CHECK(amr && bmr, "reg_mr");
	if (!strcmp(argv[1], "concurrent")) {
		concurrent();
		overrun();
		events();
	} else {
		CHECK(argc == 3 && !strcmp(argv[1], "gids"), "usage: poll_check concurrent | gids N");
		gids(atoi(argv[2]));
	}
	printf("poll_check: ok\n");
	return 0;
}
