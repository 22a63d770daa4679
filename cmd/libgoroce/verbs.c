//go:build !goroce_engine

/*
 * verbs.c: the libibverbs entry points libgoroce defines, over the
 * goroce_* functions of main.go. The structs are the system's
 * <infiniband/verbs.h>; the symbol versions are libibverbs.map's, so that
 * a program's references (ibv_open_device@IBVERBS_1.1, ...) bind here when
 * the library is preloaded. Calls libgoroce does not define still go to
 * the real libibverbs; the ones that would touch our objects are defined
 * here, those goroce lacks failing with the errno libibverbs gives for a
 * device without them. Verbs that libibverbs makes inline functions over
 * a provider's ops (posting, polling, memory windows, ibv_create_qp_ex,
 * the ibv_wr_* API) are answered by the ops of the context and the QP.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>
#include <sys/eventfd.h>

#include "shim.h"
#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))
#define FAIL(e, ret) do { errno = (e); return ret; } while (0)
/* An int-returning verb's result: libibverbs returns the error number and
 * errno holds it too (the kernel's write() or ioctl() set it; UCX prints
 * strerror(errno) after a failed ibv_modify_qp). */
#define RETERR(rc) do { int rc_ = (rc); if (rc_) errno = rc_; return rc_; } while (0)

#define CTX(c) ((struct gq_context *)((char *)(c) - offsetof(struct gq_context, vctx.context)))
#define QPH(q) (((struct gq_qp *)(q))->h)
#define MRH(m) ((m) ? ((struct gq_mr *)(m))->h : 0)

/* verbs_qp's comp_mask bit (driver.h) for a QP with an ibv_qp_ex. */
#define GQ_VERBS_QP_EX 1

/* The device list: built once, kept for the life of the process, as
 * libibverbs keeps its devices after ibv_free_device_list. */
static pthread_once_t devs_once = PTHREAD_ONCE_INIT;
static struct gq_device *devs;
static int ndevs;

static void init_devices(void)
{
	int n = goroce_ndev();

	devs = calloc(n ? n : 1, sizeof(*devs));
	if (!devs)
		return;
	for (int i = 0; i < n; i++) {
		struct ibv_device *d = &devs[i].dev;

		devs[i].index = i;
		d->node_type = IBV_NODE_CA;
		d->transport_type = IBV_TRANSPORT_IB;
		snprintf(d->name, sizeof(d->name), "goroce%d", i);
		/* As libibverbs names an rxe device: the uverbs node's name and
		 * both sysfs directories, which sysfs.c answers (UCX stats
		 * /dev/infiniband/<dev_name>; readers of ibdev_path find the
		 * ports and GIDs). */
		snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
		snprintf(d->dev_path, sizeof(d->dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/goroce%d", i);
	}
	ndevs = n;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **list;

	pthread_once(&devs_once, init_devices);
	if (!devs)
		FAIL(ENOMEM, NULL);
	list = calloc(ndevs + 1, sizeof(*list));
	if (!list)
		FAIL(ENOMEM, NULL);
	for (int i = 0; i < ndevs; i++)
		list[i] = &devs[i].dev;
	if (num)
		*num = ndevs;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	__be64 guid = 0;

	goroce_dev_guid(((struct gq_device *)device)->index, (uint8_t *)&guid);
	return guid;
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return ((struct gq_device *)device)->index;
}

/* ---- the ops table libibverbs' inline functions call ---- */

/* empty reports whether c holds no completion. The tools busy-poll: an
 * HCA's completions arrive whatever the polling thread does, but here the
 * engine that makes them runs on the same cores as the poller, so a thread
 * that keeps finding the queue empty gives its core away now and then
 * (every yieldEvery empty polls in a row, counted per thread) rather than
 * holding it for a whole time slice while the packet it waits for sits in
 * a socket the engine has no core to read. In poll mode the poller is the
 * engine's receiver: after its first hotPolls empty polls, which Go's poll
 * answers by receiving, it asks the kernel (one poll(2) of the device's
 * sockets) rather than Go whether anything came, and yields less often. */
#ifndef KERNEL_EVERY
#define KERNEL_EVERY 8
#endif
#ifndef HOT_POLLS
#define HOT_POLLS 64
#endif
enum { yieldEvery = 32, kernelEvery = KERNEL_EVERY, hotPolls = HOT_POLLS };
static __thread unsigned empty_polls;

static inline int empty(struct gq_cq *c)
{
	const struct gq_pollboard *b = c->board;

	if (__atomic_load_n(&c->pending, __ATOMIC_ACQUIRE)) {
		empty_polls = 0;
		return 0;
	}
	if (b) {
		struct pollfd fds[GQ_POLL_FDS];

		if (__atomic_load_n(&b->busy, __ATOMIC_ACQUIRE))
			return 0; /* Go's poll looks */
		/* The first hotPolls empty polls of a run go into Go, whose
		 * poll receives at once (one recvmmsg): the answer to what the
		 * thread just did, which it waits for, comes soonest, and asked
		 * of poll(2) first it cost a second system call on arrival
		 * (ib_send_lat 64 B, poll mode: t_typical 11.3 against roced's
		 * 9.5 us; into Go, 9.5). A run longer than that is waiting for
		 * something else, and its polls stay in C. */
		if (empty_polls < hotPolls) {
			empty_polls++;
			return 0;
		}
		/* The system call costs 20-50 times the rest of a poll: a
		 * thread asks at every kernelEvery-th empty poll of its run,
		 * so an arrival waits at most that many loads longer. */
		if ((empty_polls++ - hotPolls) % kernelEvery)
			return 1;
		/* It still gives its core away, at every yieldEvery-th time it
		 * asks: without, ib_send_lat's p99 on a loaded host went from
		 * 40-130 us to 2.4-4 ms in 3 of 5 runs (a time slice: what the
		 * engine's other threads need waited for the spinner's). */
		if ((empty_polls - hotPolls) % (yieldEvery * kernelEvery) == 1)
			sched_yield();
		/* A copy: poll(2) writes revents, and other threads poll too. */
		memcpy(fds, b->fds, b->nfd * sizeof(fds[0]));
		/* Something came, or an error that Go's poll meets: */
		return poll(fds, b->nfd, 0) == 0;
	}
	if (++empty_polls >= yieldEvery) {
		empty_polls = 0;
		sched_yield();
	}
	/* In poll mode without a board, the empty poll goes on into Go,
	 * whose poll receives and handles what has arrived, on this thread. */
	return !c->poll_mode;
}

static int gq_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct gq_wc buf[16];
	int done = 0;

	if (empty((struct gq_cq *)cq))
		return 0;

	while (done < n) {
		int want = n - done < 16 ? n - done : 16;
		int got = goroce_poll_cq(((struct gq_cq *)cq)->h, want, buf);

		if (got < 0)
			return done ? done : -1;
		for (int i = 0; i < got; i++) {
			struct ibv_wc *w = &wc[done + i];

			memset(w, 0, sizeof(*w)); /* a struct of unions: field by field */
			w->wr_id = buf[i].wr_id;
			w->status = buf[i].status;
			w->opcode = buf[i].opcode;
			w->vendor_err = buf[i].vendor_err;
			w->byte_len = buf[i].byte_len;
			/* imm_data is in network order, as it came on the wire (the
			 * engine's is a number); invalidated_rkey, its union, is not. */
			w->imm_data = buf[i].wc_flags & IBV_WC_WITH_IMM ? htobe32(buf[i].imm) : buf[i].imm;
			w->qp_num = buf[i].qp_num;
			w->src_qp = buf[i].src_qp;
			w->wc_flags = buf[i].wc_flags;
			w->pkey_index = buf[i].pkey_index;
			w->slid = buf[i].slid;
			w->sl = buf[i].sl;
			w->dlid_path_bits = buf[i].dlid_path_bits;
		}
		done += got;
		if (got < want)
			break;
	}
	return done;
}

static int gq_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	RETERR(goroce_req_notify_cq(((struct gq_cq *)cq)->h, solicited_only));
}

