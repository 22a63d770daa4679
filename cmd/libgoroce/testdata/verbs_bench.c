/*
 * verbs_bench: what a verb costs through libgoroce.so, where a C program
 * calls it: an empty ibv_poll_cq, and ibv_post_send and ibv_post_recv on
 * a QP in the error state (each request is flushed at once into the CQ)
 * followed by the ibv_poll_cq that reaps its completion, and an RDMA
 * WRITE posted the same way with ibv_post_send and with the ibv_wr_* API
 * (ibv_wr_start, ibv_wr_rdma_write, ibv_wr_set_sge, ibv_wr_complete on a
 * QP made by ibv_create_qp_ex). No packet is sent: what is timed is the
 * call path, C to Go and back, and the engine's queueing. Prints "NAME NS" lines, nanoseconds per iteration.
 * With "idle" after N it measures instead one ibv_post_recv (and its
 * reap) N times after the thread spent GAP microseconds in C, for each
 * gap, and prints "idle_GAP_p50 NS" and "idle_GAP_p99 NS": a crossing
 * after a long stay in C costs more than one right after another.
 *
 *   LD_PRELOAD=bin/libgoroce.so GOROCE_NETDEV=127.0.0.1 ./verbs_bench N [idle]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(cond, what)                                                            \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "verbs_bench: %s: %s\n", what, strerror(errno)); \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void reap(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(n == 1 && wc.status == IBV_WC_WR_FLUSH_ERR, "poll_cq (a flushed completion)");
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	static char buf[64];
	struct ibv_qp_init_attr ia = {0};
	struct ibv_qp_attr a = {0};
	struct ibv_sge sge;
	struct ibv_send_wr swr = {0}, *sbad;
	struct ibv_recv_wr rwr = {0}, *rbad;
	struct ibv_qp_init_attr_ex iax = {0};
	struct ibv_qp *qpe;
	struct ibv_qp_ex *qx;
	double t, post_only;

	CHECK(list && list[0], "get_device_list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "create_qp");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || (errno = EINVAL, 0), "modify_qp INIT");
	a.qp_state = IBV_QPS_ERR;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE) || (errno = EINVAL, 0), "modify_qp ERR");

	sge.addr = (uintptr_t)buf;
	sge.length = 8;
	sge.lkey = mr->lkey;
	swr.sg_list = rwr.sg_list = &sge;
	swr.num_sge = rwr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;

	if (argc > 2 && !strcmp(argv[2], "idle")) {
		static const int gaps[] = {0, 20, 50, 200, 1000};
		double *d = calloc(n, sizeof(*d));

		CHECK(d, "calloc");
		for (size_t g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++) {
			for (long i = 0; i < n; i++) {
				double s = now(), p;

				while (now() - s < gaps[g] * 1e3)
					; /* in C, as a program computing between verbs */
				p = now();
				CHECK(!ibv_post_recv(qp, &rwr, &rbad) || (errno = EINVAL, 0), "post_recv");
				d[i] = now() - p;
				reap(cq);
			}
			qsort(d, n, sizeof(*d), cmp);
			printf("idle_%d_p50 %.1f\n", gaps[g], d[n / 2]);
			printf("idle_%d_p99 %.1f\n", gaps[g], d[n * 99 / 100]);
		}
		return 0;
	}

	t = now();
	for (long i = 0; i < n; i++)
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "poll_cq (empty)");
	printf("poll_empty %.1f\n", (now() - t) / n);

	t = now();
	for (long i = 0; i < n; i++) {
		CHECK(!ibv_post_send(qp, &swr, &sbad) || (errno = EINVAL, 0), "post_send");
		reap(cq);
	}
	printf("post_send_poll %.1f\n", (now() - t) / n);

	t = now();
	for (long i = 0; i < n; i++) {
		CHECK(!ibv_post_recv(qp, &rwr, &rbad) || (errno = EINVAL, 0), "post_recv");
		reap(cq);
	}
	printf("post_recv_poll %.1f\n", (now() - t) / n);

	/* One RDMA WRITE per iteration, posted with ibv_post_send, then with
	 * the ibv_wr_* API on a QP made by ibv_create_qp_ex; each reaped.
	 * NAME_poll is the whole iteration; NAME alone the post, timed
	 * around the call (the clock reads included, alike for both). */
	swr.opcode = IBV_WR_RDMA_WRITE;
	swr.wr.rdma.remote_addr = (uintptr_t)buf;
	swr.wr.rdma.rkey = mr->rkey;
	post_only = 0;
	t = now();
	for (long i = 0; i < n; i++) {
		double p = now();

		CHECK(!ibv_post_send(qp, &swr, &sbad) || (errno = EINVAL, 0), "post_send WRITE");
		post_only += now() - p;
		reap(cq);
	}
	printf("post_write_poll %.1f\n", (now() - t) / n);
	printf("post_write %.1f\n", post_only / n);

	iax.send_cq = iax.recv_cq = cq;
	iax.qp_type = IBV_QPT_RC;
	iax.cap.max_send_wr = iax.cap.max_recv_wr = 4;
	iax.cap.max_send_sge = iax.cap.max_recv_sge = 1;
	iax.pd = pd;
	iax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	iax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
	qpe = ibv_create_qp_ex(ctx, &iax);
	CHECK(qpe, "create_qp_ex");
	qx = ibv_qp_to_qp_ex(qpe);
	CHECK(qx, "qp_to_qp_ex");
	a.qp_state = IBV_QPS_INIT;
	CHECK(!ibv_modify_qp(qpe, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || (errno = EINVAL, 0), "modify_qp INIT");
	a.qp_state = IBV_QPS_ERR;
	CHECK(!ibv_modify_qp(qpe, &a, IBV_QP_STATE) || (errno = EINVAL, 0), "modify_qp ERR");
	post_only = 0;
	t = now();
	for (long i = 0; i < n; i++) {
		double p = now();
		int rc;

		ibv_wr_start(qx);
		qx->wr_id = i;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
		rc = ibv_wr_complete(qx);
		post_only += now() - p;
		CHECK(!rc || (errno = rc, 0), "wr_complete");
		reap(cq);
	}
	printf("wr_write_poll %.1f\n", (now() - t) / n);
	printf("wr_write %.1f\n", post_only / n);
	CHECK(!ibv_destroy_qp(qpe) || (errno = EINVAL, 0), "destroy_qp (ex)");

	CHECK(!ibv_destroy_qp(qp) || (errno = EINVAL, 0), "destroy_qp");
	CHECK(!ibv_destroy_cq(cq) || (errno = EINVAL, 0), "destroy_cq");
	CHECK(!ibv_dereg_mr(mr) || (errno = EINVAL, 0), "dereg_mr");
	CHECK(!ibv_dealloc_pd(pd) || (errno = EINVAL, 0), "dealloc_pd");
	CHECK(!ibv_close_device(ctx) || (errno = EINVAL, 0), "close_device");
	ibv_free_device_list(list);
	return 0;
}
