/*
 * mw_check: memory windows through libgoroce.so, as a plain libibverbs
 * program uses them (built with -libverbs, run preloaded by
 * TestMemoryWindows). Side b owns a buffer registered with
 * IBV_ACCESS_MW_BIND and local write only: its peer a reaches it only
 * through windows b binds:
 *   - type 1, bound with ibv_bind_mw (the window's rkey moves to the new
 *     key), WRITE and READ through it, every byte checked, none outside
 *     it touched; ibv_dealloc_mw, then a's WRITE is IBV_WC_REM_ACCESS_ERR;
 *   - type 2, bound with an IBV_WR_BIND_MW work request; WRITE and READ;
 *     IBV_WR_LOCAL_INV, then REM_ACCESS_ERR;
 *   - type 2 bound again, revoked by a's IBV_WR_SEND_WITH_INV: b's receive
 *     carries IBV_WC_WITH_INV and the key, then REM_ACCESS_ERR;
 *   - type 2 bound with ibv_wr_bind_mw and invalidated with
 *     ibv_wr_local_inv; bound again and freed with ibv_dealloc_mw;
 *   - a bind to a region without IBV_ACCESS_MW_BIND completes with
 *     IBV_WC_MW_BIND_ERR (both ways of binding);
 *   - ibv_query_device advertises windows; what is refused, refused with
 *     libibverbs' errno.
 * Prints "mw_check: ok" and exits 0, or names the first failure.
 */
#include "pair.h"

#define SIZE 16384

static struct side a, b;
static char *abuf, *bbuf;
static struct ibv_mr *amr, *bwin, *bplain;

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(qp, wr, &bad);

	CHECK(!rc, "post_send opcode %d: %s", wr->opcode, strerror(rc));
}

/* rdma has a post opcode (WRITE or READ) len bytes between a's buffer at
 * aoff and b's address raddr through rkey, and returns the status. */
static enum ibv_wc_status rdma(enum ibv_wr_opcode op, uint64_t wr_id, size_t aoff, uint64_t raddr,
			       uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)abuf + aoff, .length = len, .lkey = amr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_wc wc;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	post(a.qp, &wr);
	wc = wait_wc(a.cq);
	CHECK(wc.wr_id == wr_id, "completion of wr %llu, want %llu", (unsigned long long)wc.wr_id,
	      (unsigned long long)wr_id);
	if (wc.status == IBV_WC_SUCCESS)
		CHECK(wc.opcode == (op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE),
		      "opcode %d", wc.opcode);
	return wc.status;
}

/* through checks that the window [off, off+len) of b's buffer takes a's
 * WRITE and serves its READ through rkey, every byte, and that nothing
 * outside it changed. */
static void through(uint32_t rkey, size_t off, uint32_t len, int seed)
{
	enum ibv_wc_status st;

	memset(bbuf, 0x5a, SIZE);
	fill(abuf, len, seed);
	st = rdma(IBV_WR_RDMA_WRITE, 1, 0, (uintptr_t)bbuf + off, rkey, len);
	CHECK(st == IBV_WC_SUCCESS, "WRITE through window 0x%x: %s", rkey, ibv_wc_status_str(st));
	CHECK(!memcmp(bbuf + off, abuf, len), "WRITE through the window: bytes differ");
	for (size_t i = 0; i < SIZE; i++)
		CHECK(i >= off && i < off + len ? 1 : bbuf[i] == 0x5a, "WRITE changed byte %zu outside the window", i);
	memset(abuf + SIZE / 2, 0, len);
	st = rdma(IBV_WR_RDMA_READ, 2, SIZE / 2, (uintptr_t)bbuf + off, rkey, len);
	CHECK(st == IBV_WC_SUCCESS, "READ through window 0x%x: %s", rkey, ibv_wc_status_str(st));
	CHECK(!memcmp(abuf + SIZE / 2, bbuf + off, len), "READ through the window: bytes differ");
}

/* refused checks that a's WRITE through rkey now fails with a remote
 * access error, and connects fresh QPs (the error ends both). */
static void refused(uint32_t rkey, size_t off, const char *after)
{
	enum ibv_wc_status st = rdma(IBV_WR_RDMA_WRITE, 3, 0, (uintptr_t)bbuf + off, rkey, 64);

	CHECK(st == IBV_WC_REM_ACCESS_ERR, "WRITE after %s: %s, want remote access error", after,
	      ibv_wc_status_str(st));
	connect_pair(&a, &b, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND);
}

/* bind2 binds the type 2 window mw on b's QP with an IBV_WR_BIND_MW work
 * request to [off, off+len) of mr and returns the new key. */
