/*
 * wr_check: the extended work-request API (ibv_wr_*) through
 * libgoroce.so, as a plain libibverbs program uses it (built with
 * -libverbs, run preloaded by TestWorkRequestAPI), with ordinary CQs.
 * Side a's QP comes from ibv_create_qp_ex with
 * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; it posts to b:
 *   - a batch of three RDMA WRITEs (ibv_wr_set_sge), one ibv_wr_complete;
 *   - WRITE with immediate; READ into two SGEs (ibv_wr_set_sge_list);
 *   - SEND with inline data from an unregistered buffer, overwritten
 *     before ibv_wr_complete (the data was copied at ibv_wr_set_inline_data);
 *     SEND with immediate of an inline list; SEND of an SGE; SEND with
 *     invalidate;
 *   - fetch-and-add and compare-and-swap;
 *   - a UD SEND (ibv_wr_set_ud_addr) from a UD QP made the same way;
 * every byte and every completion (wr_id, opcode, status, length,
 * immediate, flags) checked. Then the batch semantics: ibv_wr_abort
 * posts nothing; a batch whose builder or setter failed posts nothing
 * and ibv_wr_complete returns the errno (EINVAL, ENOSPC, EOPNOTSUPP);
 * ibv_create_qp_ex refuses what goroce has not with EOPNOTSUPP. Last,
 * a CQ from ibv_create_cq_ex read with the ibv_cq_ex poll API
 * (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*).
 * Prints "wr_check: ok" and exits 0, or names the first failure.
 */
#include "pair.h"

#define SIZE 16384

#define A_OPS                                                                                           \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |         \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV)

static struct side a, b;
static char *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;

static void post_recv(struct ibv_qp *qp, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)bbuf + off, .length = len, .lkey = bmr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

	CHECK(!ibv_post_recv(qp, &wr, &bad), "post_recv");
}

