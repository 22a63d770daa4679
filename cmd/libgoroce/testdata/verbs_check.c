/*
 * verbs_check: a plain libibverbs program (built with -libverbs, run with
 * libgoroce.so preloaded by TestVerbsCheck) that drives what Debian's
 * pingpongs do not: RDMA WRITE, READ, the two atomics and SEND with
 * immediate between two devices of one process, each completion awaited
 * through poll() on the completion channel's fd; a non-blocking channel
 * read with nothing pending; port, P_Key and QP queries; and the errno
 * of what libgoroce refuses.
 * Memory is the program's own: malloc'ed on one side, mmap'ed on the other.
 * Prints "verbs_check: ok" and exits 0, or names the first failure and
 * exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

#define SIZE 8192

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "verbs_check: line %d: ", __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fprintf(stderr, "\n");                               \
			exit(1);                                             \
		}                                                            \
	} while (0)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void open_side(struct side *s, struct ibv_device *dev, char *buf)
{
	struct ibv_qp_init_attr ia = {0};
	struct ibv_qp_attr a = {0};

	s->ctx = ibv_open_device(dev);
	CHECK(s->ctx, "open %s: %s", ibv_get_device_name(dev), strerror(errno));
	CHECK(!ibv_query_gid(s->ctx, 1, 1, &s->gid), "query_gid");
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "alloc_pd");
	s->buf = buf;
	s->mr = ibv_reg_mr(s->pd, buf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "reg_mr: %s", strerror(errno));
	s->ch = ibv_create_comp_channel(s->ctx);
	CHECK(s->ch, "create_comp_channel");
	s->cq = ibv_create_cq(s->ctx, 16, s, s->ch, 0);
	CHECK(s->cq, "create_cq");
	ia.send_cq = ia.recv_cq = s->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->qp, "create_qp: %s", strerror(errno));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "modify INIT");
}

static void connect_side(struct side *s, struct side *peer)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "modify RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify RTS");
}

/* Arm the CQ, wait for its event with poll() on the channel's fd, take and
 * acknowledge the event, and return the one completion. */
static struct ibv_wc wait_wc(struct side *s)
{
	struct ibv_wc wc;
	struct ibv_cq *cq;
	void *cq_ctx;
	struct pollfd p = {.fd = s->ch->fd, .events = POLLIN};
	int n;

	for (;;) {
		n = ibv_poll_cq(s->cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			break;
		CHECK(!ibv_req_notify_cq(s->cq, 0), "req_notify_cq");
		n = ibv_poll_cq(s->cq, 1, &wc); /* one may have come before the arming */
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			break;
		CHECK(poll(&p, 1, 10000) == 1, "no completion event within 10 s");
		CHECK(!ibv_get_cq_event(s->ch, &cq, &cq_ctx), "get_cq_event");
		CHECK(cq == s->cq && cq_ctx == s, "event for another CQ");
		ibv_ack_cq_events(cq, 1);
	}
	CHECK(wc.status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status));
	return wc;
}

static void post(struct side *s, struct ibv_send_wr *wr, uint64_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr *bad;

	wr->sg_list = &sge;
	wr->num_sge = 1;
	wr->send_flags = IBV_SEND_SIGNALED;
	CHECK(!ibv_post_send(s->qp, wr, &bad), "post_send opcode %d", wr->opcode);
}