/* A bind of mw to bind_info's range under rkey (IBV_WR_BIND_MW). */
static void set_bind(struct gq_send *s, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *bi)
{
	s->mw = ((struct gq_mw *)mw)->h;
	s->rkey = rkey;
	s->mr = MRH(bi->mr);
	s->bind_addr = bi->addr;
	s->bind_length = bi->length;
	s->bind_access = bi->mw_access_flags;
}

static int gq_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct gq_send s = {
			.wr_id = wr->wr_id, .sge = wr->sg_list, .num_sge = wr->num_sge,
			.opcode = wr->opcode, .flags = wr->send_flags, .imm = be32toh(wr->imm_data),
		};
		int rc;

		if (wr->num_sge < 0) {
			*bad = wr;
			FAIL(EINVAL, EINVAL);
		}
		switch (wr->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			s.remote_addr = wr->wr.rdma.remote_addr;
			s.rkey = wr->wr.rdma.rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			s.remote_addr = wr->wr.atomic.remote_addr;
			s.rkey = wr->wr.atomic.rkey;
			s.compare_add = wr->wr.atomic.compare_add;
			s.swap = wr->wr.atomic.swap;
			break;
		case IBV_WR_SEND_WITH_INV:
		case IBV_WR_LOCAL_INV:
			s.invalidate_rkey = wr->invalidate_rkey;
			break;
		case IBV_WR_BIND_MW:
			if (!wr->bind_mw.mw) {
				*bad = wr;
				FAIL(EINVAL, EINVAL);
			}
			set_bind(&s, wr->bind_mw.mw, wr->bind_mw.rkey, &wr->bind_mw.bind_info);
			break;
		case IBV_WR_SEND:
		case IBV_WR_SEND_WITH_IMM:
			if (qp->qp_type == IBV_QPT_UD) {
				if (!wr->wr.ud.ah) {
					*bad = wr;
					FAIL(EINVAL, EINVAL);
				}
				s.ah = ((struct gq_ah *)wr->wr.ud.ah)->h;
				s.remote_qpn = wr->wr.ud.remote_qpn;
				s.remote_qkey = wr->wr.ud.remote_qkey;
			}
			break;
		default:
			*bad = wr;
			FAIL(EINVAL, EINVAL);
		}
		/* Inline data is the bytes at the SGEs' addresses, whatever
		 * their lkeys (librdmacm's rdma_post_send passes 0 when it has
		 * no region): gathered here and handed over as bytes no region
		 * covers, as ibv_wr_set_inline_data_list's are. */
		uint8_t inl[GQ_MAX_INLINE];

		if ((wr->send_flags & IBV_SEND_INLINE) && wr->num_sge > 0) {
			size_t total = 0;

			for (int i = 0; i < wr->num_sge; i++) {
				if (wr->sg_list[i].length > sizeof(inl) - total) {
					*bad = wr;
					FAIL(EINVAL, EINVAL);
				}
				memcpy(&inl[total], (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
				total += wr->sg_list[i].length;
			}
			s.copy = total;
			s.inl = inl;
			s.sge = NULL;
			s.num_sge = 0;
		}
		rc = goroce_post_send(QPH(qp), &s);
		if (rc) {
			*bad = wr;
			FAIL(rc, rc);
		}
	}
	return 0;
}

static int gq_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		int rc = wr->num_sge < 0 ? EINVAL :
			goroce_post_recv(((struct gq_qp *)qp)->h, wr->wr_id, wr->sg_list, wr->num_sge);

		if (rc) {
			*bad = wr;
			FAIL(rc, rc);
		}
	}
	return 0;
}

static int gq_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		int rc = wr->num_sge < 0 ? EINVAL :
			goroce_post_srq_recv(((struct gq_srq *)srq)->h, wr->wr_id, wr->sg_list, wr->num_sge);

		if (rc) {
			*bad = wr;
			FAIL(rc, rc);
		}
	}
	return 0;
}

/* ---- devices, ports, GIDs ---- */

static int gq_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
static int gq_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *attr, size_t len);
static struct ibv_qp *gq_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
static struct ibv_cq_ex *gq_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
static struct ibv_mw *gq_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
static int gq_dealloc_mw(struct ibv_mw *mw);
static int gq_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct gq_context *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		FAIL(ENOMEM, NULL);
	/* Asynchronous events: one count per event, so that a blocking read
	 * waits for one as on the kernel's async fd (O_NONBLOCK: EAGAIN),
	 * and poll() sees it readable while events wait. */
	c->vctx.context.async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->vctx.context.async_fd < 0) {
		free(c);
		return NULL;
	}
	rc = goroce_open(((struct gq_device *)device)->index, c->vctx.context.async_fd, &c->h);
	if (rc) {
		close(c->vctx.context.async_fd);
		free(c);
		FAIL(rc, NULL);
	}
	/* An extended context (abi_compat), so that verbs_get_ctx_op finds
	 * query_port and query_device_ex here and every other extended op
	 * NULL: the inline wrappers then fail with EOPNOTSUPP. */
	c->vctx.sz = sizeof(c->vctx);
	c->vctx.query_port = gq_query_port;
	c->vctx.query_device_ex = gq_query_device_ex;
	c->vctx.create_qp_ex = gq_create_qp_ex;
	c->vctx.create_cq_ex = gq_create_cq_ex;
	c->vctx.context.device = device;
	/* A real descriptor, as rxe's /dev/infiniband/uverbsN is: programs
	 * dup() it to share the context (pyverbs' shared-PD tests), and
	 * ibv_import_device() of it refuses with EOPNOTSUPP, which they
	 * take as "not supported". /dev/null answers any command ioctl with
	 * ENOTTY. */
	c->vctx.context.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	c->vctx.context.num_comp_vectors = 1;
	c->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&c->vctx.context.mutex, NULL);
	c->vctx.context.ops.poll_cq = gq_poll_cq;
	c->vctx.context.ops.req_notify_cq = gq_req_notify_cq;
	c->vctx.context.ops.post_send = gq_post_send;
	c->vctx.context.ops.post_recv = gq_post_recv;
	c->vctx.context.ops.post_srq_recv = gq_post_srq_recv;
	c->vctx.context.ops.alloc_mw = gq_alloc_mw;
	c->vctx.context.ops.dealloc_mw = gq_dealloc_mw;
	c->vctx.context.ops.bind_mw = gq_bind_mw;
	return &c->vctx.context;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct gq_context *c = CTX(ctx);

	goroce_close(c->h);
	if (ctx->async_fd >= 0)
		close(ctx->async_fd);
	if (ctx->cmd_fd >= 0)
		close(ctx->cmd_fd);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return 0;
}

/* What goroce's engine holds: transport.MaxWR work requests, transport.MaxSGE SGEs,
 * one P_Key, one port; regions and QPs are bounded by memory. */