static void complete(struct ibv_qp_ex *qx)
{
	int rc = ibv_wr_complete(qx);

	CHECK(!rc, "wr_complete: %s", strerror(rc));
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_qp_ex *qx;
	struct ibv_wc wc;
	int n, rc;

	prog = "wr_check";
	abuf = malloc(SIZE);
	bbuf = malloc(SIZE);
	CHECK(abuf && bbuf, "malloc");
	list = ibv_get_device_list(&n);
	CHECK(list && n == 2, "want 2 devices, have %d", n);
	open_side(&a, list[0]);
	open_side(&b, list[1]);
	amr = ibv_reg_mr(a.pd, abuf, SIZE, IBV_ACCESS_LOCAL_WRITE);
	bmr = ibv_reg_mr(b.pd, bbuf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(amr && bmr, "reg_mr: %s", strerror(errno));
	connect_pair(&a, &b, A_OPS, 0);
	qx = ibv_qp_to_qp_ex(a.qp);
	CHECK(qx && &qx->qp_base == a.qp, "qp_to_qp_ex: %s", strerror(errno));
	errno = 0;
	CHECK(!ibv_qp_to_qp_ex(b.qp) && errno == EOPNOTSUPP, "qp_to_qp_ex of a QP without send ops");

	/* Three WRITEs in one batch, each with its own wr_id. */
	fill(abuf, 3 * 1024, 1);
	memset(bbuf, 0, SIZE);
	ibv_wr_start(qx);
	for (int i = 0; i < 3; i++) {
		qx->wr_id = 100 + i;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, bmr->rkey, (uintptr_t)bbuf + 4096 * i);
		ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf + 1024 * i, 1024);
	}
	complete(qx);
	for (int i = 0; i < 3; i++)
		expect(a.cq, 100 + i, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
	for (int i = 0; i < 3; i++)
		CHECK(!memcmp(bbuf + 4096 * i, abuf + 1024 * i, 1024), "WRITE %d: bytes differ", i);

	/* WRITE with immediate: the data, and b's receive with the immediate. */
	post_recv(b.qp, 200, 0, 0);
	fill(abuf, 512, 2);
	ibv_wr_start(qx);
	qx->wr_id = 201;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(qx, bmr->rkey, (uintptr_t)bbuf + 12288, htobe32(0xabcd0123));
	ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 512);
	complete(qx);
	expect(a.cq, 201, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
	wc = expect(b.cq, 200, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SUCCESS);
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xabcd0123 && wc.byte_len == 512,
	      "WRITE_WITH_IMM receive: flags 0x%x imm 0x%x len %u", wc.wc_flags, be32toh(wc.imm_data), wc.byte_len);
	CHECK(!memcmp(bbuf + 12288, abuf, 512), "WRITE_WITH_IMM: bytes differ");

	/* READ b[4096..6144) into two SGEs of a. */
	memset(abuf + 8192, 0, 4096);
	{
		struct ibv_sge sg[2] = {{.addr = (uintptr_t)abuf + 8192, .length = 1000, .lkey = amr->lkey},
					{.addr = (uintptr_t)abuf + 12288, .length = 1048, .lkey = amr->lkey}};

		fill(bbuf + 4096, 2048, 3);
		ibv_wr_start(qx);
		qx->wr_id = 300;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_read(qx, bmr->rkey, (uintptr_t)bbuf + 4096);
		ibv_wr_set_sge_list(qx, 2, sg);
		complete(qx);
		wc = expect(a.cq, 300, IBV_WC_RDMA_READ, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 2048, "READ byte_len %u", wc.byte_len);
		CHECK(!memcmp(abuf + 8192, bbuf + 4096, 1000) && !memcmp(abuf + 12288, bbuf + 5096, 1048),
		      "READ: bytes differ");
	}

	/* SENDs in one batch: inline from a stack buffer, an inline list
	 * with immediate, an SGE. */
	{
		char msg[48], part1[10] = "0123456789", part2[7] = "abcdefg";
		struct ibv_data_buf parts[2] = {{part1, sizeof(part1)}, {part2, sizeof(part2)}};

		for (int i = 0; i < 3; i++)
			post_recv(b.qp, 400 + i, 1024 * i, 1024);
		fill(msg, sizeof(msg), 4);
		fill(abuf, 700, 5);
		ibv_wr_start(qx);
		qx->wr_id = 410;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qx);
		ibv_wr_set_inline_data(qx, msg, sizeof(msg));
		memset(msg, 0, sizeof(msg)); /* copied already: what is sent is the fill */
		qx->wr_id = 411;
		ibv_wr_send_imm(qx, htobe32(77));
		ibv_wr_set_inline_data_list(qx, 2, parts);
		qx->wr_id = 412;
		ibv_wr_send(qx);
		ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 700);
		complete(qx);
		expect(a.cq, 410, IBV_WC_SEND, IBV_WC_SUCCESS);
		expect(a.cq, 411, IBV_WC_SEND, IBV_WC_SUCCESS);
		expect(a.cq, 412, IBV_WC_SEND, IBV_WC_SUCCESS);
		wc = expect(b.cq, 400, IBV_WC_RECV, IBV_WC_SUCCESS);
		fill(msg, sizeof(msg), 4);
		CHECK(wc.byte_len == sizeof(msg) && !(wc.wc_flags & IBV_WC_WITH_IMM) && !memcmp(bbuf, msg, sizeof(msg)),
		      "inline SEND: len %u", wc.byte_len);
		wc = expect(b.cq, 401, IBV_WC_RECV, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 17 && (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 77 &&
			      !memcmp(bbuf + 1024, part1, 10) && !memcmp(bbuf + 1034, part2, 7),
		      "inline list SEND_WITH_IMM: len %u flags 0x%x", wc.byte_len, wc.wc_flags);
		wc = expect(b.cq, 402, IBV_WC_RECV, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 700 && !memcmp(bbuf + 2048, abuf, 700), "SGE SEND: len %u", wc.byte_len);
	}

	/* Atomics on b's word at 8192. */
	{
		uint64_t *word = (uint64_t *)(bbuf + 8192), *res = (uint64_t *)(abuf + 8192);

		*word = 1000;
		ibv_wr_start(qx);
		qx->wr_id = 500;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_atomic_fetch_add(qx, bmr->rkey, (uintptr_t)word, 23);
		ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)res, 8);
		qx->wr_id = 501;
		ibv_wr_atomic_cmp_swp(qx, bmr->rkey, (uintptr_t)word, 1023, 0x1122334455667788ull);
		ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)res + 8, 8);
		complete(qx);
		expect(a.cq, 500, IBV_WC_FETCH_ADD, IBV_WC_SUCCESS);
		expect(a.cq, 501, IBV_WC_COMP_SWAP, IBV_WC_SUCCESS);
		CHECK(res[0] == 1000 && res[1] == 1023 && *word == 0x1122334455667788ull,
		      "atomics: fetched %llu, compared %llu, word 0x%llx", (unsigned long long)res[0],
		      (unsigned long long)res[1], (unsigned long long)*word);
	}

	/* SEND with invalidate of a key that names nothing: b refuses it
	 * (an invalid request), as rxe does; the QPs are then connected anew. */
	{
		post_recv(b.qp, 600, 0, 64);
		ibv_wr_start(qx);
		qx->wr_id = 601;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send_inv(qx, 0xdead00);
		ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 16);
		complete(qx);
		wc = wait_wc(a.cq);
		CHECK(wc.wr_id == 601 && wc.status != IBV_WC_SUCCESS, "SEND_WITH_INV of no key: %s",
		      ibv_wc_status_str(wc.status));
		wc = wait_wc(b.cq); /* b's receive, failed or flushed */
		CHECK(wc.wr_id == 600 && wc.status != IBV_WC_SUCCESS, "receive of a bad SEND_WITH_INV: %s",
		      ibv_wc_status_str(wc.status));
		connect_pair(&a, &b, A_OPS, 0);
		qx = ibv_qp_to_qp_ex(a.qp);
	}

	/* ibv_wr_abort: nothing posted. */
	memset(bbuf, 0x11, 64);
	fill(abuf, 64, 6);
	ibv_wr_start(qx);
	qx->wr_id = 700;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 64);
	ibv_wr_abort(qx);
	quiet(a.cq, 100);
	for (int i = 0; i < 64; i++)
		CHECK(bbuf[i] == 0x11, "wr_abort: byte %d written", i);

	/* A batch with an error posts nothing; wr_complete returns it. */
	{
		char big[128] = {0};
		struct {
			const char *what;
			int want;
		} cases[] = {{"a setter before any builder", EINVAL},
			     {"inline data past max_inline_data", ENOSPC},
			     {"a builder not asked for at create", EOPNOTSUPP},
			     {"more SGEs than max_send_sge", ENOSPC}};
		struct ibv_sge three[3] = {{(uintptr_t)abuf, 8, amr->lkey}, {(uintptr_t)abuf, 8, amr->lkey},
					   {(uintptr_t)abuf, 8, amr->lkey}};
		struct ibv_qp_init_attr_ex qa;

		for (int c = 0; c < 4; c++) {
			ibv_wr_start(qx);
			qx->wr_id = 800 + c;
			qx->wr_flags = IBV_SEND_SIGNALED;
			if (c == 0)
				ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 8);
			ibv_wr_rdma_write(qx, bmr->rkey, (uintptr_t)bbuf);
			ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 64);
			switch (c) {
			case 1:
				ibv_wr_send(qx);
				ibv_wr_set_inline_data(qx, big, sizeof(big)); /* max_inline_data is 64 */
				break;
			case 2:
				ibv_wr_local_inv(qx, 1234);
				break;
			case 3:
				ibv_wr_send(qx);
				ibv_wr_set_sge_list(qx, 3, three);
				break;
			}
			rc = ibv_wr_complete(qx);
			CHECK(rc == cases[c].want, "%s: wr_complete %d (%s), want %d", cases[c].what, rc, strerror(rc),
			      cases[c].want);
			quiet(a.cq, 50);
			for (int i = 0; i < 64; i++)
				CHECK(bbuf[i] == 0x11, "%s: the batch's WRITE was posted", cases[c].what);
		}

		/* What ibv_create_qp_ex refuses. */
		memset(&qa, 0, sizeof(qa));
		qa.send_cq = qa.recv_cq = a.cq;
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		qa.pd = a.pd;
		qa.qp_type = IBV_QPT_RC;
		qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qa.send_ops_flags = IBV_QP_EX_WITH_TSO;
		errno = 0;
		CHECK(!ibv_create_qp_ex(a.ctx, &qa) && errno == EOPNOTSUPP, "TSO send ops: errno %d", errno);
		qa.qp_type = IBV_QPT_UD;
		qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
		errno = 0;
		CHECK(!ibv_create_qp_ex(a.ctx, &qa) && errno == EOPNOTSUPP, "UD with RDMA WRITE: errno %d", errno);
		qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
		qa.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		qa.create_flags = IBV_QP_CREATE_SCATTER_FCS;
		errno = 0;
		CHECK(!ibv_create_qp_ex(a.ctx, &qa) && errno == EOPNOTSUPP, "create flags: errno %d", errno);
		qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD;
		errno = 0;
		CHECK(!ibv_create_qp_ex(a.ctx, &qa) && errno == EOPNOTSUPP, "XRCD: errno %d", errno);
	}

	/* UD: a SEND through ibv_wr_set_ud_addr. */
	{
		struct ibv_qp *ua = make_qp(&a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND, 0);
		struct ibv_qp *ub = make_qp(&b, IBV_QPT_UD, 0, 0);
		struct ibv_qp_ex *ux = ibv_qp_to_qp_ex(ua);
		struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1,
					 .grh = {.dgid = b.gid, .sgid_index = 1, .hop_limit = 64}};
		struct ibv_ah *h = ibv_create_ah(a.pd, &ah);

		CHECK(ux && h, "UD qp_ex and AH: %s", strerror(errno));
		for (struct ibv_qp *q = ua; q; q = q == ua ? ub : NULL) {
			struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};

			CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
			      "UD INIT");
			at.qp_state = IBV_QPS_RTR;
			CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE), "UD RTR");
			at.qp_state = IBV_QPS_RTS;
			at.sq_psn = 1;
			CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD RTS");
		}
		post_recv(ub, 900, 0, 40 + 256);
		fill(abuf, 256, 7);
		ibv_wr_start(ux);
		ux->wr_id = 901;
		ux->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(ux);
		ibv_wr_set_ud_addr(ux, h, ub->qp_num, 0x11111111);
		ibv_wr_set_sge(ux, amr->lkey, (uintptr_t)abuf, 256);
		complete(ux);
		expect(a.cq, 901, IBV_WC_SEND, IBV_WC_SUCCESS);
		wc = expect(b.cq, 900, IBV_WC_RECV, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 40 + 256 && wc.src_qp == ua->qp_num && (wc.wc_flags & IBV_WC_GRH) &&
			      !memcmp(bbuf + 40, abuf, 256),
		      "UD receive: len %u src_qp %u flags 0x%x", wc.byte_len, wc.src_qp, wc.wc_flags);
		/* Without an address handle: EINVAL, nothing posted. */
		ibv_wr_start(ux);
		ibv_wr_send(ux);
		ibv_wr_set_ud_addr(ux, NULL, ub->qp_num, 0x11111111);
		CHECK(ibv_wr_complete(ux) == EINVAL, "UD send without an AH");
		CHECK(!ibv_destroy_ah(h) && !ibv_destroy_qp(ua) && !ibv_destroy_qp(ub), "UD teardown");
	}
	quiet(a.cq, 20);
	quiet(b.cq, 20);

	/* The ibv_cq_ex poll API: a's QP on a CQ from ibv_create_cq_ex; a
	 * WRITE and an inline SEND of a's, and b's SEND with immediate to a,
	 * read back with ibv_start_poll, ibv_next_poll, ibv_end_poll and the
	 * ibv_wc_read_* functions. */
	{
		struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
		struct ibv_poll_cq_attr pa = {0};
		struct ibv_cq *old = a.cq;
		struct ibv_cq_ex *cx;
		struct {
			uint64_t wr_id;
			enum ibv_wc_opcode op;
			uint32_t len, qpn, src, flags, imm;
		} got[3];
		int k = 0;
		double end;
		char hello[20] = "through ibv_cq_ex!!";

		ca.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
		errno = 0;
		CHECK(!ibv_create_cq_ex(a.ctx, &ca) && errno == EOPNOTSUPP, "cq_ex with timestamps: errno %d", errno);
		ca.wc_flags = IBV_WC_STANDARD_FLAGS;
		cx = ibv_create_cq_ex(a.ctx, &ca);
		CHECK(cx && ibv_cq_ex_to_cq(cx)->context == a.ctx, "create_cq_ex: %s", strerror(errno));
		CHECK(ibv_start_poll(cx, &pa) == ENOENT, "start_poll of an empty CQ");
		a.cq = ibv_cq_ex_to_cq(cx);
		connect_pair(&a, &b, A_OPS, 0);
		CHECK(!ibv_destroy_cq(old), "destroy_cq of the CQ before");
		qx = ibv_qp_to_qp_ex(a.qp);
		{
			struct ibv_sge rs = {.addr = (uintptr_t)abuf + 8192, .length = 64, .lkey = amr->lkey};
			struct ibv_recv_wr rwr = {.wr_id = 1002, .sg_list = &rs, .num_sge = 1}, *rbad;
			struct ibv_sge ss = {.addr = (uintptr_t)bbuf + 4096, .length = 48, .lkey = bmr->lkey};
			struct ibv_send_wr swr = {.wr_id = 1003, .sg_list = &ss, .num_sge = 1,
						  .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
						  .imm_data = htobe32(0x5eed)}, *sbad;

			CHECK(!ibv_post_recv(a.qp, &rwr, &rbad), "post_recv on a");
			post_recv(b.qp, 1004, 0, 64);
			fill(abuf, 100, 8);
			fill(bbuf + 4096, 48, 9);
			ibv_wr_start(qx);
			qx->wr_id = 1000;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write(qx, bmr->rkey, (uintptr_t)bbuf + 1024);
			ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 100);
			qx->wr_id = 1001;
			ibv_wr_send(qx);
			ibv_wr_set_inline_data(qx, hello, sizeof(hello));
			complete(qx);
			CHECK(!ibv_post_send(b.qp, &swr, &sbad), "post_send on b");
		}
		end = now_ms() + 10000;
		while (k < 3) {
			CHECK(now_ms() < end, "%d of 3 completions through the cq_ex within 10 s", k);
			rc = ibv_start_poll(cx, &pa);
			if (rc == ENOENT)
				continue;
			CHECK(!rc, "start_poll: %s", strerror(rc));
			do {
				CHECK(cx->status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)cx->wr_id,
				      ibv_wc_status_str(cx->status));
				got[k].wr_id = cx->wr_id;
				got[k].op = ibv_wc_read_opcode(cx);
				got[k].len = ibv_wc_read_byte_len(cx);
				got[k].qpn = ibv_wc_read_qp_num(cx);
				got[k].src = ibv_wc_read_src_qp(cx);
				got[k].flags = ibv_wc_read_wc_flags(cx);
				got[k].imm = be32toh(ibv_wc_read_imm_data(cx));
				k++;
			} while (k < 3 && (rc = ibv_next_poll(cx)) == 0);
			CHECK(k == 3 || rc == ENOENT, "next_poll: %s", strerror(rc));
			ibv_end_poll(cx);
		}
		for (int i = 0; i < 3; i++) {
			CHECK(got[i].qpn == a.qp->qp_num, "completion %d: qp_num %u", i, got[i].qpn);
			switch (got[i].wr_id) {
			case 1000:
				CHECK(got[i].op == IBV_WC_RDMA_WRITE, "WRITE's opcode %d", got[i].op);
				break;
			case 1001:
				CHECK(got[i].op == IBV_WC_SEND, "SEND's opcode %d", got[i].op);
				break;
			case 1002:
				CHECK(got[i].op == IBV_WC_RECV && got[i].len == 48 && got[i].src == b.qp->qp_num &&
					      (got[i].flags & IBV_WC_WITH_IMM) && got[i].imm == 0x5eed,
				      "RECV: opcode %d len %u src %u flags 0x%x imm 0x%x", got[i].op, got[i].len,
				      got[i].src, got[i].flags, got[i].imm);
				break;
			default:
				CHECK(0, "completion of wr %llu", (unsigned long long)got[i].wr_id);
			}
		}
		CHECK(got[0].wr_id != got[1].wr_id && got[1].wr_id != got[2].wr_id && got[0].wr_id != got[2].wr_id,
		      "a completion twice");
		CHECK(!memcmp(bbuf + 1024, abuf, 100), "WRITE (cq_ex): bytes differ");
		CHECK(!memcmp(abuf + 8192, bbuf + 4096, 48), "b's SEND (cq_ex): bytes differ");
		/* b's two completions, in either order (its SEND's and its
		 * receive of a's are not ordered with each other). */
		for (int i = 0; i < 2; i++) {
			wc = wait_wc(b.cq);
			CHECK(wc.status == IBV_WC_SUCCESS, "b's wr %llu: %s", (unsigned long long)wc.wr_id,
			      ibv_wc_status_str(wc.status));
			if (wc.wr_id == 1004)
				CHECK(wc.opcode == IBV_WC_RECV && wc.byte_len == sizeof(hello) &&
					      !memcmp(bbuf, hello, sizeof(hello)),
				      "inline SEND (cq_ex): len %u", wc.byte_len);
			else
				CHECK(wc.wr_id == 1003 && wc.opcode == IBV_WC_SEND, "b's completion of wr %llu",
				      (unsigned long long)wc.wr_id);
		}
		CHECK(ibv_start_poll(cx, &pa) == ENOENT, "start_poll after the last completion");
		/* ibv_poll_cq on it too, as perftest polls the CQs it makes with
		 * ibv_create_cq_ex. */
		ibv_wr_start(qx);
		qx->wr_id = 1005;
		ibv_wr_rdma_write(qx, bmr->rkey, (uintptr_t)bbuf);
		ibv_wr_set_sge(qx, amr->lkey, (uintptr_t)abuf, 8);
		complete(qx);
		expect(ibv_cq_ex_to_cq(cx), 1005, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
	}

	for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
		CHECK(!ibv_destroy_qp(s->qp), "destroy_qp");
		CHECK(!ibv_destroy_cq(s->cq), "destroy_cq");
	}
	CHECK(!ibv_dereg_mr(amr) && !ibv_dereg_mr(bmr), "dereg_mr");
	CHECK(!ibv_dealloc_pd(a.pd) && !ibv_dealloc_pd(b.pd), "dealloc_pd");
	CHECK(!ibv_close_device(a.ctx) && !ibv_close_device(b.ctx), "close_device");
	ibv_free_device_list(list);
	printf("wr_check: ok\n");
	return 0;
}
