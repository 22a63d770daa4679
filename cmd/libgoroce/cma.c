//go:build !goroce_engine

/*
 * cma.c: the librdmacm entry points libgoroce defines (rdma_*), over the
 * goroce_cm_* functions of cma.go, which run package cm on the devices
 * this library opens. The structs are the system's <rdma/rdma_cma.h>;
 * the symbol versions are libibverbs.map's RDMACM_1.x nodes. A cm_id's
 * verbs context is one of the library's own (opened once, as librdmacm
 * opens every device), so the program's ibv_alloc_pd, ibv_create_cq and
 * ibv_post_send on it are libgoroce's.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <arpa/inet.h>
#include <sys/select.h>
#include <sys/eventfd.h>

#include "cma.h"
#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))
#define FAIL(e, ret) do { errno = (e); return ret; } while (0)
#define IDH(i) (((struct gq_cm_id *)(i))->h)
#define CHH(c) (((struct gq_cm_channel *)(c))->h)
#define QPH(q) (((struct gq_qp *)(q))->h)

/* The devices, opened at the first event channel and kept for the life
 * of the process, with the protection domain of rdma_create_qp(id, NULL,
 * ...) made on each when first asked for. */
static pthread_once_t cm_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t cm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context **cm_ctx;
static struct ibv_pd **cm_pd;
static int cm_nctx;

static void cm_init(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	uintptr_t *hs;

	if (!list)
		return;
	cm_ctx = calloc(n + 1, sizeof(*cm_ctx));
	cm_pd = calloc(n + 1, sizeof(*cm_pd));
	hs = calloc(n + 1, sizeof(*hs));
	if (!cm_ctx || !cm_pd || !hs)
		goto out;
	for (int i = 0; i < n; i++) {
		cm_ctx[i] = ibv_open_device(list[i]);
		if (!cm_ctx[i])
			break;
		hs[i] = ((struct gq_context *)((char *)cm_ctx[i] - offsetof(struct gq_context, vctx.context)))->h;
		cm_nctx = i + 1;
	}
	goroce_cm_init(cm_nctx, hs);
out:
	free(hs);
	ibv_free_device_list(list);
}

static int cm_ready(void)
{
	pthread_once(&cm_once, cm_init);
	return cm_nctx > 0;
}

static void to_sa(const struct sockaddr *s, struct gq_sa *a)
{
	memset(a, 0, sizeof(*a));
	if (!s)
		return;
	if (s->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)s;

		a->addr[10] = a->addr[11] = 0xff;
		memcpy(&a->addr[12], &in->sin_addr, 4);
		a->port = ntohs(in->sin_port);
		a->family = AF_INET;
	} else if (s->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)s;

		memcpy(a->addr, &in6->sin6_addr, 16);
		a->port = ntohs(in6->sin6_port);
		a->family = AF_INET6;
	}
}

void gq_cm_set_addr(struct rdma_cm_id *id, int dst, const struct gq_sa *a)
{
	struct sockaddr_storage *ss = dst ? &id->route.addr.dst_storage : &id->route.addr.src_storage;
	union ibv_gid *gid = dst ? &id->route.addr.addr.ibaddr.dgid : &id->route.addr.addr.ibaddr.sgid;

	memset(ss, 0, sizeof(*ss));
	memcpy(gid->raw, a->addr, 16);
	if (a->family == AF_INET) {
		struct sockaddr_in *in = (void *)ss;

		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, &a->addr[12], 4);
		in->sin_port = htons(a->port);
	} else {
		struct sockaddr_in6 *in6 = (void *)ss;

		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, a->addr, 16);
		in6->sin6_port = htons(a->port);
	}
}

void gq_cm_set_dev(struct rdma_cm_id *id, int dev)
{
	id->verbs = dev >= 0 && dev < cm_nctx ? cm_ctx[dev] : NULL;
	id->port_num = 1;
	id->route.addr.addr.ibaddr.pkey = htons(0xffff);
}

static struct gq_cm_id *new_id(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps)
{
	struct gq_cm_id *i = calloc(1, sizeof(*i));

	if (!i)
		return NULL;
	i->id.channel = ch;
	i->id.context = context;
	i->id.ps = ps;
	i->id.qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	return i;
}

struct rdma_cm_id *gq_cm_child(struct rdma_cm_id *listen, int dev)
{
	struct gq_cm_id *i = new_id(listen->channel, listen->context, listen->ps);