enum {
	GQ_MAX_WR = 1 << 15,
	GQ_MAX_SGE = 32,
	GQ_MAX_OBJ = 1 << 20,
	GQ_MAX_RD_ATOM = 128,
};

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	goroce_dev_guid(((struct gq_device *)ctx->device)->index, (uint8_t *)&a->node_guid);
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = ~0ull;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = 0xffffff; /* as rxe: no vendor */
	a->max_qp = GQ_MAX_OBJ;
	a->max_qp_wr = GQ_MAX_WR;
	/* Memory windows of type 1 and 2B (bound to a QP), as rxe. */
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_CURR_QP_STATE_MOD | IBV_DEVICE_MEM_WINDOW |
			      IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	a->max_sge = GQ_MAX_SGE;
	a->max_cq = GQ_MAX_OBJ;
	a->max_cqe = GQ_MAX_WR;
	a->max_mr = 1 << 24; /* transport.MaxRegions */
	a->max_mw = 1 << 24; /* windows share the regions' key table */
	a->max_pd = GQ_MAX_OBJ;
	/* SRQs and AHs are served (ibv_create_srq, ibv_create_ah); a program
	 * that reads the caps before creating them must not find 0. */
	a->max_srq = GQ_MAX_OBJ;
	a->max_srq_wr = GQ_MAX_WR;
	a->max_srq_sge = GQ_MAX_SGE;
	a->max_ah = GQ_MAX_OBJ;
	a->max_qp_rd_atom = GQ_MAX_RD_ATOM;
	a->max_res_rd_atom = GQ_MAX_RD_ATOM * 1024;
	a->max_qp_init_rd_atom = GQ_MAX_RD_ATOM;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
	return 0;
}

static int gq_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *attr, size_t len)
{
	if (in && in->comp_mask)
		FAIL(EINVAL, EINVAL);
	if (len < sizeof(attr->orig_attr))
		FAIL(EINVAL, EINVAL);
	memset(attr, 0, len);
	ibv_query_device(ctx, &attr->orig_attr);
	/* One port, as rxe reports it (libibverbs fills phys_port_cnt_ex
	 * from sysfs' port count; a program that reads only the _ex field,
	 * as pyverbs' tests do, finds no port at 0). */
	if (len >= offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex) + sizeof(attr->phys_port_cnt_ex))
		attr->phys_port_cnt_ex = 1;
	return 0;
}

static int gq_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a = {0};
	int mtu, ngids;

	if (port != 1)
		FAIL(EINVAL, EINVAL);
	goroce_port(CTX(ctx)->h, &mtu, &ngids);
	a.state = IBV_PORT_ACTIVE;
	a.max_mtu = IBV_MTU_4096;
	a.active_mtu = mtu;
	a.gid_tbl_len = ngids;
	a.port_cap_flags = IBV_PORT_CM_SUP;
	a.max_msg_sz = 1u << 31;
	a.pkey_tbl_len = 1;
	a.active_width = 1;  /* 1X */
	a.active_speed = 32; /* 25 Gbps: a figure, not a measurement */
	a.phys_state = 5;    /* LINK_UP */
	a.max_vl_num = 1;
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The pre-extended entry (the name in parentheses: verbs.h makes
 * ibv_query_port a macro over an inline that calls this one when the
 * context has no query_port op). Its struct ends at flags. */
EXPORT int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return gq_query_port(ctx, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, flags) + 1);
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	/* libibverbs: -1 when the entry cannot be read, with errno set (by
	 * the sysfs read or the query ioctl). */
	if (port != 1 || goroce_gid(CTX(ctx)->h, index, gid->raw))
		FAIL(EINVAL, -1);
	return 0;
}

/* driver.h's enum ibv_gid_type_sysfs: 0 IB/RoCE v1, 1 RoCE v2. goroce
 * speaks RoCE v2 only, so every entry is v2. */
EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	static const uint8_t zero[16];
	union ibv_gid g;

	if (ibv_query_gid(ctx, port, index, &g))
		FAIL(EINVAL, -1);
	/* An empty slot: libibverbs answers 0 (IB/RoCE v1) for it. */
	*type = memcmp(g.raw, zero, 16) ? 1 : 0;
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	if (port != 1 || index != 0)
		FAIL(EINVAL, -1);
	*pkey = htobe16(0xffff);
	return 0;
}

/* ---- PDs and MRs ---- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct gq_pd *p = calloc(1, sizeof(*p));

	if (!p)
		FAIL(ENOMEM, NULL);
	goroce_alloc_pd(CTX(ctx)->h, &p->h);
	p->pd.context = ctx;
	return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int rc = goroce_dealloc_pd(((struct gq_pd *)pd)->h);

	if (!rc)
		free(pd);
	RETERR(rc);
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	struct gq_mr *m = calloc(1, sizeof(*m));
	int rc;

	if (!m)
		FAIL(ENOMEM, NULL);
	rc = goroce_reg_mr(((struct gq_pd *)pd)->h, addr, len, iova, access, &m->h,
			   &m->mr.lkey, &m->mr.rkey);
	if (rc) {
		free(m);
		FAIL(rc, NULL);
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = len;
	return &m->mr;
}

EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return reg_mr(pd, addr, len, (uintptr_t)addr, access);
}

EXPORT struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access)
{
	return reg_mr(pd, addr, len, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access)
{
	return reg_mr(pd, addr, len, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int rc = goroce_dereg_mr(((struct gq_mr *)mr)->h);

	if (!rc)
		free(mr);
	RETERR(rc);
}

/* ---- completion channels and CQs ---- */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct gq_channel *c = calloc(1, sizeof(*c));

	if (!c)
		FAIL(ENOMEM, NULL);
	c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	c->ch.context = ctx;
	pthread_mutex_init(&c->mu, NULL);
	return &c->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct gq_channel *c = (struct gq_channel *)ch;

	if (ch->refcnt)
		FAIL(EBUSY, EBUSY);
	close(ch->fd);
	pthread_mutex_destroy(&c->mu);
	free(c->ring);
	free(c);
	return 0;
}

/* Called from Go with an event of cq: queue it, then count it on the
 * eventfd, so that a reader woken by the count finds it queued. */
void gq_channel_push(struct gq_channel *c, struct ibv_cq *cq)
{
	uint64_t one = 1;

	pthread_mutex_lock(&c->mu);
	if (c->len == c->cap) {
		unsigned cap = c->cap ? 2 * c->cap : 16;
		struct ibv_cq **r = malloc(cap * sizeof(*r));

		if (!r) {
			pthread_mutex_unlock(&c->mu);
			return;
		}
		for (unsigned i = 0; i < c->len; i++)
			r[i] = c->ring[(c->head + i) % c->cap];
		free(c->ring);
		c->ring = r;
		c->cap = cap;
		c->head = 0;
	}
	c->ring[(c->head + c->len) % c->cap] = cq;
	c->len++;
	pthread_mutex_unlock(&c->mu);
	if (write(c->ch.fd, &one, sizeof(one)) != sizeof(one))
		perror("libgoroce: completion channel");
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	struct gq_channel *c = (struct gq_channel *)ch;
	uint64_t n;

	/* Blocks, or fails with EAGAIN if the program made the fd non-blocking. */
	if (read(ch->fd, &n, sizeof(n)) != sizeof(n))
		return -1;
	pthread_mutex_lock(&c->mu);
	*cq = c->ring[c->head];
	c->head = (c->head + 1) % c->cap;
	c->len--;
	pthread_mutex_unlock(&c->mu);
	*cq_context = (*cq)->cq_context;
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

static struct gq_cq *create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			       struct ibv_comp_channel *ch, int comp_vector)
{
	struct gq_cq *c = calloc(1, sizeof(*c));
	int rc, depth;