static uint32_t bind2(struct ibv_mw *mw, struct ibv_mr *mr, size_t off, uint32_t len, enum ibv_wc_status want)
{
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {.wr_id = 20, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)bbuf + off;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	post(b.qp, &wr);
	expect(b.cq, 20, IBV_WC_BIND_MW, want);
	return key;
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_device_attr da;
	struct ibv_mw *mw1, *mw2;
	struct ibv_mw_bind mb = {0};
	uint32_t old, key;
	int n, rc;

	prog = "mw_check";
	abuf = malloc(SIZE);
	bbuf = malloc(SIZE);
	CHECK(abuf && bbuf, "malloc");
	list = ibv_get_device_list(&n);
	CHECK(list && n == 2, "want 2 devices, have %d", n);
	open_side(&a, list[0]);
	open_side(&b, list[1]);
	amr = ibv_reg_mr(a.pd, abuf, SIZE, IBV_ACCESS_LOCAL_WRITE);
	bwin = ibv_reg_mr(b.pd, bbuf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	bplain = ibv_reg_mr(b.pd, bbuf, SIZE, IBV_ACCESS_LOCAL_WRITE);
	CHECK(amr && bwin && bplain, "reg_mr: %s", strerror(errno));
	connect_pair(&a, &b, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND);

	CHECK(!ibv_query_device(b.ctx, &da), "query_device");
	CHECK((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) &&
		      da.max_mw > 0,
	      "query_device: device_cap_flags 0x%x max_mw %d", da.device_cap_flags, da.max_mw);

	/* The region itself grants a nothing remote. */
	CHECK(rdma(IBV_WR_RDMA_WRITE, 4, 0, (uintptr_t)bbuf, bwin->rkey, 64) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE through the region's own rkey");
	connect_pair(&a, &b, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND);

	/* Type 1: ibv_bind_mw. */
	mw1 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == b.pd && mw1->context == b.ctx,
	      "alloc_mw type 1: %s", strerror(errno));
	old = mw1->rkey;
	mb.wr_id = 10;
	mb.send_flags = IBV_SEND_SIGNALED;
	mb.bind_info.mr = bwin;
	mb.bind_info.addr = (uintptr_t)bbuf + 4096;
	mb.bind_info.length = 4096;
	mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	rc = ibv_bind_mw(b.qp, mw1, &mb);
	CHECK(!rc, "bind_mw: %s", strerror(rc));
	CHECK(mw1->rkey == ibv_inc_rkey(old), "rkey 0x%x after the bind, from 0x%x", mw1->rkey, old);
	expect(b.cq, 10, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
	through(mw1->rkey, 4096, 4096, 1);
	CHECK(ibv_dereg_mr(bwin) == EINVAL, "dereg_mr of a region with a window bound");
	/* Past the window's end, inside the region: refused. */
	CHECK(rdma(IBV_WR_RDMA_WRITE, 5, 0, (uintptr_t)bbuf + 8192 - 32, mw1->rkey, 64) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE across the window's end");
	connect_pair(&a, &b, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND);
	/* Rebind elsewhere: the old key dies, the new one works. */
	old = mw1->rkey;
	mb.bind_info.addr = (uintptr_t)bbuf;
	CHECK(!ibv_bind_mw(b.qp, mw1, &mb), "second bind_mw");
	expect(b.cq, 10, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
	key = mw1->rkey;
	CHECK(key == ibv_inc_rkey(old), "rebind key");
	through(key, 0, 4096, 2);
	CHECK(!ibv_dealloc_mw(mw1), "dealloc_mw type 1");
	refused(key, 0, "ibv_dealloc_mw (type 1)");
	refused(old, 4096, "a rebind (the old key)");

	/* Type 2: IBV_WR_BIND_MW, IBV_WR_LOCAL_INV. */
	mw2 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	CHECK(mw2 && mw2->type == IBV_MW_TYPE_2, "alloc_mw type 2: %s", strerror(errno));
	key = bind2(mw2, bwin, 8192, 2048, IBV_WC_SUCCESS);
	through(key, 8192, 2048, 3);
	{
		struct ibv_send_wr wr = {.wr_id = 21, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
					 .invalidate_rkey = key};

		post(b.qp, &wr);
		expect(b.cq, 21, IBV_WC_LOCAL_INV, IBV_WC_SUCCESS);
	}
	refused(key, 8192, "IBV_WR_LOCAL_INV");

	/* Type 2 revoked by the peer: IBV_WR_SEND_WITH_INV. */
	mw2->rkey = key; /* as a program keeps it: the key its bind gave */
	key = bind2(mw2, bwin, 0, SIZE, IBV_WC_SUCCESS);
	through(key, 0, 1024, 4);
	{
		struct ibv_sge rs = {.addr = (uintptr_t)bbuf, .length = 64, .lkey = bplain->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 30, .sg_list = &rs, .num_sge = 1}, *rbad;
		struct ibv_sge ss = {.addr = (uintptr_t)abuf, .length = 32, .lkey = amr->lkey};
		struct ibv_send_wr wr = {.wr_id = 31, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
					 .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = key};
		struct ibv_wc wc;

		CHECK(!ibv_post_recv(b.qp, &rwr, &rbad), "post_recv");
		fill(abuf, 32, 9);
		post(a.qp, &wr);
		expect(a.cq, 31, IBV_WC_SEND, IBV_WC_SUCCESS);
		wc = expect(b.cq, 30, IBV_WC_RECV, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 32 && (wc.wc_flags & IBV_WC_WITH_INV) && !(wc.wc_flags & IBV_WC_WITH_IMM) &&
			      wc.invalidated_rkey == key,
		      "receive of SEND_WITH_INV: byte_len %u flags 0x%x rkey 0x%x, want 0x%x", wc.byte_len,
		      wc.wc_flags, wc.invalidated_rkey, key);
		CHECK(!memcmp(bbuf, abuf, 32), "SEND_WITH_INV: bytes differ");
	}
	refused(key, 0, "IBV_WR_SEND_WITH_INV");

	/* Type 2 through the ibv_wr_* API: ibv_wr_bind_mw, ibv_wr_local_inv. */
	{
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(b.qp);
		struct ibv_mw_bind_info bi = {.mr = bwin, .addr = (uintptr_t)bbuf + 100, .length = 900,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};

		CHECK(qx, "qp_to_qp_ex: %s", strerror(errno));
		mw2->rkey = key;
		key = ibv_inc_rkey(key);
		ibv_wr_start(qx);
		qx->wr_id = 40;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(qx, mw2, key, &bi);
		CHECK(!(rc = ibv_wr_complete(qx)), "wr_complete (bind): %s", strerror(rc));
		expect(b.cq, 40, IBV_WC_BIND_MW, IBV_WC_SUCCESS);
		through(key, 100, 900, 5);
		ibv_wr_start(qx);
		qx->wr_id = 41;
		ibv_wr_local_inv(qx, key);
		CHECK(!(rc = ibv_wr_complete(qx)), "wr_complete (local inv): %s", strerror(rc));
		expect(b.cq, 41, IBV_WC_LOCAL_INV, IBV_WC_SUCCESS);
		refused(key, 100, "ibv_wr_local_inv");
	}

	/* Type 2 bound, then freed: ibv_dealloc_mw. */
	mw2->rkey = key;
	key = bind2(mw2, bwin, 0, 4096, IBV_WC_SUCCESS);
	through(key, 0, 4096, 6);
	CHECK(!ibv_dealloc_mw(mw2), "dealloc_mw type 2");
	refused(key, 0, "ibv_dealloc_mw (type 2)");

	/* A region without IBV_ACCESS_MW_BIND: the bind is posted, and
	 * completes with IBV_WC_MW_BIND_ERR (the QP then in error). */
	mw2 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	CHECK(mw2, "alloc_mw: %s", strerror(errno));
	bind2(mw2, bplain, 0, 64, IBV_WC_MW_BIND_ERR);
	connect_pair(&a, &b, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND);
	mw1 = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
	CHECK(mw1, "alloc_mw: %s", strerror(errno));
	mb.bind_info.mr = bplain;
	mb.wr_id = 11;
	CHECK(!ibv_bind_mw(b.qp, mw1, &mb), "bind_mw to a region without MW_BIND is posted");
	expect(b.cq, 11, IBV_WC_BIND_MW, IBV_WC_MW_BIND_ERR);
	connect_pair(&a, &b, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND);

	/* What is refused at once, with libibverbs' (and rxe's) errno. */
	mb.bind_info.mr = bwin;
	CHECK(ibv_bind_mw(b.qp, mw2, &mb) == EINVAL, "bind_mw of a type 2 window");
	mb.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
	CHECK(ibv_bind_mw(b.qp, mw1, &mb) == EINVAL, "zero-based type 1 bind");
	mb.bind_info.mw_access_flags &= ~IBV_ACCESS_ZERO_BASED;
	mb.bind_info.mr = amr;
	CHECK(ibv_bind_mw(b.qp, mw1, &mb) == EPERM, "bind_mw to a region of another PD");
	errno = 0;
	CHECK(!ibv_alloc_mw(b.pd, 3) && errno == EINVAL, "alloc_mw of type 3: errno %d", errno);
	{
		struct ibv_send_wr wr = {.wr_id = 22, .opcode = IBV_WR_BIND_MW}, *bad;

		CHECK(ibv_post_send(b.qp, &wr, &bad) == EINVAL && bad == &wr, "IBV_WR_BIND_MW without a window");
	}
	CHECK(!ibv_dealloc_mw(mw1) && !ibv_dealloc_mw(mw2), "dealloc_mw");
	quiet(b.cq, 50);

	for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
		CHECK(!ibv_destroy_qp(s->qp), "destroy_qp");
		CHECK(!ibv_destroy_cq(s->cq), "destroy_cq");
	}
	CHECK(!ibv_dereg_mr(amr) && !ibv_dereg_mr(bwin) && !ibv_dereg_mr(bplain), "dereg_mr");
	CHECK(!ibv_dealloc_pd(a.pd) && !ibv_dealloc_pd(b.pd), "dealloc_pd");
	CHECK(!ibv_close_device(a.ctx) && !ibv_close_device(b.ctx), "close_device");
	ibv_free_device_list(list);
	printf("mw_check: ok\n");
	return 0;
}