	if (!i)
		return NULL;
	gq_cm_set_dev(&i->id, dev);
	return &i->id;
}

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct gq_cm_channel *c;
	int rc;

	if (!cm_ready())
		FAIL(ENODEV, NULL);
	c = calloc(1, sizeof(*c));
	if (!c)
		FAIL(ENOMEM, NULL);
	/* One count per event: a blocking read waits for one, as on
	 * /dev/infiniband/rdma_cm, and poll() sees it readable while events
	 * wait; a program may make it O_NONBLOCK (EAGAIN). */
	c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	rc = goroce_cm_channel(c->ch.fd, &c->h);
	if (rc) {
		close(c->ch.fd);
		free(c);
		FAIL(rc, NULL);
	}
	return &c->ch;
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	goroce_cm_channel_close(CHH(ch));
	close(ch->fd);
	free(ch);
}

EXPORT int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps)
{
	struct gq_cm_id *i;
	int rc;

	struct rdma_event_channel *own = NULL;

	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP)
		FAIL(EPROTONOSUPPORT, -1);
	if (!ch) {
		/* A synchronous id: a channel of its own, each call waiting
		 * for its event (sync_complete). */
		own = ch = rdma_create_event_channel();
		if (!ch)
			return -1;
	}
	i = new_id(ch, context, ps);
	if (!i) {
		if (own)
			rdma_destroy_event_channel(own);
		FAIL(ENOMEM, -1);
	}
	i->sync = own != NULL;
	rc = goroce_cm_create_id(CHH(ch), &i->id, ps, &i->h);
	if (rc) {
		free(i);
		if (own)
			rdma_destroy_event_channel(own);
		FAIL(rc, -1);
	}
	*id = &i->id;
	return 0;
}

/* sync_complete waits, on a synchronous id, for the event of the call
 * just made and turns its status into the call's result, as librdmacm
 * does: a REJECTED is ECONNREFUSED, any other status its errno. The
 * event stays in id->event until the next call or rdma_destroy_id. An
 * id with a channel of the program's returns at once. */
static int sync_complete(struct rdma_cm_id *id)
{
	struct gq_cm_id *i = (struct gq_cm_id *)id;
	struct rdma_cm_event *e;

	if (!i->sync)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (rdma_get_cm_event(id->channel, &e))
		return -1;
	id->event = e;
	if (e->status) {
		if (e->event == RDMA_CM_EVENT_REJECTED)
			FAIL(ECONNREFUSED, -1);
		FAIL(e->status < 0 ? -e->status : e->status, -1);
	}
	return 0;
}

/* gq_cm_complete is sync_complete for rsocket.c, which drives a
 * synchronous id's connect step by step as librdmacm's rsockets do
 * (ucma_complete): on an O_NONBLOCK channel it fails EAGAIN until the
 * event is there. */
int gq_cm_complete(struct rdma_cm_id *id)
{
	return sync_complete(id);
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct gq_cm_id *i = (struct gq_cm_id *)id;

	goroce_cm_destroy_id(i->h);
	if (id->event)
		rdma_ack_cm_event(id->event);
	if (i->sync)
		rdma_destroy_event_channel(id->channel);
	free(i->qp_init);
	free(i);
	return 0;
}

static struct ibv_pd *default_pd(struct ibv_context *verbs);

/* give_pd gives an id that has its device the device's default PD, as
 * librdmacm does (ucma_get_device: id->pd is the cma_device's PD once the
 * id is bound or resolved, or arrives as a request): programs create
 * their QPs and AHs on id->pd (rdma-core's tests: QP(cmid.pd, ...),
 * AH(cmid.pd, ...)). A PD that cannot be made leaves it NULL, as
 * librdmacm leaves it when its ibv_alloc_pd fails. */
static void give_pd(struct rdma_cm_id *id)
{
	int e = errno;

	if (id && id->verbs && !id->pd)
		id->pd = default_pd(id->verbs);
	errno = e;
}

#define RET(rc) do { int rc_ = (rc); if (rc_) FAIL(rc_, -1); return 0; } while (0)
/* A call's result on an id: its own error, else on a synchronous id its
 * event's (sync_complete). */