	if (!c)
		FAIL(ENOMEM, NULL);
	if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) {
		free(c);
		FAIL(EINVAL, NULL);
	}
	rc = goroce_create_cq(CTX(ctx)->h, cqe, (struct gq_channel *)ch, &c->cq, &c->h, &depth);
	if (rc) {
		free(c);
		FAIL(rc, NULL);
	}
	c->cq.context = ctx;
	c->cq.channel = ch;
	c->cq.cq_context = cq_context;
	c->cq.cqe = depth;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	pthread_spin_init(&c->lock, PTHREAD_PROCESS_PRIVATE);
	if (ch) {
		pthread_mutex_lock(&ctx->mutex);
		ch->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	return c;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *ch, int comp_vector)
{
	struct gq_cq *c = create_cq(ctx, cqe, cq_context, ch, comp_vector);

	return c ? &c->cq : NULL;
}

/* ---- the ibv_cq_ex poll API ----
 *
 * As rdma-core's providers: start_poll takes the first completion (ENOENT
 * if there is none, and then no end_poll follows), next_poll each next
 * one, end_poll ends the pass; the read_* read the completion taken last,
 * whose wr_id and status are in the ibv_cq_ex. One completion crosses from
 * Go per call; an empty queue is seen in C, as by ibv_poll_cq. */

#define CQX(c) ((struct gq_cq *)(c))

static int take(struct ibv_cq_ex *cqx)
{
	struct gq_cq *c = CQX(cqx);
	int got;

	if (empty(c))
		return ENOENT;
	got = goroce_poll_cq(c->h, 1, &c->cur);
	if (got < 0)
		return EIO; /* the CQ is in error (overrun) */
	if (got == 0)
		return ENOENT;
	cqx->wr_id = c->cur.wr_id;
	cqx->status = c->cur.status;
	return 0;
}

static int cqx_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	int rc;

	if (attr && attr->comp_mask)
		FAIL(EINVAL, EINVAL);
	pthread_spin_lock(&CQX(cqx)->lock);
	rc = take(cqx);
	if (rc)
		pthread_spin_unlock(&CQX(cqx)->lock);
	return rc;
}

static int cqx_next_poll(struct ibv_cq_ex *cqx)
{
	return take(cqx);
}

static void cqx_end_poll(struct ibv_cq_ex *cqx)
{
	pthread_spin_unlock(&CQX(cqx)->lock);
}

static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.opcode;
}

static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.vendor_err;
}

static uint32_t cqx_read_byte_len(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.byte_len;
}

/* The immediate data, or the invalidated rkey (ibv_wc_read_invalidated_rkey). */
static __be32 cqx_read_imm_data(struct ibv_cq_ex *cqx)
{
	struct gq_wc *w = &CQX(cqx)->cur;

	return w->wc_flags & IBV_WC_WITH_IMM ? htobe32(w->imm) : w->imm;
}

static uint32_t cqx_read_qp_num(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.qp_num;
}

static uint32_t cqx_read_src_qp(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.src_qp;
}

static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.wc_flags;
}

static uint32_t cqx_read_slid(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.slid;
}

static uint8_t cqx_read_sl(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.sl;
}

static uint8_t cqx_read_dlid_path_bits(struct ibv_cq_ex *cqx)
{
	return CQX(cqx)->cur.dlid_path_bits;
}

/* The standard fields only: goroce keeps no completion timestamps, VLANs,
 * flow tags or tag matching (EOPNOTSUPP, as a provider without them);
 * no parent domains; IBV_CREATE_CQ_ATTR_SINGLE_THREADED is a hint, and
 * IGNORE_OVERRUN is refused since an overrun is still an error here. */
static struct ibv_cq_ex *gq_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct gq_cq *c;

	if (attr->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS)
		FAIL(EOPNOTSUPP, NULL);
	if (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS)
		FAIL(EOPNOTSUPP, NULL);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		FAIL(EOPNOTSUPP, NULL);
	if (attr->cqe > INT32_MAX)
		FAIL(EINVAL, NULL);
	c = create_cq(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector);
	if (!c)
		return NULL;
	c->cqx.start_poll = cqx_start_poll;
	c->cqx.next_poll = cqx_next_poll;
	c->cqx.end_poll = cqx_end_poll;
	c->cqx.read_opcode = cqx_read_opcode;
	c->cqx.read_vendor_err = cqx_read_vendor_err;
	c->cqx.read_byte_len = cqx_read_byte_len;
	c->cqx.read_imm_data = cqx_read_imm_data;
	c->cqx.read_qp_num = cqx_read_qp_num;
	c->cqx.read_src_qp = cqx_read_src_qp;
	c->cqx.read_wc_flags = cqx_read_wc_flags;
	c->cqx.read_slid = cqx_read_slid;
	c->cqx.read_sl = cqx_read_sl;
	c->cqx.read_dlid_path_bits = cqx_read_dlid_path_bits;
	return &c->cqx;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct ibv_comp_channel *ch = cq->channel;
	int rc = goroce_destroy_cq(((struct gq_cq *)cq)->h);

	if (rc)
		FAIL(rc, rc);
	if (ch) {
		pthread_mutex_lock(&cq->context->mutex);
		ch->refcnt--;
		pthread_mutex_unlock(&cq->context->mutex);
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	pthread_spin_destroy(&((struct gq_cq *)cq)->lock);
	free(cq);
	return 0;
}

/* As rxe: the new depth holds at least cqe entries, keeps every
 * completion waiting in the CQ, and is refused (EINVAL) below their
 * number or beyond the device's max_cqe (rdma-core's test_resize_cq
 * checks both). */
EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	int depth, rc = goroce_resize_cq(((struct gq_cq *)cq)->h, cqe, &depth);

	if (rc)
		RETERR(rc);
	pthread_mutex_lock(&cq->mutex);
	cq->cqe = depth;
	pthread_mutex_unlock(&cq->mutex);
	return 0;
}

/* ---- QPs ---- */