int main(void)
{
	struct ibv_device **list;
	struct side a = {0}, b = {0};
	int n, flags;
	struct ibv_wc wc;
	struct ibv_cq *cq;
	void *cq_ctx;
	char *abuf = malloc(SIZE);
	char *bbuf = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(abuf && bbuf != MAP_FAILED, "memory");
	list = ibv_get_device_list(&n);
	CHECK(list && n == 2, "want 2 devices, have %d", n);
	open_side(&a, list[0], abuf);
	open_side(&b, list[1], bbuf);
	connect_side(&a, &b);
	connect_side(&b, &a);
	{
		struct ibv_port_attr pa;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;
		__be16 pkey;

		CHECK(!ibv_query_port(a.ctx, 1, &pa) && pa.state == IBV_PORT_ACTIVE &&
			      pa.link_layer == IBV_LINK_LAYER_ETHERNET,
		      "query_port");
		CHECK(!ibv_query_pkey(a.ctx, 1, 0, &pkey) && be16toh(pkey) == 0xffff, "query_pkey");
		CHECK(!ibv_query_qp(a.qp, &qa, IBV_QP_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN, &qia) &&
			      qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == b.qp->qp_num &&
			      qa.cap.max_send_wr >= 8 && qia.qp_type == IBV_QPT_RC,
		      "query_qp");
	}

	/* RDMA WRITE a[0..4096) to b[0..4096). */
	for (int i = 0; i < 4096; i++)
		abuf[i] = (char)(i * 7 + 1);
	memset(bbuf, 0, SIZE);
	{
		struct ibv_send_wr wr = {.wr_id = 1, .opcode = IBV_WR_RDMA_WRITE};

		wr.wr.rdma.remote_addr = (uintptr_t)bbuf;
		wr.wr.rdma.rkey = b.mr->rkey;
		post(&a, &wr, 0, 4096);
		wc = wait_wc(&a);
		CHECK(wc.wr_id == 1 && wc.opcode == IBV_WC_RDMA_WRITE, "WRITE completion");
		CHECK(!memcmp(abuf, bbuf, 4096), "WRITE: data differ");
	}
	/* RDMA READ b[0..4096) back into a[4096..8192). */
	{
		struct ibv_send_wr wr = {.wr_id = 2, .opcode = IBV_WR_RDMA_READ};

		wr.wr.rdma.remote_addr = (uintptr_t)bbuf;
		wr.wr.rdma.rkey = b.mr->rkey;
		post(&a, &wr, 4096, 4096);
		wc = wait_wc(&a);
		CHECK(wc.wr_id == 2 && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 4096, "READ completion");
		CHECK(!memcmp(abuf, abuf + 4096, 4096), "READ: data differ");
	}
	/* Fetch-and-add 5 to b's word at 4096 (0), then compare 5 and swap 42. */
	{
		struct ibv_send_wr wr = {.wr_id = 3, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD};
		uint64_t *word = (uint64_t *)(bbuf + 4096), *res = (uint64_t *)(abuf + 4096);

		*word = 0;
		wr.wr.atomic.remote_addr = (uintptr_t)word;
		wr.wr.atomic.rkey = b.mr->rkey;
		wr.wr.atomic.compare_add = 5;
		post(&a, &wr, 4096, 8);
		wc = wait_wc(&a);
		CHECK(wc.opcode == IBV_WC_FETCH_ADD && *res == 0 && *word == 5, "fetch-add: got %llu, word %llu",
		      (unsigned long long)*res, (unsigned long long)*word);
		wr.wr_id = 4;
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr.atomic.compare_add = 5;
		wr.wr.atomic.swap = 42;
		post(&a, &wr, 4096, 8);
		wc = wait_wc(&a);
		CHECK(wc.opcode == IBV_WC_COMP_SWAP && *res == 5 && *word == 42, "cmp-swap: got %llu, word %llu",
		      (unsigned long long)*res, (unsigned long long)*word);
	}
	/* SEND with immediate a -> b, received on b. */
	{
		struct ibv_sge sge = {.addr = (uintptr_t)bbuf, .length = 64, .lkey = b.mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1}, *rbad;
		struct ibv_send_wr wr = {.wr_id = 6, .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htobe32(0x1234)};

		CHECK(!ibv_post_recv(b.qp, &rwr, &rbad), "post_recv");
		memcpy(abuf, "hello through libgoroce", 24);
		post(&a, &wr, 0, 24);
		wc = wait_wc(&a);
		CHECK(wc.wr_id == 6 && wc.opcode == IBV_WC_SEND, "SEND completion");
		wc = wait_wc(&b);
		CHECK(wc.wr_id == 5 && wc.opcode == IBV_WC_RECV && wc.byte_len == 24 &&
			      (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x1234 &&
			      wc.qp_num == b.qp->qp_num,
		      "RECV completion");
		CHECK(!strcmp(bbuf, "hello through libgoroce"), "SEND: data differ");
	}
	/* A non-blocking channel with nothing pending: EAGAIN, at once. A
	 * completion that came between an arming and the poll after it
	 * (wait_wc) still fired its event, as on an HCA: those are taken
	 * first, and the channel then answers EAGAIN. */
	flags = fcntl(a.ch->fd, F_GETFL);
	CHECK(fcntl(a.ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl");
	for (n = 0; n < 16 && !ibv_get_cq_event(a.ch, &cq, &cq_ctx); n++)
		ibv_ack_cq_events(cq, 1);
	CHECK(n < 16 && errno == EAGAIN, "get_cq_event on an empty channel: %d events, errno %d", n, errno);

	/* SRQs, UD QPs and address handles are served: made, queried and
	 * destroyed; what is still refused, with libibverbs' errno. */
	{
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
		struct ibv_srq_attr sq;
		struct ibv_qp_init_attr ia = {.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_UD,
					     .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1,
					 .grh = {.dgid.raw = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1}, .sgid_index = 1, .hop_limit = 64}};
		struct ibv_ah_attr noglobal = {.port_num = 1};
		struct ibv_srq *srq;
		struct ibv_qp *ud;
		struct ibv_ah *h;

		srq = ibv_create_srq(a.pd, &sa);
		CHECK(srq && sa.attr.max_wr >= 4 && sa.attr.max_sge >= 1, "create_srq: errno %d", errno);
		CHECK(!ibv_query_srq(srq, &sq) && sq.max_wr >= 4 && sq.max_sge >= 1, "query_srq");
		CHECK(!ibv_destroy_srq(srq), "destroy_srq");
		ud = ibv_create_qp(a.pd, &ia);
		CHECK(ud && ud->qp_type == IBV_QPT_UD, "UD create_qp: errno %d", errno);
		CHECK(!ibv_destroy_qp(ud), "destroy_qp of the UD QP");
		h = ibv_create_ah(a.pd, &ah);
		CHECK(h && h->pd == a.pd, "create_ah: errno %d", errno);
		CHECK(!ibv_destroy_ah(h), "destroy_ah");
		errno = 0;
		CHECK(!ibv_create_ah(a.pd, &noglobal) && errno == EINVAL, "create_ah without a GRH: errno %d", errno);
		ia.qp_type = IBV_QPT_XRC_SEND;
		errno = 0;
		CHECK(!ibv_create_qp(a.pd, &ia) && errno == EOPNOTSUPP, "XRC create_qp: errno %d", errno);
		errno = 0;
		CHECK(!ibv_qp_to_qp_ex(a.qp) && errno == EOPNOTSUPP, "qp_to_qp_ex: errno %d", errno);
		CHECK(ibv_dealloc_pd(a.pd) == EBUSY, "dealloc_pd of a PD in use");
		CHECK(ibv_destroy_cq(a.cq) == EBUSY, "destroy_cq of a CQ a QP uses");
	}

	/* Asynchronous events: a QP on an SRQ moved to the error state
	 * reports IBV_EVENT_QP_LAST_WQE_REACHED naming it; the context's
	 * async_fd is readable while the event waits, and a non-blocking
	 * read of an empty queue is EAGAIN. */
	{
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
		struct ibv_srq *srq = ibv_create_srq(a.pd, &sa);
		struct ibv_qp_init_attr ia = {.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
					     .cap = {.max_send_wr = 1, .max_send_sge = 1}};
		struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		struct ibv_async_event ev;
		struct pollfd pfd = {.fd = a.ctx->async_fd, .events = POLLIN};
		struct ibv_qp *qp;
		int fl;

		CHECK(srq, "create_srq for the event: errno %d", errno);
		ia.srq = srq;
		qp = ibv_create_qp(a.pd, &ia);
		CHECK(qp && qp->srq == srq, "create_qp on an SRQ: errno %d", errno);
		fl = fcntl(a.ctx->async_fd, F_GETFL);
		CHECK(fcntl(a.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl async_fd");
		errno = 0;
		CHECK(ibv_get_async_event(a.ctx, &ev) == -1 && errno == EAGAIN, "get_async_event with none: errno %d", errno);
		CHECK(fcntl(a.ctx->async_fd, F_SETFL, fl) == 0, "fcntl async_fd");
		CHECK(!ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "modify_qp INIT");
		qa.qp_state = IBV_QPS_ERR;
		CHECK(!ibv_modify_qp(qp, &qa, IBV_QP_STATE), "modify_qp ERR");
		/* A bound on a wait for an event, not a guess at its timing. */
		CHECK(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "async_fd not readable");
		CHECK(!ibv_get_async_event(a.ctx, &ev), "get_async_event: errno %d", errno);
		CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qp,
		      "event %s for %p, want last WQE reached for %p", ibv_event_type_str(ev.event_type),
		      (void *)ev.element.qp, (void *)qp);
		ibv_ack_async_event(&ev);
		CHECK(!ibv_destroy_qp(qp), "destroy_qp on the SRQ");
		CHECK(!ibv_destroy_srq(srq), "destroy_srq");
	}


	for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
		CHECK(!ibv_destroy_qp(s->qp), "destroy_qp");
		CHECK(!ibv_destroy_cq(s->cq), "destroy_cq");
		CHECK(!ibv_destroy_comp_channel(s->ch), "destroy_comp_channel");
		CHECK(!ibv_dereg_mr(s->mr), "dereg_mr");
		CHECK(!ibv_dealloc_pd(s->pd), "dealloc_pd");
		CHECK(!ibv_close_device(s->ctx), "close_device");
	}
	ibv_free_device_list(list);
	printf("verbs_check: ok\n");
	return 0;
}