#define RET_SYNC(id, rc) do { int rc_ = (rc); if (rc_) FAIL(rc_, -1); return sync_complete(id); } while (0)

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct gq_sa a;
	int rc;

	to_sa(addr, &a);
	if (!a.family)
		FAIL(EAFNOSUPPORT, -1);
	rc = goroce_cm_bind(IDH(id), &a);
	if (rc)
		FAIL(rc, -1);
	give_pd(id);
	return 0;
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	struct gq_sa s, d;
	int rc;

	to_sa(src, &s);
	to_sa(dst, &d);
	if (!d.family)
		FAIL(EAFNOSUPPORT, -1);
	rc = goroce_cm_resolve_addr(IDH(id), &s, &d);
	if (rc)
		FAIL(rc, -1);
	give_pd(id);
	return sync_complete(id);
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	int rc = goroce_cm_resolve_route(IDH(id));

	if (rc)
		FAIL(rc, -1);
	give_pd(id);
	return sync_complete(id);
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	RET(goroce_cm_listen(IDH(id), backlog));
}

static void to_conn(const struct rdma_conn_param *p, struct gq_conn *c)
{
	memset(c, 0, sizeof(*c));
	if (!p)
		return;
	c->given = 1;
	c->priv = p->private_data;
	c->priv_len = p->private_data ? p->private_data_len : 0;
	c->responder_resources = p->responder_resources;
	c->initiator_depth = p->initiator_depth;
	c->retry_count = p->retry_count;
	c->rnr_retry_count = p->rnr_retry_count;
	c->qp_num = p->qp_num;
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct gq_conn c;

	to_conn(param, &c);
	RET_SYNC(id, goroce_cm_connect(IDH(id), id->qp ? QPH(id->qp) : 0, &c));
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct gq_conn c;

	to_conn(param, &c);
	RET_SYNC(id, goroce_cm_accept(IDH(id), id->qp ? QPH(id->qp) : 0, &c));
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *priv, uint8_t len)
{
	RET(goroce_cm_reject(IDH(id), (void *)priv, priv ? len : 0));
}

EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *priv, uint8_t len)
{
	return rdma_reject(id, priv, len);
}

EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	RET_SYNC(id, goroce_cm_disconnect(IDH(id)));
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **event)
{
	struct gq_cm_ev r;
	struct gq_cm_event *e;
	uint64_t one;
	int rc;

	for (;;) {
		ssize_t n = read(ch->fd, &one, sizeof(one));

		if (n == sizeof(one))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		return -1; /* EAGAIN on an O_NONBLOCK channel */
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		FAIL(ENOMEM, -1);
	rc = goroce_cm_get_event(CHH(ch), &r);
	if (rc) {
		free(e);
		FAIL(rc, -1);
	}
	e->ev.id = r.id;
	e->ev.listen_id = r.listen_id;
	give_pd(r.id); /* a connect request's new id */
	e->ev.event = r.event;
	e->ev.status = r.status;
	memcpy(e->priv, r.priv, r.priv_len);
	if (r.ud) {
		struct ibv_ah_attr *ah = &e->ev.param.ud.ah_attr;

		e->ev.param.ud.private_data = r.priv_len ? e->priv : NULL;
		e->ev.param.ud.private_data_len = r.priv_len;
		e->ev.param.ud.qp_num = r.qp_num;
		e->ev.param.ud.qkey = r.qkey;
		ah->is_global = 1;
		ah->port_num = 1;
		ah->sl = r.ah.sl;
		memcpy(ah->grh.dgid.raw, r.ah.dgid, 16);
		ah->grh.flow_label = r.ah.flow_label;
		ah->grh.sgid_index = r.ah.sgid_index;
		ah->grh.hop_limit = r.ah.hop_limit;
		ah->grh.traffic_class = r.ah.traffic_class;
	} else {
		e->ev.param.conn.private_data = r.priv_len ? e->priv : NULL;
		e->ev.param.conn.private_data_len = r.priv_len;
		e->ev.param.conn.responder_resources = r.responder_resources;
		e->ev.param.conn.initiator_depth = r.initiator_depth;
		e->ev.param.conn.retry_count = r.retry_count;
		e->ev.param.conn.rnr_retry_count = r.rnr_retry_count;
		e->ev.param.conn.qp_num = r.qp_num;
	}
	*event = &e->ev;
	return 0;
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	free(event);
	return 0;
}

#define OWN_SEND_CQ 1
#define OWN_RECV_CQ 2

/* default_pd is the device's protection domain for the QPs made with no
 * PD of the program's (rdma_create_qp(id, NULL, ...)), made when first
 * asked for. */
static struct ibv_pd *default_pd(struct ibv_context *verbs)
{
	struct ibv_pd *pd;
	int dev;

	for (dev = 0; dev < cm_nctx && cm_ctx[dev] != verbs; dev++)
		;
	if (dev == cm_nctx)
		FAIL(EINVAL, NULL);
	pthread_mutex_lock(&cm_mu);
	if (!cm_pd[dev])
		cm_pd[dev] = ibv_alloc_pd(verbs);
	pd = cm_pd[dev];
	pthread_mutex_unlock(&cm_mu);
	if (!pd)
		FAIL(ENOMEM, NULL);
	return pd;
}

/* make_cq makes a CQ of n entries with a completion channel of its own
 * for the id, as librdmacm does for a QP given none (rdma_get_send_comp
 * and rdma_get_recv_comp wait on that channel). */
static struct ibv_cq *make_cq(struct rdma_cm_id *id, int n, struct ibv_comp_channel **ch)
{
	struct ibv_cq *cq;

	*ch = ibv_create_comp_channel(id->verbs);
	if (!*ch)
		return NULL;
	cq = ibv_create_cq(id->verbs, n, id, *ch, 0);
	if (!cq) {
		int e = errno;

		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		errno = e;
	}
	return cq;
}

/* drop_cqs frees the CQs (and channels) rdma_create_qp made for id. */
static void drop_cqs(struct rdma_cm_id *id)
{
	struct gq_cm_id *i = (struct gq_cm_id *)id;

	if (i->own & OWN_SEND_CQ) {
		ibv_destroy_cq(id->send_cq);
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq = NULL;
		id->send_cq_channel = NULL;
	}
	if (i->own & OWN_RECV_CQ) {
		ibv_destroy_cq(id->recv_cq);
		ibv_destroy_comp_channel(id->recv_cq_channel);
		id->recv_cq = NULL;
		id->recv_cq_channel = NULL;
	}
	i->own = 0;
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct gq_cm_id *i = (struct gq_cm_id *)id;
	struct ibv_qp_attr a = {};
	struct ibv_qp *qp;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (!id->verbs || !attr)
		FAIL(EINVAL, -1);
	if (id->qp)
		FAIL(EINVAL, -1);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = default_pd(id->verbs);
		if (!attr->pd)
			return -1;
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (attr->pd->context != id->verbs)
		FAIL(EINVAL, -1);
	if ((attr->qp_type == IBV_QPT_UD) != (id->ps == RDMA_PS_UDP))
		FAIL(EINVAL, -1);
	/* The id's SRQ (rdma_create_srq) serves its QP, as in librdmacm. */
	if (!attr->srq && id->srq)
		attr->srq = id->srq;
	if (!attr->send_cq && attr->cap.max_send_wr) {
		attr->send_cq = id->send_cq = make_cq(id, attr->cap.max_send_wr, &id->send_cq_channel);
		if (!attr->send_cq)
			goto err;
		i->own |= OWN_SEND_CQ;
	}
	if (!attr->recv_cq && !attr->srq && attr->cap.max_recv_wr) {
		attr->recv_cq = id->recv_cq = make_cq(id, attr->cap.max_recv_wr, &id->recv_cq_channel);
		if (!attr->recv_cq)
			goto err;
		i->own |= OWN_RECV_CQ;
	}
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp)
		goto err;
	/* As librdmacm leaves it: in INIT, ready for receives; a UD QP in
	 * RTS with rdma_cm's Q_Key, ready for sends too. */
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if (attr->qp_type == IBV_QPT_UD) {
		a.qkey = RDMA_UDP_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask))
		goto err_qp;
	if (attr->qp_type == IBV_QPT_UD) {
		a.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
			goto err_qp;
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
			goto err_qp;
	}
	id->qp = qp;
	id->pd = attr->pd;
	id->qp_type = attr->qp_type;
	id->send_cq = attr->send_cq;
	id->recv_cq = attr->recv_cq;
	id->srq = attr->srq;
	return 0;
err_qp:
	{
		int e = errno;

		ibv_destroy_qp(qp);
		errno = e;
	}