static struct gq_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct gq_qp *q;
	struct gq_qp_init in = {
		.type = attr->qp_type, .sq_sig_all = attr->sq_sig_all,
		.max_send_wr = attr->cap.max_send_wr, .max_recv_wr = attr->cap.max_recv_wr,
		.max_send_sge = attr->cap.max_send_sge, .max_recv_sge = attr->cap.max_recv_sge,
		.max_inline = attr->cap.max_inline_data,
	};
	uint32_t qpn;
	int rc;

	if (!attr->send_cq || !attr->recv_cq)
		FAIL(EINVAL, NULL);
	if (attr->srq)
		in.srq = ((struct gq_srq *)attr->srq)->h;
	in.send_cq = ((struct gq_cq *)attr->send_cq)->h;
	in.recv_cq = ((struct gq_cq *)attr->recv_cq)->h;
	q = calloc(1, sizeof(*q));
	if (!q)
		FAIL(ENOMEM, NULL);
	rc = goroce_create_qp(((struct gq_pd *)pd)->h, &in, (uintptr_t)&q->qp, &q->h, &qpn);
	if (rc) {
		free(q);
		FAIL(rc, NULL);
	}
	attr->cap.max_send_wr = in.max_send_wr;
	attr->cap.max_recv_wr = in.max_recv_wr;
	attr->cap.max_send_sge = in.max_send_sge;
	attr->cap.max_recv_sge = in.max_recv_sge;
	attr->cap.max_inline_data = in.max_inline;
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = attr->srq;
	q->qp.qp_num = qpn;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = attr->qp_type;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	return q;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct gq_qp *q = create_qp(pd, attr);

	return q ? &q->qp : NULL;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct gq_qp_attr a = {
		.state = attr->qp_state, .cur_state = attr->cur_qp_state, .path_mtu = attr->path_mtu,
		.qkey = attr->qkey, .rq_psn = attr->rq_psn, .sq_psn = attr->sq_psn,
		.dest_qp_num = attr->dest_qp_num, .access = attr->qp_access_flags,
		/* The GRH's flow label is 20 bits: the kernel and rxe keep the
		 * low 20 of what the program gives (UCX passes 0xffffffff). */
		.flow_label = attr->ah_attr.grh.flow_label & 0xfffff, .sgid_index = attr->ah_attr.grh.sgid_index,
		.hop_limit = attr->ah_attr.grh.hop_limit, .traffic_class = attr->ah_attr.grh.traffic_class,
		.sl = attr->ah_attr.sl, .port_num = attr->port_num, .pkey_index = attr->pkey_index,
		.en_sqd_async_notify = attr->en_sqd_async_notify,
		.max_rd_atomic = attr->max_rd_atomic, .max_dest_rd_atomic = attr->max_dest_rd_atomic,
		.min_rnr_timer = attr->min_rnr_timer, .timeout = attr->timeout,
		.retry_cnt = attr->retry_cnt, .rnr_retry = attr->rnr_retry,
	};
	int rc;

	/* RoCE addresses by GID: an address vector without a GRH names no
	 * peer (rxe refuses it the same way). */
	if ((mask & IBV_QP_AV) && !attr->ah_attr.is_global)
		FAIL(EINVAL, EINVAL);
	if (mask & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE))
		FAIL(EOPNOTSUPP, EOPNOTSUPP);
	memcpy(a.dgid, attr->ah_attr.grh.dgid.raw, 16);
	rc = goroce_modify_qp(((struct gq_qp *)qp)->h, &a, mask);
	if (!rc && (mask & IBV_QP_STATE))
		qp->state = attr->qp_state;
	RETERR(rc);
}

/* gq_ibv_qp_attr unflattens a QP's attributes (ibv_query_qp's, and
 * rdma_init_qp_attr's in cma.c) into attr, which it clears first. */
void gq_ibv_qp_attr(const struct gq_qp_attr *a, struct ibv_qp_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = attr->cur_qp_state = a->state;
	attr->path_mtu = a->path_mtu;
	attr->path_mig_state = IBV_MIG_MIGRATED;
	attr->qkey = a->qkey;
	attr->rq_psn = a->rq_psn;
	attr->sq_psn = a->sq_psn;
	attr->dest_qp_num = a->dest_qp_num;
	attr->qp_access_flags = a->access;
	attr->cap.max_send_wr = a->max_send_wr;
	attr->cap.max_recv_wr = a->max_recv_wr;
	attr->cap.max_send_sge = a->max_send_sge;
	attr->cap.max_recv_sge = a->max_recv_sge;
	attr->cap.max_inline_data = a->max_inline;
	attr->ah_attr.is_global = 1;
	memcpy(attr->ah_attr.grh.dgid.raw, a->dgid, 16);
	attr->ah_attr.grh.flow_label = a->flow_label;
	attr->ah_attr.grh.sgid_index = a->sgid_index;
	attr->ah_attr.grh.hop_limit = a->hop_limit;
	attr->ah_attr.grh.traffic_class = a->traffic_class;
	attr->ah_attr.sl = a->sl;
	attr->ah_attr.port_num = 1;
	attr->pkey_index = a->pkey_index;
	attr->en_sqd_async_notify = a->en_sqd_async_notify;
	attr->sq_draining = a->sq_draining;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	attr->min_rnr_timer = a->min_rnr_timer;
	attr->port_num = 1;
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			struct ibv_qp_init_attr *init)
{
	struct gq_qp_attr a;
	struct gq_qp_init in;

	goroce_query_qp(((struct gq_qp *)qp)->h, &a, &in);
	gq_ibv_qp_attr(&a, attr);
	memset(init, 0, sizeof(*init));
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->cap = attr->cap;
	init->qp_type = qp->qp_type;
	init->sq_sig_all = in.sq_sig_all;
	qp->state = a.state;
	return 0;
}

static void free_batch(struct gq_batch *b)
{
	if (!b)
		return;
	pthread_spin_destroy(&b->lock);
	free(b->wr);
	free(b->sge);
	free(b->inl);
	free(b);
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	int rc = goroce_destroy_qp(QPH(qp));

	if (rc)
		FAIL(rc, rc);
	free_batch(((struct gq_qp *)qp)->batch);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(qp);
	return 0;
}

/* A QP made by ibv_create_qp_ex has its ibv_qp_ex; one made by
 * ibv_create_qp has none, as with rxe (libibverbs returns NULL; the errno
 * says why). */
EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct gq_qp *q = (struct gq_qp *)qp;

	if (!(q->comp_mask & GQ_VERBS_QP_EX))
		FAIL(EOPNOTSUPP, NULL);
	return &q->qpx;
}

/* ---- the extended work-request API (ibv_wr_*) ----
 *
 * As rdma-core's providers: wr_start opens a batch (and holds the QP's
 * batch lock until wr_complete or wr_abort); each builder (wr_send,
 * wr_rdma_write, ...) starts a work request with the QP's wr_id and
 * wr_flags as they are then; the setters (wr_set_sge, ...) fill the last
 * one. A builder or setter that fails records the batch's error and the
 * calls after it do nothing; wr_complete then posts nothing and returns
 * that error, else posts the batch in one call into Go, stopping at the
 * first request the engine refuses (the ones before it are posted), and
 * returns its errno. wr_abort drops the batch. */

#define BATCH(qpx) (((struct gq_qp *)(qpx))->batch)

/* Which builders each QP type has: the engine's operations. */
enum {
	GQ_QP_COMP_MASK = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
			  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	GQ_RC_OPS = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
		    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
		    IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV,
	GQ_UC_OPS = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
		    IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW,
	GQ_UD_OPS = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
};

/* grow doubles the batch's room, up to the send queue's depth. */
static int grow(struct gq_batch *b)
{
	uint32_t cap = b->cap ? b->cap * 2 : 16;
	void *p;

	if (cap > b->max_wr)
		cap = b->max_wr;

	if (b->cap >= b->max_wr)
		return b->err = ENOSPC; /* as rxe: the send queue is full */
	if (!(p = realloc(b->wr, cap * sizeof(*b->wr))))
		return b->err = ENOMEM;
	b->wr = p;
	if (!(p = realloc(b->sge, (size_t)cap * b->max_sge * sizeof(*b->sge))))
		return b->err = ENOMEM;
	b->sge = p;
	if (b->max_inline) {
		if (!(p = realloc(b->inl, (size_t)cap * b->max_inline)))
			return b->err = ENOMEM;
		b->inl = p;
	}
	b->cap = cap;
	return 0;
}

static struct gq_batch *new_batch(uint64_t ops, uint32_t max_wr, uint32_t max_sge, uint32_t max_inline)
{
	struct gq_batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	pthread_spin_init(&b->lock, PTHREAD_PROCESS_PRIVATE);
	b->ops = ops;
	b->max_wr = max_wr ? max_wr : 1;
	b->max_sge = max_sge ? max_sge : 1;
	b->max_inline = max_inline;
	if (grow(b)) { /* room for 16, or the queue's depth */
		free_batch(b);
		return NULL;
	}
	return b;
}

/* next starts a work request of the batch, or returns NULL (the batch's
 * error set) when it cannot: op (IBV_QP_EX_WITH_*) not asked for at
 * ibv_create_qp_ex, no room. */
static struct gq_send *next(struct ibv_qp_ex *qpx, uint64_t op, uint32_t opcode)
{
	struct gq_batch *b = BATCH(qpx);
	struct gq_send *s;

	if (b->err)
		return NULL;
	if (!(b->ops & op)) {
		b->err = EOPNOTSUPP;
		return NULL;
	}
	if (b->n == b->cap && grow(b))
		return NULL;
	s = &b->wr[b->n++];
	memset(s, 0, sizeof(*s));
	s->wr_id = qpx->wr_id;
	s->flags = qpx->wr_flags;
	s->opcode = opcode;
	return s;
}

/* cur returns the work request the setters fill: the last one started. */
static struct gq_send *cur(struct ibv_qp_ex *qpx)
{
	struct gq_batch *b = BATCH(qpx);

	if (b->err)
		return NULL;
	if (!b->n) {
		b->err = EINVAL; /* a setter before any builder */
		return NULL;
	}
	return &b->wr[b->n - 1];
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct gq_batch *b = BATCH(qpx);

	pthread_spin_lock(&b->lock);
	b->n = 0;
	b->err = 0;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct gq_batch *b = BATCH(qpx);
	int rc = b->err;

	if (!rc && b->n) {
		/* The arrays may have moved as they grew: point each request
		 * at its SGEs and inline bytes now. */
		for (uint32_t i = 0; i < b->n; i++) {
			struct gq_send *s = &b->wr[i];

			s->sge = &b->sge[(size_t)i * b->max_sge];
			if (s->copy)
				s->inl = &b->inl[(size_t)i * b->max_inline];
		}
		rc = goroce_post_batch(QPH(qpx), b->wr, b->n);
	}
	b->n = 0;
	b->err = 0;
	pthread_spin_unlock(&b->lock);
	RETERR(rc);
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct gq_batch *b = BATCH(qpx);

	b->n = 0;
	b->err = 0;
	pthread_spin_unlock(&b->lock);
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	next(qpx, IBV_QP_EX_WITH_SEND, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct gq_send *s = next(qpx, IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM);

	if (s)
		s->imm = be32toh(imm);
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct gq_send *s = next(qpx, IBV_QP_EX_WITH_SEND_WITH_INV, IBV_WR_SEND_WITH_INV);

	if (s)
		s->invalidate_rkey = rkey;
}

static void wr_rdma(struct ibv_qp_ex *qpx, uint64_t op, uint32_t opcode, uint32_t rkey, uint64_t addr,
		    __be32 imm)
{
	struct gq_send *s = next(qpx, op, opcode);

	if (s) {
		s->rkey = rkey;
		s->remote_addr = addr;
		s->imm = be32toh(imm);
	}
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wr_rdma(qpx, IBV_QP_EX_WITH_RDMA_WRITE, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_rdma(qpx, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wr_rdma(qpx, IBV_QP_EX_WITH_RDMA_READ, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t compare,
			      uint64_t swap)
{
	struct gq_send *s = next(qpx, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP);

	if (s) {
		s->rkey = rkey;
		s->remote_addr = addr;
		s->compare_add = compare;
		s->swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct gq_send *s = next(qpx, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD);

	if (s) {
		s->rkey = rkey;
		s->remote_addr = addr;
		s->compare_add = add;
	}
}

static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	struct gq_send *s = next(qpx, IBV_QP_EX_WITH_BIND_MW, IBV_WR_BIND_MW);

	if (!s)
		return;
	if (!mw || !info) {
		BATCH(qpx)->err = EINVAL;
		return;
	}
	set_bind(s, mw, rkey, info);
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct gq_send *s = next(qpx, IBV_QP_EX_WITH_LOCAL_INV, IBV_WR_LOCAL_INV);

	if (s)
		s->invalidate_rkey = rkey;
}

/* What goroce has not: TSO, XRC, atomic write. The batch fails with
 * EOPNOTSUPP. */
static void wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	next(qpx, IBV_QP_EX_WITH_TSO, IBV_WR_TSO);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t srqn)
{
	if (cur(qpx))
		BATCH(qpx)->err = EOPNOTSUPP;
}

static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, const void *data)
{
	next(qpx, IBV_QP_EX_WITH_ATOMIC_WRITE, IBV_WR_ATOMIC_WRITE);
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct gq_send *s = cur(qpx);

	if (!s)
		return;
	if (!ah) {
		BATCH(qpx)->err = EINVAL;
		return;
	}
	s->ah = ((struct gq_ah *)ah)->h;
	s->remote_qpn = qpn;
	s->remote_qkey = qkey;
}

/* The SGE slots of the last request. */
#define SGES(b) (&(b)->sge[(size_t)((b)->n - 1) * (b)->max_sge])

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct gq_send *s = cur(qpx);
	struct gq_batch *b = BATCH(qpx);

	if (!s)
		return;
	s->copy = 0;
	s->num_sge = length ? 1 : 0; /* as rxe: an empty SGE is none */
	SGES(b)[0] = (struct ibv_sge){.addr = addr, .length = length, .lkey = lkey};
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *list)
{
	struct gq_send *s = cur(qpx);
	struct gq_batch *b = BATCH(qpx);

	if (!s)
		return;
	if (n > b->max_sge) {
		b->err = ENOSPC;
		return;
	}
	s->copy = 0;
	s->num_sge = n;
	memcpy(SGES(b), list, n * sizeof(*list));
}

/* Inline data is copied now, as the API promises (the program may reuse
 * its buffer at once). No region covers it: the request carries its
 * length (copy), and Go hands the engine the bytes through a region of
 * its own. */
static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *list)
{
	struct gq_send *s = cur(qpx);
	struct gq_batch *b = BATCH(qpx);
	size_t total = 0;
	uint8_t *dst;

	if (!s)
		return;
	for (size_t i = 0; i < n; i++)
		total += list[i].length;
	if (total > b->max_inline) {
		b->err = ENOSPC; /* as rxe */
		return;
	}
	dst = &b->inl[(size_t)(b->n - 1) * b->max_inline];
	for (size_t i = 0; i < n; i++) {
		memcpy(dst, list[i].addr, list[i].length);
		dst += list[i].length;
	}
	s->flags |= IBV_SEND_INLINE;
	s->copy = total;
	s->num_sge = 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf one = {.addr = addr, .length = length};

	wr_set_inline_data_list(qpx, 1, &one);
}