err:
	{
		int e = errno;

		/* The attributes name no CQ the failure freed. */
		if (i->own & OWN_SEND_CQ)
			attr->send_cq = NULL;
		if (i->own & OWN_RECV_CQ)
			attr->recv_cq = NULL;
		drop_cqs(id);
		FAIL(e, -1);
	}
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex x = {};

	if (!attr)
		FAIL(EINVAL, -1);
	x.qp_context = attr->qp_context;
	x.send_cq = attr->send_cq;
	x.recv_cq = attr->recv_cq;
	x.srq = attr->srq;
	x.cap = attr->cap;
	x.qp_type = attr->qp_type;
	x.sq_sig_all = attr->sq_sig_all;
	x.comp_mask = IBV_QP_INIT_ATTR_PD;
	x.pd = pd;
	if (rdma_create_qp_ex(id, &x))
		return -1;
	attr->cap = x.cap;
	attr->send_cq = x.send_cq;
	attr->recv_cq = x.recv_cq;
	return 0;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	drop_cqs(id);
}

/* rdma_create_ep: a synchronous id for res, as librdmacm makes it: a
 * passive one bound to the source address (rdma_get_request makes each
 * request's QP with qp_init_attr and pd); an active one with its address
 * and route resolved and, given qp_init_attr, its QP. */
EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct gq_cm_id *i;

	if (!id || !res)
		FAIL(EINVAL, -1);
	if (rdma_create_id(NULL, &cm_id, NULL, res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP))
		return -1;
	i = (struct gq_cm_id *)cm_id;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cm_id, res->ai_src_addr))
			goto err;
		if (qp_init_attr) {
			i->qp_init = malloc(sizeof(*i->qp_init));
			if (!i->qp_init) {
				errno = ENOMEM;
				goto err;
			}
			*i->qp_init = *qp_init_attr;
			if (res->ai_qp_type)
				i->qp_init->qp_type = res->ai_qp_type;
		}
		cm_id->pd = pd;
		*id = cm_id;
		return 0;
	}
	if (rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000))
		goto err;
	if (rdma_resolve_route(cm_id, 2000))
		goto err;
	if (qp_init_attr) {
		if (res->ai_qp_type)
			qp_init_attr->qp_type = res->ai_qp_type;
		if (rdma_create_qp(cm_id, pd, qp_init_attr))
			goto err;
	}
	*id = cm_id;
	return 0;
err:
	{
		int e = errno;

		rdma_destroy_id(cm_id);
		FAIL(e, -1);
	}
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!optval)
		FAIL(EINVAL, -1);
	if (level != RDMA_OPTION_ID)
		FAIL(ENOSYS, -1); /* RDMA_OPTION_IB_PATH: no SA paths on RoCE here */
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
	case RDMA_OPTION_ID_REUSEADDR:
	case RDMA_OPTION_ID_AFONLY:
		return 0; /* taken; goroce's CM sends traffic class 0 and binds no sockets */
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (optlen != sizeof(uint8_t))
			FAIL(EINVAL, -1);
		RET(goroce_cm_ack_timeout(IDH(id), *(uint8_t *)optval));
	}
	FAIL(ENOSYS, -1);
}

/* rdma_migrate_id moves id's events to ch; with ch NULL the id becomes
 * synchronous, with a channel of its own. A synchronous id's old channel
 * goes with it. */
EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	struct gq_cm_id *i = (struct gq_cm_id *)id;
	struct rdma_event_channel *old = id->channel, *own = NULL;
	int rc;

	if (!ch) {
		if (i->sync)
			return 0;
		own = ch = rdma_create_event_channel();
		if (!ch)
			return -1;
	}
	rc = goroce_cm_migrate(i->h, CHH(ch));
	if (rc) {
		if (own)
			rdma_destroy_event_channel(own);
		FAIL(rc, -1);
	}
	id->channel = ch;
	if (i->sync && old != ch)
		rdma_destroy_event_channel(old);
	i->sync = own != NULL;
	return 0;
}

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id->route.addr.src_addr.sa_family == AF_INET6 ? id->route.addr.src_sin6.sin6_port
							     : id->route.addr.src_sin.sin_port;
}

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id->route.addr.dst_addr.sa_family == AF_INET6 ? id->route.addr.dst_sin6.sin6_port
							     : id->route.addr.dst_sin.sin_port;
}

EXPORT struct ibv_context **rdma_get_devices(int *num)
{
	struct ibv_context **list;

	cm_ready();
	list = calloc(cm_nctx + 1, sizeof(*list));
	if (!list)
		FAIL(ENOMEM, NULL);
	memcpy(list, cm_ctx, cm_nctx * sizeof(*list));
	if (num)
		*num = cm_nctx;
	return list;
}

EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* rdma_init_qp_attr: the attributes that move a QP of the id's to
 * attr->qp_state, as the kernel's rdma_cm gives them. INIT: P_Key index
 * 0 and port 1, and for a connected service the remote access the
 * connection grants (none before a request or connection; REMOTE_WRITE,
 * with READ and ATOMIC when the request asked for responder resources),
 * for UD the Q_Key. RTR and RTS (path, remote QPN, PSNs, timers, RDMA
 * READ depths): what goroce's CM gives the connection's QP, for the id's
 * own QP and an external one alike (goroce_cm_qp_attr), from a request
 * not yet accepted on (rdma-core's external QP test moves its QP before
 * rdma_accept), on the active side from the REP on (CONNECT_RESPONSE);
 * before that EINVAL, as the kernel's answer to an id in REQ_SENT. */
EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	struct gq_qp_attr q;
	enum ibv_qp_state want;
	int conn = 0, rr = 0;

	if (!id || !attr || !mask || !id->verbs)
		FAIL(EINVAL, -1);
	want = attr->qp_state;
	goroce_cm_qp_info(IDH(id), &conn, &rr);
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = want;
	if (id->qp_type == IBV_QPT_UD || id->ps == RDMA_PS_UDP) {
		/* rdma_cm's UD attributes, whatever the state asked */
		attr->port_num = 1;
		attr->qkey = RDMA_UDP_QKEY;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		return 0;
	}
	switch (want) {
	case IBV_QPS_INIT:
		attr->port_num = 1;
		if (conn)
			attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						(rr ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		return 0;
	case IBV_QPS_RTR:
	case IBV_QPS_RTS: {
		int rc = goroce_cm_qp_attr(IDH(id), want, &q, mask);

		if (rc)
			FAIL(rc, -1);
		gq_ibv_qp_attr(&q, attr);
		attr->qp_state = want;
		return 0;
	}
	default:
		FAIL(EINVAL, -1);
	}
}

/* rdma_establish completes an external QP's connection (the id has no
 * QP: rdma_connect announced conn_param->qp_num) once its REP came
 * (CONNECT_RESPONSE) and the program moved its QP to RTS: it sends the
 * RTU, and the passive side is established. An id with a QP of its own,
 * or no connection waiting for it, is EINVAL, as librdmacm answers. */
EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id || id->qp)
		FAIL(EINVAL, -1);
	RET(goroce_cm_establish(IDH(id)));
}

/* What goroce's CM does not do: multicast. */
EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	return 0; /* the CM establishes connections on its own RTU */
}

EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	FAIL(ENOSYS, -1);
}

EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	FAIL(ENOSYS, -1);
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	FAIL(ENOSYS, -1);
}

/* rdma_get_request waits for a connection request to a synchronous
 * listener and returns its id, synchronous too, with its QP made as the
 * listener's rdma_create_ep asked and the CONNECT_REQUEST in id->event. */
EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct gq_cm_id *l = (struct gq_cm_id *)listen;
	struct rdma_cm_event *e;
	struct rdma_cm_id *child;

	if (!l->sync || !id)
		FAIL(EINVAL, -1);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &e))
		return -1;
	if (e->status) {
		int st = e->status < 0 ? -e->status : e->status;

		rdma_ack_cm_event(e);
		FAIL(st, -1);
	}
	if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		rdma_ack_cm_event(e);
		FAIL(EINVAL, -1);
	}
	child = e->id;
	if (rdma_migrate_id(child, NULL))
		goto err;
	if (l->qp_init) {
		struct ibv_qp_init_attr a = *l->qp_init;

		if (rdma_create_qp(child, listen->pd, &a))
			goto err;
	}
	child->event = e;
	*id = child;
	return 0;
err:
	{
		int st = errno;

		rdma_ack_cm_event(e);
		rdma_destroy_id(child); /* rejects the request */
		FAIL(st, -1);
	}
}

static struct sockaddr *dup_sa(const struct sockaddr *s, socklen_t len)
{
	struct sockaddr *d = malloc(len);

	if (d)
		memcpy(d, s, len);
	return d;
}

/* rdma_getaddrinfo, as librdmacm answers it without an ib_acm service:
 * getaddrinfo's first address, as the source (RAI_PASSIVE) or the
 * destination, with the hints' port space and QP type (TCP and RC
 * unless given) and the hints' other address kept. */
EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *r;
	struct addrinfo h = {}, *ai;
	int rc;

	if (!res)
		FAIL(EINVAL, -1);
	r = calloc(1, sizeof(*r));
	if (!r)
		FAIL(ENOMEM, -1);
	if (hints) {
		r->ai_flags = hints->ai_flags;
		r->ai_family = hints->ai_family;
		r->ai_qp_type = hints->ai_qp_type;
		r->ai_port_space = hints->ai_port_space;
		h.ai_family = hints->ai_family;
		if (hints->ai_flags & RAI_PASSIVE)
			h.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
	}
	if (!r->ai_port_space)
		r->ai_port_space = RDMA_PS_TCP;
	if (!r->ai_qp_type)
		r->ai_qp_type = r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	if (node || service) {
		h.ai_socktype = SOCK_STREAM;
		rc = getaddrinfo(node, service, &h, &ai);
		if (rc) {
			free(r);
			return rc;
		}
		r->ai_family = ai->ai_family;
		if (r->ai_flags & RAI_PASSIVE) {
			r->ai_src_addr = dup_sa(ai->ai_addr, ai->ai_addrlen);
			r->ai_src_len = ai->ai_addrlen;
		} else {
			r->ai_dst_addr = dup_sa(ai->ai_addr, ai->ai_addrlen);
			r->ai_dst_len = ai->ai_addrlen;
		}
		freeaddrinfo(ai);
	}
	if (hints && hints->ai_src_addr && !r->ai_src_addr) {
		r->ai_src_addr = dup_sa(hints->ai_src_addr, hints->ai_src_len);
		r->ai_src_len = hints->ai_src_len;
	}
	if (hints && hints->ai_dst_addr && !r->ai_dst_addr) {
		r->ai_dst_addr = dup_sa(hints->ai_dst_addr, hints->ai_dst_len);
		r->ai_dst_len = hints->ai_dst_len;
	}
	if (!r->ai_family)
		r->ai_family = r->ai_src_addr ? r->ai_src_addr->sa_family :
			       r->ai_dst_addr ? r->ai_dst_addr->sa_family : AF_INET;
	*res = r;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* ---- SRQs on an id (librdmacm's rdma_create_srq, _ex, rdma_destroy_srq) ----
 *
 * A basic SRQ through the library's ibv_create_srq, on the PD given, else
 * the device's default one, kept in id->srq for the QP rdma_create_qp
 * makes next. XRC SRQs (and tag matching) need XRC, which goroce lacks:
 * EOPNOTSUPP. */
EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq_init_attr a = {};
	struct ibv_pd *pd;
	struct ibv_srq *srq;

	if (!id || !attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		FAIL(EINVAL, -1); /* librdmacm: the type must be given */
	if (!id->verbs || id->srq)
		FAIL(EINVAL, -1);
	if (attr->srq_type != IBV_SRQT_BASIC)
		FAIL(EOPNOTSUPP, -1);
	pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd : id->pd;
	if (!pd)
		pd = default_pd(id->verbs);
	if (!pd)
		return -1;
	if (pd->context != id->verbs)
		FAIL(EINVAL, -1);
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	srq = ibv_create_srq(pd, &a);
	if (!srq)
		return -1;
	attr->attr = a.attr;
	attr->pd = pd;
	attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	if (!id->pd)
		id->pd = pd;
	id->srq = srq;
	return 0;
}

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex x = {};

	if (!attr)
		FAIL(EINVAL, -1);
	x.srq_context = attr->srq_context;
	x.attr = attr->attr;
	x.srq_type = IBV_SRQT_BASIC;
	x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	x.pd = pd;
	if (rdma_create_srq_ex(id, &x))
		return -1;
	attr->attr = x.attr;
	return 0;
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* ---- ECE on an id ----
 *
 * librdmacm's checks first (EINVAL). goroce's REQ and REP carry no ECE
 * options: rdma_set_local_ece, which asks the CM to send some for an
 * external QP, is EOPNOTSUPP; the remote options read as none (vendor 0,
 * what an rxe peer sends, whose verbs have no ECE either). */
EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		FAIL(EINVAL, -1);
	FAIL(EOPNOTSUPP, -1);
}

EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		FAIL(EINVAL, -1);
	memset(ece, 0, sizeof(*ece));
	return 0;
}