static struct ibv_qp *gq_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	uint64_t ops = 0, have;
	struct gq_qp *q;

	if (attr->comp_mask & ~GQ_QP_COMP_MASK)
		FAIL(EOPNOTSUPP, NULL); /* XRC, RSS, TSO, source QPN */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != ctx)
		FAIL(EINVAL, NULL);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		FAIL(EOPNOTSUPP, NULL);
	switch (attr->qp_type) {
	case IBV_QPT_RC:
		have = GQ_RC_OPS;
		break;
	case IBV_QPT_UC:
		have = GQ_UC_OPS;
		break;
	case IBV_QPT_UD:
		have = GQ_UD_OPS;
		break;
	default:
		FAIL(EOPNOTSUPP, NULL);
	}
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = attr->send_ops_flags;
		if (ops & ~have)
			FAIL(EOPNOTSUPP, NULL);
	}
	/* ibv_qp_init_attr_ex begins with the fields of ibv_qp_init_attr,
	 * as libibverbs' own ibv_create_qp_ex relies on. */
	q = create_qp(attr->pd, (struct ibv_qp_init_attr *)attr);
	if (!q)
		return NULL;
	q->batch = new_batch(ops, attr->cap.max_send_wr, attr->cap.max_send_sge, attr->cap.max_inline_data);
	if (!q->batch) {
		ibv_destroy_qp(&q->qp);
		FAIL(ENOMEM, NULL);
	}
	/* Every builder is there: one the QP was not created for fails the
	 * batch with EOPNOTSUPP rather than calling through NULL. */
	q->qpx.wr_send = wr_send;
	q->qpx.wr_send_imm = wr_send_imm;
	q->qpx.wr_send_inv = wr_send_inv;
	q->qpx.wr_rdma_write = wr_rdma_write;
	q->qpx.wr_rdma_write_imm = wr_rdma_write_imm;
	q->qpx.wr_rdma_read = wr_rdma_read;
	q->qpx.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	q->qpx.wr_atomic_fetch_add = wr_atomic_fetch_add;
	q->qpx.wr_bind_mw = wr_bind_mw;
	q->qpx.wr_local_inv = wr_local_inv;
	q->qpx.wr_send_tso = wr_send_tso;
	q->qpx.wr_atomic_write = wr_atomic_write;
	q->qpx.wr_set_ud_addr = wr_set_ud_addr;
	q->qpx.wr_set_xrc_srqn = wr_set_xrc_srqn;
	q->qpx.wr_set_inline_data = wr_set_inline_data;
	q->qpx.wr_set_inline_data_list = wr_set_inline_data_list;
	q->qpx.wr_set_sge = wr_set_sge;
	q->qpx.wr_set_sge_list = wr_set_sge_list;
	q->qpx.wr_start = wr_start;
	q->qpx.wr_complete = wr_complete;
	q->qpx.wr_abort = wr_abort;
	q->qpx.comp_mask = 0;
	q->comp_mask = GQ_VERBS_QP_EX;
	return &q->qp;
}

/* ---- memory windows ---- */

static struct ibv_mw *gq_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct gq_mw *m;
	int rc;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
		FAIL(EINVAL, NULL);
	m = calloc(1, sizeof(*m));
	if (!m)
		FAIL(ENOMEM, NULL);
	rc = goroce_alloc_mw(((struct gq_pd *)pd)->h, type, &m->h, &m->mw.rkey);
	if (rc) {
		free(m);
		FAIL(rc, NULL);
	}
	m->mw.context = pd->context;
	m->mw.pd = pd;
	m->mw.type = type;
	m->mw.handle = m->mw.rkey >> 8; /* the key's index: unique while it lives */
	return &m->mw;
}

static int gq_dealloc_mw(struct ibv_mw *mw)
{
	int rc = goroce_dealloc_mw(((struct gq_mw *)mw)->h);

	if (rc)
		FAIL(rc, rc);
	free(mw);
	return 0;
}

/* ibv_bind_mw (inline) has checked that the window is type 1, that a
 * range comes with a region and that the region is of the window's PD.
 * As rxe's provider: a type 1 window is never zero-based; the bind is a
 * work request on qp, and on success the window's rkey is the new key at
 * once (a bind that then fails completes with IBV_WC_MW_BIND_ERR). */
static int gq_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	struct ibv_mw_bind_info *bi = &bind->bind_info;
	uint32_t rkey;
	int rc;

	if (bi->mw_access_flags & IBV_ACCESS_ZERO_BASED)
		FAIL(EINVAL, EINVAL);
	rc = goroce_bind_mw(QPH(qp), ((struct gq_mw *)mw)->h, MRH(bi->mr), bi->addr, bi->length,
			    bi->mw_access_flags, bind->wr_id, bind->send_flags, &rkey);
	if (rc)
		FAIL(rc, rc);
	mw->rkey = rkey;
	return 0;
}


/* ---- shared receive queues ---- */

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct gq_srq *s = calloc(1, sizeof(*s));
	uint32_t max_wr = attr->attr.max_wr, max_sge = attr->attr.max_sge;
	int rc;

	if (!s)
		FAIL(ENOMEM, NULL);
	rc = goroce_create_srq(((struct gq_pd *)pd)->h, &max_wr, &max_sge, attr->attr.srq_limit, (uintptr_t)&s->srq, &s->h);
	if (rc) {
		free(s);
		FAIL(rc, NULL);
	}
	attr->attr.max_wr = max_wr;
	attr->attr.max_sge = max_sge;
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	RETERR(goroce_modify_srq(((struct gq_srq *)srq)->h, attr->max_wr, attr->srq_limit, mask));
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	uint32_t max_wr, max_sge, limit;

	goroce_query_srq(((struct gq_srq *)srq)->h, &max_wr, &max_sge, &limit);
	attr->max_wr = max_wr;
	attr->max_sge = max_sge;
	attr->srq_limit = limit;
	return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	int rc = goroce_destroy_srq(((struct gq_srq *)srq)->h);

	if (rc)
		FAIL(rc, rc);
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(srq);
	return 0;
}

/* ---- address handles (UD) ---- */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct gq_ah_attr a = {
		/* 20 bits, the rest dropped, as by the kernel and rxe. */
		.flow_label = attr->grh.flow_label & 0xfffff, .sgid_index = attr->grh.sgid_index,
		.hop_limit = attr->grh.hop_limit, .traffic_class = attr->grh.traffic_class,
		.sl = attr->sl, .port_num = attr->port_num,
	};
	struct gq_ah *ah;
	int rc;

	/* RoCE addresses by GID: without a GRH the AH names no peer (rxe
	 * refuses it the same way). */
	if (!attr->is_global)
		FAIL(EINVAL, NULL);
	memcpy(a.dgid, attr->grh.dgid.raw, 16);
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		FAIL(ENOMEM, NULL);
	rc = goroce_create_ah(((struct gq_pd *)pd)->h, &a, &ah->h);
	if (rc) {
		free(ah);
		FAIL(rc, NULL);
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	return &ah->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	int rc = goroce_destroy_ah(((struct gq_ah *)ah)->h);

	if (rc)
		FAIL(rc, rc);
	free(ah);
	return 0;
}

/* The address vector that answers a UD receive: the packet's source, from
 * the 40-byte GRH area of the receive buffer (RoCEv2 over IPv4: the IPv4
 * header in its last 20 bytes), sent from the GID the packet came to.
 * libibverbs' own would read a kernel device's GID table; this one reads
 * goroce's (udaddy's server answers each client this way). */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
			       struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	const uint8_t *g = (const uint8_t *)grh;
	union ibv_gid src = {}, dst = {}, gid;
	int i;

	memset(ah, 0, sizeof(*ah));
	ah->port_num = port;
	ah->sl = wc->sl;
	ah->dlid = wc->slid;
	ah->src_path_bits = wc->dlid_path_bits;
	if (!(wc->wc_flags & IBV_WC_GRH) || !grh)
		FAIL(EINVAL, -1); /* RoCE: no GRH, no peer */
	if (g[0] == 0 && g[20] >> 4 == 4) {
		src.raw[10] = src.raw[11] = dst.raw[10] = dst.raw[11] = 0xff;
		memcpy(&src.raw[12], g + 20 + 12, 4);
		memcpy(&dst.raw[12], g + 20 + 16, 4);
		ah->grh.traffic_class = g[21];
	} else {
		uint32_t f = be32toh(grh->version_tclass_flow);

		src = grh->sgid;
		dst = grh->dgid;
		ah->grh.flow_label = f & 0xfffff;
		ah->grh.traffic_class = (f >> 20) & 0xff;
	}
	ah->is_global = 1;
	ah->grh.dgid = src;
	ah->grh.hop_limit = 0xff;
	for (i = 0; ibv_query_gid(ctx, port, i, &gid) == 0; i++) {
		if (!memcmp(gid.raw, dst.raw, 16)) {
			ah->grh.sgid_index = i;
			return 0;
		}
	}
	FAIL(ENOENT, -1);
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;

	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* ---- asynchronous events ---- */

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	uint64_t one;
	uint32_t type;
	uintptr_t elem;

	if (read(ctx->async_fd, &one, sizeof(one)) != sizeof(one))
		return -1; /* errno from read: EAGAIN with O_NONBLOCK */
	if (goroce_async_event(CTX(ctx)->h, &type, &elem))
		FAIL(EAGAIN, -1);
	memset(event, 0, sizeof(*event));
	event->event_type = type;
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = (struct ibv_cq *)elem;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = (struct ibv_srq *)elem;
		break;
	case IBV_EVENT_DEVICE_FATAL:
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		event->element.port_num = 1;
		break;
	default:
		event->element.qp = (struct ibv_qp *)elem;
	}
	return 0;
}

/* Nothing to release: an event holds no reference on its object. */
EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
			int access)
{
	errno = EOPNOTSUPP; /* nothing changed */
	return IBV_REREG_MR_ERR_INPUT;
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	FAIL(EOPNOTSUPP, EOPNOTSUPP);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	FAIL(EOPNOTSUPP, EOPNOTSUPP);
}

/* ---- the rest of libibverbs' public ABI over goroce's objects ----
 *
 * Every public function of libibverbs 44 that takes or returns a verbs
 * object is defined here (TestABICoverage reads the real library's
 * dynamic symbols and checks it), so that none reaches libibverbs' own
 * code, which would read goroce's objects as its providers' and crash.
 * What goroce has is answered; what it lacks fails as libibverbs fails
 * for a provider without the op (dummy_ops.c: EOPNOTSUPP), errno set. */

/* A GID entry as the kernel's query ioctl fills it: every entry RoCE v2,
 * on the device's interface. An empty slot is ENODATA (libibverbs' answer
 * for a zero GID). */
static int gid_entry(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e)
{
	static const uint8_t zero[16];

	memset(e, 0, sizeof(*e));
	if (port != 1 || goroce_gid(CTX(ctx)->h, index, e->gid.raw))
		return EINVAL;
	if (!memcmp(e->gid.raw, zero, 16))
		return ENODATA;
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = goroce_dev_ifindex(CTX(ctx)->h);
	return 0;
}

/* ibv_query_gid_ex (verbs.h's inline passes sizeof(struct
 * ibv_gid_entry)): 0, else the error number, errno set. No flags are
 * defined; any is EOPNOTSUPP, as libibverbs' fallback answers. */
EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	int rc;

	if (flags)
		FAIL(EOPNOTSUPP, EOPNOTSUPP);
	if (entry_size < sizeof(e))
		FAIL(EINVAL, EINVAL);
	rc = gid_entry(ctx, port, index, &e);
	if (rc)
		FAIL(rc, rc);
	memset(entry, 0, entry_size);
	memcpy(entry, &e, sizeof(e));
	return 0;
}

/* ibv_query_gid_table: the table's valid entries, packed, entry_size
 * apart; their count, else minus the error number (EINVAL when they do
 * not fit in max_entries, as libibverbs). */
EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
				    size_t max_entries, uint32_t flags, size_t entry_size)
{
	int mtu, ngids;
	size_t n = 0;

	if (flags)
		FAIL(EOPNOTSUPP, -EOPNOTSUPP);
	if (entry_size < sizeof(struct ibv_gid_entry))
		FAIL(EINVAL, -EINVAL);
	goroce_port(CTX(ctx)->h, &mtu, &ngids);
	for (int i = 0; i < ngids; i++) {
		struct ibv_gid_entry e;

		if (gid_entry(ctx, 1, i, &e))
			continue; /* an empty slot is not listed */
		if (n == max_entries)
			FAIL(EINVAL, -EINVAL);
		memset((char *)entries + n * entry_size, 0, entry_size);
		memcpy((char *)entries + n * entry_size, &e, sizeof(e));
		n++;
	}
	return n;
}

/* The index of pkey in the port's table (one entry, the default P_Key),
 * else -1 with errno, as libibverbs' walk of ibv_query_pkey ends. */
EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	__be16 p;

	for (int i = 0;; i++) {
		if (ibv_query_pkey(ctx, port, i, &p))
			return -1;
		if (p == pkey)
			return i;
	}
}

/* 0: no promise that a message's data lands in order, so a reader must
 * poll for the completion (libibverbs' answer for a provider without the
 * op, and rxe's). goroce writes each packet as it arrives, and a
 * retransmission may rewrite bytes already seen. */
EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	return 0;
}

/* Enhanced Connection Establishment: vendor options goroce has none of
 * (rxe neither: libibverbs' EOPNOTSUPP, which pyverbs' tests skip on). */
EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	FAIL(EOPNOTSUPP, EOPNOTSUPP);
}

EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	FAIL(EOPNOTSUPP, EOPNOTSUPP);
}

/* Importing another process's objects through a shared command fd: the
 * engine's objects live in the process that made them, and cmd_fd is not
 * a kernel verbs file, so there is nothing to import (libibverbs:
 * EOPNOTSUPP for a provider without import). Nothing can have been
 * imported, so the unimports have nothing to undo. */
EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	FAIL(EOPNOTSUPP, NULL);
}

EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t pd_handle)
{
	FAIL(EOPNOTSUPP, NULL);
}

EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	FAIL(EOPNOTSUPP, NULL);
}

EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t dm_handle)
{
	FAIL(EOPNOTSUPP, NULL);
}

EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

/* dma-buf regions are device memory a GPU exports: a NIC reads them by
 * DMA, goroce's engine only through the CPU's mappings (EOPNOTSUPP, as
 * rxe before its dma-buf support). */
EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					uint64_t iova, int fd, int access)
{
	FAIL(EOPNOTSUPP, NULL);
}

/* libibverbs' own resolves the peer's MAC through the kernel's neighbour
 * table for providers that build Ethernet headers themselves; goroce's
 * packets go through UDP sockets, which the kernel addresses. Not
 * provided: minus EOPNOTSUPP (the function returns minus an error
 * number), errno set. */
EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr,
				       uint8_t eth_mac[6], uint16_t *vid)
{
	FAIL(EOPNOTSUPP, -EOPNOTSUPP);
}
