//go:build !goroce_engine

/*
 * rsocket.c: librdmacm's rsocket API (rsocket, rbind, rlisten, raccept,
 * rconnect, rsend, rrecv, rpoll, ...) over libgoroce's own rdma_cm ids
 * and verbs, so that rdma-core's rstream and librspreload.so (which
 * turns an unmodified TCP program's socket calls into these) run over
 * goroce. librdmacm's own rsockets live inside the real library on its
 * private id structures, which goroce's ids are not.
 *
 * The wire protocol is librdmacm's (librdmacm/rsocket.c), so that either
 * end may be the real one (an rxe host's rstream):
 *  - the connect private data (struct rs_conn_data, 40 bytes, network
 *    order): version 1, flags (RS_CONN_FLAG_NET when the host is big
 *    endian; RS_CONN_FLAG_IOMAP with an iomap of size 0: goroce maps
 *    none), the receive credits (the RQ size), the address, rkey and
 *    length (2) of the target SGL array the peer writes buffer grants
 *    into, and the first half of the receive buffer;
 *  - data: RDMA WRITE WITH IMMEDIATE into the peer's granted buffer,
 *    immediate (network order) op 0 (RS_OP_DATA) in bits 31:29 and the
 *    length in 28:0, consuming one zero-length receive of the peer's;
 *  - credits: RS_OP_SGL, the new receive sequence limit in 28:0, with
 *    (when half the receive buffer is free again) a struct rs_sge in
 *    host order (RS_OPT_SWAP_SGL when the peer's flags say otherwise)
 *    written into the peer's target SGL slot;
 *  - RS_OP_CTRL with RS_CTRL_SHUTDOWN (write side closed) or
 *    RS_CTRL_DISCONNECT: how a peer learns of the end, rsockets send no
 *    DREQ; after it the QP goes to the error state (what librdmacm's
 *    ucma_shutdown does on IB/RoCE).
 *
 * SOCK_STREAM only: a SOCK_DGRAM rsocket (UD QPs plus a UDP socket for
 * address resolution) is EOPNOTSUPP, as are riomap/riowrite (the
 * peer's iomap is declared empty) and the keepalive service (SO_KEEPALIVE
 * on). See docs/libgoroce.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <byteswap.h>
#include <endian.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include "cma.h"

#define EXPORT __attribute__((visibility("default")))
#define FAIL(e, ret) do { errno = (e); return ret; } while (0)

/* librdmacm's defaults and limits (rsocket.c), which the peer's sizes
 * are read against: a different default changes no wire format but the
 * figures a program reads back through rgetsockopt. */
#define RS_OLAP_START_SIZE 2048
#define RS_MAX_TRANSFER 65536
#define RS_SNDLOWAT 2048
#define RS_QP_MIN_SIZE 16
#define RS_QP_MAX_SIZE 0xFFFE
#define RS_QP_CTRL_SIZE 4 /* control messages in flight; a power of 2 */
#define RS_CONN_RETRIES 6
#define RS_SGL_SIZE 2 /* target SGL slots */
#define RS_DEF_INLINE 64
#define RS_DEF_SQSIZE 384
#define RS_DEF_RQSIZE 384
#define RS_DEF_MEM (1 << 17)

/* The immediate's op (bits 31:29). */
enum {
	RS_OP_DATA = 0,
	RS_OP_WRITE = 2, /* riowrite's plain writes: never carried in an immediate */
	RS_OP_SGL = 4,
	RS_OP_IOMAP_SGL = 6,
	RS_OP_CTRL = 7,
};
#define MSG(op, data) (((uint32_t)(op) << 29) | (uint32_t)(data))
#define MSG_OP(m) ((m) >> 29)
#define MSG_DATA(m) ((m) & 0x1FFFFFFF)

enum { RS_CTRL_DISCONNECT, RS_CTRL_KEEPALIVE, RS_CTRL_SHUTDOWN };

/* A send's wr_id carries the message it sent (its op and length); a
 * receive's has bit 63 set. */
#define WR_RECV (1ULL << 63)

struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

#define RS_CONN_FLAG_NET (1 << 0)
#define RS_CONN_FLAG_IOMAP (1 << 1)

struct rs_conn_data {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;
	uint8_t reserved[3];
	uint8_t target_iomap_size;
	struct rs_sge target_sgl;
	struct rs_sge data_buf;
};

_Static_assert(sizeof(struct rs_conn_data) == 40, "rs_conn_data is 40 bytes on the wire");

/* States, ordered as librdmacm's: passive, opening, connected, closed. */
enum {
	RS_INIT = 0,
	RS_BOUND = 0x0001,
	RS_LISTENING = 0x0002,
	RS_OPENING = 0x0004,
	RS_RESOLVING_ADDR = RS_OPENING | 0x0010,
	RS_RESOLVING_ROUTE = RS_OPENING | 0x0020,
	RS_CONNECTING = RS_OPENING | 0x0040,
	RS_ACCEPTING = RS_OPENING | 0x0080,
	RS_CONNECTED = 0x0100,
	RS_WRITABLE = 0x0200,
	RS_READABLE = 0x0400,
	RS_CONNECT_RDWR = RS_CONNECTED | RS_READABLE | RS_WRITABLE,
	RS_CONNECT_ERROR = 0x0800,
	RS_DISCONNECTED = 0x1000,
	RS_ERROR = 0x2000,
};

#define OPT_SWAP_SGL 1 /* the peer's byte order differs: swap the SGEs we write */

struct rmsg {
	uint32_t op, data;
};

struct rsk {
	int index; /* the id's channel fd: a descriptor no other rsocket has */
	struct rdma_cm_id *id;
	int state, err, opts, fd_flags, retries;
	uint64_t so_opts, tcp_opts, ipv6_opts;

	/* slock serializes senders, rlock receivers; cq_lock guards the
	 * state below and the CQ; cq_wait_lock lets one thread at a time
	 * block on the completion channel (with cq_lock released, so that a
	 * sender waiting for credits never stops a receiver). */
	pthread_mutex_t slock, rlock, cq_lock, cq_wait_lock;
	int cq_armed, unack_cqe;

	unsigned ctrl_seqno, ctrl_max_seqno;
	uint16_t sseq_no, sseq_comp, rseq_no, rseq_comp;

	int remote_sge;
	struct rs_sge remote_sgl; /* the peer's target SGL array */

	struct ibv_mr *target_mr;
	int target_sge;
	volatile struct rs_sge *target_sgl; /* written by the peer */

	int rbuf_bytes_avail, rbuf_free_offset, rbuf_offset;
	struct ibv_mr *rmr;
	uint8_t *rbuf;

	int sbuf_bytes_avail;
	struct ibv_mr *smr;
	struct ibv_sge ssgl[2];
	uint8_t *sbuf;

	int sqe_avail;
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, sq_inline, rq_size;
	int rmsg_head, rmsg_tail;
	struct rmsg *rmsg;
};

/* ---- the descriptor table ---- */

static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **tab;
static int ntab;

static int tab_set(int fd, struct rsk *rs)
{
	pthread_mutex_lock(&tab_mu);
	if (fd >= ntab) {
		int n = fd + 64;
		struct rsk **t = realloc(tab, n * sizeof(*t));

		if (!t) {
			pthread_mutex_unlock(&tab_mu);
			FAIL(ENOMEM, -1);
		}
		memset(t + ntab, 0, (n - ntab) * sizeof(*t));
		tab = t;
		ntab = n;
	}
	tab[fd] = rs;
	pthread_mutex_unlock(&tab_mu);
	return 0;
}

static struct rsk *lookup(int fd)
{
	struct rsk *rs = NULL;

	pthread_mutex_lock(&tab_mu);
	if (fd >= 0 && fd < ntab)
		rs = tab[fd];
	pthread_mutex_unlock(&tab_mu);
	return rs;
}

#define GET(rs, s, ret) do { if (!((rs) = lookup(s))) FAIL(EBADF, ret); } while (0)

static struct rsk *rs_alloc(const struct rsk *parent)
{
	struct rsk *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->index = -1;
	if (parent) {
		rs->sbuf_size = parent->sbuf_size;
		rs->rbuf_size = parent->rbuf_size;
		rs->sq_inline = parent->sq_inline;
		rs->sq_size = parent->sq_size;
		rs->rq_size = parent->rq_size;
	} else {
		rs->sbuf_size = RS_DEF_MEM;
		rs->rbuf_size = RS_DEF_MEM;
		rs->sq_inline = RS_DEF_INLINE;
		rs->sq_size = RS_DEF_SQSIZE;
		rs->rq_size = RS_DEF_RQSIZE;
	}
	rs->ctrl_max_seqno = RS_QP_CTRL_SIZE;
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cq_lock, NULL);
	pthread_mutex_init(&rs->cq_wait_lock, NULL);
	return rs;
}

static void rs_free(struct rsk *rs)
{
	struct rdma_cm_id *id = rs->id;

	if (rs->index >= 0)
		tab_set(rs->index, NULL);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->target_mr)
		ibv_dereg_mr(rs->target_mr);
	free(rs->sbuf);
	free(rs->rbuf);
	free((void *)rs->target_sgl);
	free(rs->rmsg);
	if (id) {
		struct ibv_cq *cq = id->recv_cq;
		struct ibv_comp_channel *ch = id->recv_cq_channel;

		if (id->qp)
			rdma_destroy_qp(id);
		/* The CQ and channel are the rsocket's (rs_create_ep), not the
		 * id's: rdma_destroy_qp leaves them. */
		if (cq) {
			ibv_ack_cq_events(cq, rs->unack_cqe);
			ibv_destroy_cq(cq);
		}
		if (ch)
			ibv_destroy_comp_channel(ch);
		id->recv_cq = id->send_cq = NULL;
		id->recv_cq_channel = id->send_cq_channel = NULL;
		rdma_destroy_id(id);
	}
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->cq_lock);
	pthread_mutex_destroy(&rs->cq_wait_lock);
	free(rs);
}

/* ---- the endpoint: CQ, QP, buffers ---- */

static void set_qp_size(struct rsk *rs)
{
	struct ibv_device_attr a;
	uint32_t max = RS_QP_MAX_SIZE;

	if (!ibv_query_device(rs->id->verbs, &a) && (uint32_t)a.max_qp_wr < max)
		max = a.max_qp_wr;
	if (rs->sq_size > max)
		rs->sq_size = max;
	else if (rs->sq_size < RS_QP_MIN_SIZE)
		rs->sq_size = RS_QP_MIN_SIZE;
	if (rs->rq_size > max)
		rs->rq_size = max;
	else if (rs->rq_size < RS_QP_MIN_SIZE)
		rs->rq_size = RS_QP_MIN_SIZE;
}

static int post_recv(struct rsk *rs)
{
	/* Data arrives by RDMA WRITE into the receive buffer: the receive
	 * only takes the immediate, so it has no scatter list. */
	struct ibv_recv_wr wr = {.wr_id = WR_RECV}, *bad;
	int rc = ibv_post_recv(rs->id->qp, &wr, &bad);

	if (rc)
		FAIL(rc, -1);
	return 0;
}

static int init_bufs(struct rsk *rs)
{
	struct ibv_pd *pd = rs->id->qp->pd;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	rs->rmsg = calloc(rs->rq_size + 1, sizeof(*rs->rmsg));
	/* Room after the send buffer for RS_QP_CTRL_SIZE control SGEs when
	 * they cannot go inline. */
	rs->sbuf = calloc(rs->sbuf_size + sizeof(struct rs_sge) * RS_QP_CTRL_SIZE, 1);
	rs->target_sgl = calloc(RS_SGL_SIZE, sizeof(struct rs_sge));
	rs->rbuf = calloc(rs->rbuf_size, 1);
	if (!rs->rmsg || !rs->sbuf || !rs->target_sgl || !rs->rbuf)
		FAIL(ENOMEM, -1);
	rs->smr = ibv_reg_mr(pd, rs->sbuf, rs->sbuf_size + sizeof(struct rs_sge) * RS_QP_CTRL_SIZE,
			     IBV_ACCESS_LOCAL_WRITE);
	rs->target_mr = ibv_reg_mr(pd, (void *)rs->target_sgl, RS_SGL_SIZE * sizeof(struct rs_sge), acc);
	rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size, acc);
	if (!rs->smr || !rs->target_mr || !rs->rmr)
		return -1;
	rs->ssgl[0].addr = rs->ssgl[1].addr = (uintptr_t)rs->sbuf;
	rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
	rs->sbuf_bytes_avail = rs->sbuf_size;
	/* The first half of the receive buffer goes out in the connect
	 * data; the second is granted with the first credit update. */
	rs->rbuf_free_offset = rs->rbuf_size >> 1;
	rs->rbuf_bytes_avail = rs->rbuf_size >> 1;
	rs->sqe_avail = rs->sq_size - rs->ctrl_max_seqno;
	rs->rseq_comp = rs->rq_size >> 1;
	return 0;
}

static int create_ep(struct rsk *rs)
{
	struct rdma_cm_id *id = rs->id;
	struct ibv_qp_init_attr a;

	set_qp_size(rs);
	id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
	if (!id->recv_cq_channel)
		return -1;
	if ((rs->fd_flags & O_NONBLOCK) && fcntl(id->recv_cq_channel->fd, F_SETFL, O_NONBLOCK))
		return -1;
	id->recv_cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, id->recv_cq_channel, 0);
	if (!id->recv_cq)
		return -1;
	ibv_req_notify_cq(id->recv_cq, 0);
	id->send_cq_channel = id->recv_cq_channel;
	id->send_cq = id->recv_cq;

	memset(&a, 0, sizeof(a));
	a.qp_context = rs;
	a.send_cq = id->send_cq;
	a.recv_cq = id->recv_cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 1;
	a.cap.max_send_wr = rs->sq_size;
	a.cap.max_recv_wr = rs->rq_size;
	a.cap.max_send_sge = 2;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(id, NULL, &a))
		return -1;
	rs->sq_inline = a.cap.max_inline_data;
	if (init_bufs(rs))
		return -1;
	for (int i = 0; i < rs->rq_size; i++)
		if (post_recv(rs))
			return -1;
	return 0;
}

/* value_to_scale: librdmacm's 8-bit encoding of the iomap size. */
static void format_conn_data(struct rsk *rs, struct rs_conn_data *c)
{
	memset(c, 0, sizeof(*c));
	c->version = 1;
	c->flags = RS_CONN_FLAG_IOMAP | (htonl(1) == 1 ? RS_CONN_FLAG_NET : 0);
	c->credits = htons(rs->rq_size);
	c->target_iomap_size = 0; /* no iomap: riomap is not served */
	c->target_sgl.addr = htobe64((uintptr_t)rs->target_sgl);
	c->target_sgl.length = htonl(RS_SGL_SIZE);
	c->target_sgl.key = htonl(rs->target_mr->rkey);
	c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	c->data_buf.length = htonl(rs->rbuf_size >> 1);
	c->data_buf.key = htonl(rs->rmr->rkey);
}

static void save_conn_data(struct rsk *rs, const struct rs_conn_data *c)
{
	int net = htonl(1) == 1;

	rs->remote_sgl.addr = be64toh(c->target_sgl.addr);
	rs->remote_sgl.length = ntohl(c->target_sgl.length);
	rs->remote_sgl.key = ntohl(c->target_sgl.key);
	/* Slot 0 of the peer's SGL array is what its connect data already
	 * granted: the first update goes to slot 1. */
	rs->remote_sge = 1;
	if (net != !!(c->flags & RS_CONN_FLAG_NET))
		rs->opts |= OPT_SWAP_SGL;
	rs->target_sgl[0].addr = be64toh(c->data_buf.addr);
	rs->target_sgl[0].length = ntohl(c->data_buf.length);
	rs->target_sgl[0].key = ntohl(c->data_buf.key);
	rs->sseq_comp = ntohs(c->credits);
}

/* ---- posting ---- */

static int post_msg(struct rsk *rs, uint32_t msg)
{
	struct ibv_send_wr wr = {0}, *bad;
	int rc;

	wr.wr_id = msg;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htonl(msg);
	rc = ibv_post_send(rs->id->qp, &wr, &bad);
	if (rc)
		FAIL(rc, -1);
	return 0;
}

static int post_write_msg(struct rsk *rs, struct ibv_sge *sgl, int nsge, uint32_t msg, int flags,
			  uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr = {0}, *bad;
	int rc;

	wr.wr_id = msg;
	wr.sg_list = sgl;
	wr.num_sge = nsge;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = flags;
	wr.imm_data = htonl(msg);
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(rs->id->qp, &wr, &bad);
	if (rc)
		FAIL(rc, -1);
	return 0;
}

/* write_data takes the next length bytes of the current target SGE
 * (moving to the next slot when it is used up) before posting, so that
 * a grant the peer writes into that slot meanwhile is not overwritten. */
static int write_data(struct rsk *rs, struct ibv_sge *sgl, int nsge, uint32_t len, int flags)
{
	uint64_t addr;
	uint32_t rkey;

	rs->sseq_no++;
	rs->sqe_avail--;
	rs->sbuf_bytes_avail -= len;
	addr = rs->target_sgl[rs->target_sge].addr;
	rkey = rs->target_sgl[rs->target_sge].key;
	rs->target_sgl[rs->target_sge].addr += len;
	rs->target_sgl[rs->target_sge].length -= len;
	if (!rs->target_sgl[rs->target_sge].length && ++rs->target_sge == RS_SGL_SIZE)
		rs->target_sge = 0;
	return post_write_msg(rs, sgl, nsge, MSG(RS_OP_DATA, len), flags, addr, rkey);
}

static uint32_t sbuf_left(struct rsk *rs)
{
	return (uint32_t)((uintptr_t)&rs->sbuf[rs->sbuf_size] - rs->ssgl[0].addr);
}

static int ctrl_avail(struct rsk *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno;
}

/* send_credits grants the peer more messages (rseq_no + rq_size) and,
 * when half the receive buffer is free, that half. */
static void send_credits(struct rsk *rs)
{
	struct ibv_sge isge;
	struct rs_sge sge;
	uint32_t half = rs->rbuf_size >> 1;

	rs->ctrl_seqno++;
	rs->rseq_comp = rs->rseq_no + (rs->rq_size >> 1);
	if (rs->rbuf_bytes_avail >= (int)half) {
		sge.addr = (uintptr_t)&rs->rbuf[rs->rbuf_free_offset];
		sge.key = rs->rmr->rkey;
		sge.length = half;
		if (rs->opts & OPT_SWAP_SGL) {
			sge.addr = bswap_64(sge.addr);
			sge.key = bswap_32(sge.key);
			sge.length = bswap_32(sge.length);
		}
		if (rs->sq_inline < sizeof(sge)) {
			struct rs_sge *b = (struct rs_sge *)(rs->sbuf + rs->sbuf_size) +
					   (rs->ctrl_seqno & (RS_QP_CTRL_SIZE - 1));

			*b = sge;
			isge.addr = (uintptr_t)b;
			isge.lkey = rs->smr->lkey;
			isge.length = sizeof(sge);
			post_write_msg(rs, &isge, 1, MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size)), 0,
				       rs->remote_sgl.addr + rs->remote_sge * sizeof(struct rs_sge), rs->remote_sgl.key);
		} else {
			isge.addr = (uintptr_t)&sge;
			isge.lkey = 0;
			isge.length = sizeof(sge);
			post_write_msg(rs, &isge, 1, MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size)),
				       IBV_SEND_INLINE,
				       rs->remote_sgl.addr + rs->remote_sge * sizeof(struct rs_sge), rs->remote_sgl.key);
		}
		rs->rbuf_bytes_avail -= half;
		rs->rbuf_free_offset += half;
		if (rs->rbuf_free_offset >= (int)rs->rbuf_size)
			rs->rbuf_free_offset = 0;
		if (++rs->remote_sge == (int)rs->remote_sgl.length)
			rs->remote_sge = 0;
	} else {
		post_msg(rs, MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size)));
	}
}

static void update_credits(struct rsk *rs)
{
	if ((rs->rbuf_bytes_avail >= (int)(rs->rbuf_size >> 1) ||
	     (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0) &&
	    ctrl_avail(rs) && (rs->state & RS_CONNECTED))
		send_credits(rs);
}

/* ---- completions ---- */

static int poll_cq(struct rsk *rs)
{
	struct ibv_wc wc;
	int ret, rcnt = 0;

	while ((ret = ibv_poll_cq(rs->id->recv_cq, 1, &wc)) > 0) {
		if (wc.wr_id & WR_RECV) {
			uint32_t msg;

			if (wc.status != IBV_WC_SUCCESS)
				continue;
			rcnt++;
			msg = ntohl(wc.imm_data);
			switch (MSG_OP(msg)) {
			case RS_OP_SGL:
				rs->sseq_comp = (uint16_t)MSG_DATA(msg);
				break;
			case RS_OP_IOMAP_SGL:
			case RS_OP_WRITE:
				/* We declared no iomap: a peer never sends these. */
				break;
			case RS_OP_CTRL:
				if (MSG_DATA(msg) == RS_CTRL_DISCONNECT) {
					rs->state = RS_DISCONNECTED;
					return 0;
				} else if (MSG_DATA(msg) == RS_CTRL_SHUTDOWN) {
					if (rs->state & RS_WRITABLE) {
						rs->state &= ~RS_READABLE;
					} else {
						rs->state = RS_DISCONNECTED;
						return 0;
					}
				}
				/* RS_CTRL_KEEPALIVE: only that the peer lives. */
				break;
			default:
				rs->rmsg[rs->rmsg_tail].op = MSG_OP(msg);
				rs->rmsg[rs->rmsg_tail].data = MSG_DATA(msg);
				if (++rs->rmsg_tail == rs->rq_size + 1)
					rs->rmsg_tail = 0;
				break;
			}
		} else {
			uint32_t msg = (uint32_t)wc.wr_id;

			switch (MSG_OP(msg)) {
			case RS_OP_SGL:
				rs->ctrl_max_seqno++;
				break;
			case RS_OP_CTRL:
				rs->ctrl_max_seqno++;
				if (MSG_DATA(msg) == RS_CTRL_DISCONNECT)
					rs->state = RS_DISCONNECTED;
				break;
			default:
				rs->sqe_avail++;
				rs->sbuf_bytes_avail += MSG_DATA(msg);
				break;
			}
			if (wc.status != IBV_WC_SUCCESS && (rs->state & RS_CONNECTED)) {
				rs->state = RS_ERROR;
				rs->err = EIO;
			}
		}
	}
	if (rs->state & RS_CONNECTED) {
		while (!ret && rcnt--)
			ret = post_recv(rs);
		if (ret) {
			rs->state = RS_ERROR;
			rs->err = errno;
		}
	}
	return ret;
}

/* get_cq_event waits (or, on an O_NONBLOCK socket, does not) for the
 * armed CQ's event. Called with cq_wait_lock held. */
static int get_cq_event(struct rsk *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	if (!rs->cq_armed)
		return 0;
	if (!ibv_get_cq_event(rs->id->recv_cq_channel, &cq, &ctx)) {
		if (++rs->unack_cqe >= rs->sq_size + rs->rq_size) {
			ibv_ack_cq_events(rs->id->recv_cq, rs->unack_cqe);
			rs->unack_cqe = 0;
		}
		rs->cq_armed = 0;
		return 0;
	}
	if (errno != EAGAIN && errno != EINTR)
		rs->state = RS_ERROR;
	return -1;
}

/* process runs the CQ until test holds (0), the socket errs, or, when
 * nonblock, nothing more is there (-1, EWOULDBLOCK). Called and returns
 * with cq_lock held; while it waits it holds cq_wait_lock instead. */
static int process(struct rsk *rs, int nonblock, int (*test)(struct rsk *))
{
	int ret;

	do {
		update_credits(rs);
		ret = poll_cq(rs);
		if (test(rs)) {
			ret = 0;
			break;
		} else if (ret) {
			break;
		} else if (nonblock) {
			errno = EWOULDBLOCK;
			ret = -1;
		} else if (!rs->cq_armed) {
			/* Arm, then poll once more: what came before the arm
			 * raises no event. */
			ibv_req_notify_cq(rs->id->recv_cq, 0);
			rs->cq_armed = 1;
		} else {
			update_credits(rs);
			pthread_mutex_lock(&rs->cq_wait_lock);
			pthread_mutex_unlock(&rs->cq_lock);
			ret = get_cq_event(rs);
			pthread_mutex_unlock(&rs->cq_wait_lock);
			pthread_mutex_lock(&rs->cq_lock);
		}
	} while (!ret);
	update_credits(rs);
	return ret;
}

static int nonblocking(struct rsk *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

static int can_send(struct rsk *rs)
{
	return rs->sqe_avail && rs->sbuf_bytes_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->target_sgl[rs->target_sge].length != 0;
}

static int conn_can_send(struct rsk *rs)
{
	return can_send(rs) || !(rs->state & RS_WRITABLE);
}

static int conn_can_send_ctrl(struct rsk *rs)
{
	return ctrl_avail(rs) || !(rs->state & RS_CONNECTED);
}

static int have_rdata(struct rsk *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

static int conn_have_rdata(struct rsk *rs)
{
	return have_rdata(rs) || !(rs->state & RS_READABLE);
}

static int all_sends_done(struct rsk *rs)
{
	return ((int)rs->ctrl_max_seqno - (int)rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size ||
	       !(rs->state & RS_CONNECTED);
}

static int poll_all(struct rsk *rs)
{
	return 1;
}

static int is_cq_armed(struct rsk *rs)
{
	return rs->cq_armed;
}

/* ---- connection setup ---- */

/* cm_complete waits for the event of the call just made on the id (or
 * fails EAGAIN on a non-blocking channel), as librdmacm's ucma_complete. */
int gq_cm_complete(struct rdma_cm_id *id);

static int do_connect(struct rsk *rs)
{
	struct rdma_conn_param param;
	struct rs_conn_data creq;
	const struct rs_conn_data *cresp;
	int ret = -1;

	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
	resolve_addr:
		ret = rdma_resolve_addr(rs->id, NULL, &rs->id->route.addr.dst_addr, 1000 << rs->retries++);
		if (!ret)
			goto resolve_route;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			rs->state = RS_RESOLVING_ADDR;
		break;
	case RS_RESOLVING_ADDR:
		ret = gq_cm_complete(rs->id);
		if (ret) {
			if (errno == ETIMEDOUT && rs->retries <= RS_CONN_RETRIES)
				goto resolve_addr;
			break;
		}
		rs->retries = 0;
	resolve_route:
		ret = rdma_resolve_route(rs->id, 1000 << rs->retries++);
		if (!ret)
			goto do_connect;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			rs->state = RS_RESOLVING_ROUTE;
		break;
	case RS_RESOLVING_ROUTE:
		ret = gq_cm_complete(rs->id);
		if (ret) {
			if (errno == ETIMEDOUT && rs->retries <= RS_CONN_RETRIES)
				goto resolve_route;
			break;
		}
	do_connect:
		ret = create_ep(rs);
		if (ret)
			break;
		memset(&param, 0, sizeof(param));
		format_conn_data(rs, &creq);
		param.private_data = &creq;
		param.private_data_len = sizeof(creq);
		param.flow_control = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		rs->retries = 0;
		ret = rdma_connect(rs->id, &param);
		if (!ret)
			goto connected;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			rs->state = RS_CONNECTING;
		break;
	case RS_CONNECTING:
		ret = gq_cm_complete(rs->id);
		if (ret)
			break;
	connected:
		cresp = rs->id->event ? rs->id->event->param.conn.private_data : NULL;
		if (!cresp || rs->id->event->param.conn.private_data_len < sizeof(*cresp) || cresp->version != 1) {
			errno = EOPNOTSUPP;
			ret = -1;
			break;
		}
		save_conn_data(rs, cresp);
		rs->state = RS_CONNECT_RDWR;
		break;
	case RS_ACCEPTING:
		if (!(rs->fd_flags & O_NONBLOCK))
			fcntl(rs->id->channel->fd, F_SETFL, 0);
		ret = gq_cm_complete(rs->id);
		if (ret)
			break;
		rs->state = RS_CONNECT_RDWR;
		break;
	default:
		errno = EINVAL;
		ret = -1;
		break;
	}
	if (ret) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			errno = EINPROGRESS;
		} else {
			rs->state = RS_CONNECT_ERROR;
			rs->err = errno;
		}
	}
	return ret;
}

EXPORT int rsocket(int domain, int type, int protocol)
{
	struct rsk *rs;

	if ((domain != AF_INET && domain != AF_INET6) || type != SOCK_STREAM ||
	    (protocol && protocol != IPPROTO_TCP))
		/* SOCK_DGRAM rsockets (and AF_IB) are not served: EOPNOTSUPP,
		 * on which librspreload.so gives the program a kernel socket. */
		FAIL(EOPNOTSUPP, -1);
	rs = rs_alloc(NULL);
	if (!rs)
		FAIL(ENOMEM, -1);
	if (rdma_create_id(NULL, &rs->id, rs, RDMA_PS_TCP)) {
		int e = errno;

		free(rs);
		FAIL(e, -1);
	}
	rs->id->route.addr.src_addr.sa_family = domain;
	rs->index = rs->id->channel->fd;
	if (tab_set(rs->index, rs)) {
		rs->index = -1;
		rs_free(rs);
		FAIL(ENOMEM, -1);
	}
	return rs->index;
}

EXPORT int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	struct rsk *rs;
	int ret;

	GET(rs, s, -1);
	ret = rdma_bind_addr(rs->id, (struct sockaddr *)addr);
	if (!ret)
		rs->state = RS_BOUND;
	return ret;
}

EXPORT int rlisten(int s, int backlog)
{
	struct rsk *rs;
	int ret = 0;

	GET(rs, s, -1);
	if (rs->state != RS_LISTENING) {
		ret = rdma_listen(rs->id, backlog);
		if (!ret)
			rs->state = RS_LISTENING;
	}
	return ret;
}

/* raccept takes the next connection request. As librdmacm, a
 * non-blocking listener makes the new socket's setup non-blocking, so
 * that rdma_accept does not wait for the peer's RTU (the socket finishes
 * in do_connect); data transfers stay blocking unless set otherwise. */
EXPORT int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsk *rs, *nrs;
	struct rdma_conn_param param;
	const struct rs_conn_data *creq;
	struct rs_conn_data cresp;
	int e;

	GET(rs, s, -1);
	if (rs->state != RS_LISTENING)
		FAIL(EINVAL, -1);
	nrs = rs_alloc(rs);
	if (!nrs)
		FAIL(ENOMEM, -1);
	if (rdma_get_request(rs->id, &nrs->id)) {
		e = errno;
		free(nrs);
		FAIL(e, -1);
	}
	nrs->index = nrs->id->channel->fd;
	if (tab_set(nrs->index, nrs)) {
		e = ENOMEM;
		nrs->index = -1;
		goto err;
	}
	creq = nrs->id->event->param.conn.private_data;
	if (!creq || nrs->id->event->param.conn.private_data_len < sizeof(*creq) || creq->version != 1) {
		e = EOPNOTSUPP;
		goto err;
	}
	if (rs->fd_flags & O_NONBLOCK)
		fcntl(nrs->id->channel->fd, F_SETFL, O_NONBLOCK);
	if (create_ep(nrs)) {
		e = errno;
		goto err;
	}
	save_conn_data(nrs, creq);
	param = nrs->id->event->param.conn;
	format_conn_data(nrs, &cresp);
	param.private_data = &cresp;
	param.private_data_len = sizeof(cresp);
	if (!rdma_accept(nrs->id, &param))
		nrs->state = RS_CONNECT_RDWR;
	else if (errno == EAGAIN || errno == EWOULDBLOCK)
		nrs->state = RS_ACCEPTING;
	else {
		e = errno;
		goto err;
	}
	if (addr && addrlen)
		rgetpeername(nrs->index, addr, addrlen);
	return nrs->index;
err:
	rs_free(nrs);
	FAIL(e, -1);
}

EXPORT int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	struct rsk *rs;

	GET(rs, s, -1);
	if (!addr || len > sizeof(rs->id->route.addr.dst_storage))
		FAIL(EINVAL, -1);
	if (rs->state & RS_OPENING)
		FAIL(EALREADY, -1);
	if (rs->state >= RS_CONNECTED)
		FAIL(EISCONN, -1);
	memcpy(&rs->id->route.addr.dst_addr, addr, len);
	return do_connect(rs);
}

/* ---- data ---- */

static int finish_opening(struct rsk *rs)
{
	if (rs->state & RS_OPENING) {
		if (do_connect(rs)) {
			if (errno == EINPROGRESS)
				errno = EAGAIN;
			return -1;
		}
	}
	return 0;
}

/* copy_in fills dst with len bytes from an iovec cursor. */
static void copy_in(void *dst, const struct iovec **iov, size_t *off, size_t len)
{
	while (len) {
		size_t n = (*iov)->iov_len - *off;

		if (n > len)
			n = len;
		memcpy(dst, (char *)(*iov)->iov_base + *off, n);
		dst = (char *)dst + n;
		len -= n;
		*off += n;
		if (*off == (*iov)->iov_len) {
			(*iov)++;
			*off = 0;
		}
	}
}

/* sendv sends up to the sum of iov's lengths. Each transfer goes through
 * the send buffer (or inline), at most as much as the peer's current
 * grant holds, starting at 2 KiB and doubling to 64 KiB so that the first
 * bytes leave early. */
static ssize_t sendv(int s, const struct iovec *iov, int iovcnt, int flags)
{
	struct rsk *rs;
	size_t len = 0, left, off = 0;
	uint32_t xfer, olen = RS_OLAP_START_SIZE;
	int ret = 0;

	GET(rs, s, -1);
	if (iovcnt < 0)
		FAIL(EINVAL, -1);
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (finish_opening(rs))
		return -1;
	if (!(rs->state & RS_CONNECTED) && !(rs->state & RS_DISCONNECTED) && !(rs->state & RS_ERROR))
		FAIL(ENOTCONN, -1);
	left = len;
	pthread_mutex_lock(&rs->slock);
	pthread_mutex_lock(&rs->cq_lock);
	for (; left; left -= xfer) {
		if (!(rs->state & RS_WRITABLE)) {
			errno = (rs->state & RS_ERROR) ? rs->err : EPIPE;
			ret = -1;
			break;
		}
		if (!can_send(rs)) {
			ret = process(rs, nonblocking(rs, flags), conn_can_send);
			if (ret)
				break;
			if (!(rs->state & RS_WRITABLE)) {
				errno = ECONNRESET;
				ret = -1;
				break;
			}
		}
		if (olen < left) {
			xfer = olen;
			if (olen < RS_MAX_TRANSFER)
				olen <<= 1;
		} else {
			xfer = left;
		}
		if (xfer > (uint32_t)rs->sbuf_bytes_avail)
			xfer = rs->sbuf_bytes_avail;
		if (xfer > rs->target_sgl[rs->target_sge].length)
			xfer = rs->target_sgl[rs->target_sge].length;
		if (xfer <= sbuf_left(rs)) {
			copy_in((void *)(uintptr_t)rs->ssgl[0].addr, &iov, &off, xfer);
			rs->ssgl[0].length = xfer;
			ret = write_data(rs, rs->ssgl, 1, xfer, xfer <= rs->sq_inline ? IBV_SEND_INLINE : 0);
			if (xfer < sbuf_left(rs))
				rs->ssgl[0].addr += xfer;
			else
				rs->ssgl[0].addr = (uintptr_t)rs->sbuf;
		} else {
			/* Wraps the end of the send buffer: two SGEs. */
			rs->ssgl[0].length = sbuf_left(rs);
			copy_in((void *)(uintptr_t)rs->ssgl[0].addr, &iov, &off, rs->ssgl[0].length);
			rs->ssgl[1].length = xfer - rs->ssgl[0].length;
			copy_in(rs->sbuf, &iov, &off, rs->ssgl[1].length);
			ret = write_data(rs, rs->ssgl, 2, xfer, xfer <= rs->sq_inline ? IBV_SEND_INLINE : 0);
			rs->ssgl[0].addr = (uintptr_t)rs->sbuf + rs->ssgl[1].length;
		}
		if (ret)
			break;
	}
	pthread_mutex_unlock(&rs->cq_lock);
	pthread_mutex_unlock(&rs->slock);
	return (ret && left == len) ? -1 : (ssize_t)(len - left);
}

/* peek copies what rrecv would take, taking nothing. */
static size_t peek(struct rsk *rs, uint8_t *buf, size_t len)
{
	size_t left = len;
	int head = rs->rmsg_head, off = rs->rbuf_offset;

	while (left && head != rs->rmsg_tail) {
		uint32_t n = left < rs->rmsg[head].data ? left : rs->rmsg[head].data;
		uint32_t end;

		if (n == rs->rmsg[head].data && ++head == rs->rq_size + 1)
			head = 0;
		left -= n;
		end = rs->rbuf_size - off;
		if (n > end) {
			memcpy(buf, &rs->rbuf[off], end);
			buf += end;
			n -= end;
			off = 0;
		}
		memcpy(buf, &rs->rbuf[off], n);
		buf += n;
		off += n;
	}
	return len - left;
}

/* rrecv takes what has arrived, in order; it goes on returning data the
 * peer sent before it disconnected, then 0. */
EXPORT ssize_t rrecv(int s, void *vbuf, size_t len, int flags)
{
	struct rsk *rs;
	uint8_t *buf = vbuf;
	size_t left = len;
	int ret = 0;

	GET(rs, s, -1);
	if (finish_opening(rs))
		return -1;
	if (rs->state < RS_CONNECTED)
		FAIL(ENOTCONN, -1);
	pthread_mutex_lock(&rs->rlock);
	pthread_mutex_lock(&rs->cq_lock);
	do {
		if (!have_rdata(rs)) {
			ret = process(rs, nonblocking(rs, flags), conn_have_rdata);
			if (ret)
				break;
		}
		if (flags & MSG_PEEK) {
			left = len - peek(rs, buf, left);
			break;
		}
		while (left && have_rdata(rs)) {
			uint32_t n, end;

			if (left < rs->rmsg[rs->rmsg_head].data) {
				n = left;
				rs->rmsg[rs->rmsg_head].data -= left;
			} else {
				rs->rseq_no++;
				n = rs->rmsg[rs->rmsg_head].data;
				if (++rs->rmsg_head == rs->rq_size + 1)
					rs->rmsg_head = 0;
			}
			left -= n;
			end = rs->rbuf_size - rs->rbuf_offset;
			if (n > end) {
				memcpy(buf, &rs->rbuf[rs->rbuf_offset], end);
				rs->rbuf_offset = 0;
				buf += end;
				n -= end;
				rs->rbuf_bytes_avail += end;
			}
			memcpy(buf, &rs->rbuf[rs->rbuf_offset], n);
			rs->rbuf_offset += n;
			buf += n;
			rs->rbuf_bytes_avail += n;
		}
	} while (left && (flags & MSG_WAITALL) && (rs->state & RS_READABLE));
	/* What was read frees buffer and messages: grant them now, not at
	 * the next call (a peer waiting for credits may be all there is). */
	update_credits(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	pthread_mutex_unlock(&rs->rlock);
	if (ret && left == len) {
		if (errno == EWOULDBLOCK && (rs->state & RS_ERROR))
			errno = rs->err;
		return -1;
	}
	return len - left;
}

EXPORT ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *slen)
{
	ssize_t n = rrecv(s, buf, len, flags);

	if (n > 0 && src)
		rgetpeername(s, src, slen);
	return n;
}

/* Receives into the first buffer only, as librdmacm's rrecvv: a short
 * read, which a stream's reader takes. */
EXPORT ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		FAIL(EOPNOTSUPP, -1);
	if (!msg->msg_iovlen)
		return 0;
	return rrecv(s, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags);
}

EXPORT ssize_t rread(int s, void *buf, size_t n)
{
	return rrecv(s, buf, n, 0);
}

EXPORT ssize_t rreadv(int s, const struct iovec *iov, int n)
{
	if (n <= 0)
		FAIL(EINVAL, -1);
	return rrecv(s, iov[0].iov_base, iov[0].iov_len, 0);
}

EXPORT ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

	return sendv(s, &iov, 1, flags);
}

EXPORT ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *dst, socklen_t dlen)
{
	if (dst || dlen)
		FAIL(EISCONN, -1);
	return rsend(s, buf, len, flags);
}

EXPORT ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		FAIL(EOPNOTSUPP, -1);
	return sendv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

EXPORT ssize_t rwrite(int s, const void *buf, size_t n)
{
	return rsend(s, buf, n, 0);
}

EXPORT ssize_t rwritev(int s, const struct iovec *iov, int n)
{
	return sendv(s, iov, n, 0);
}

/* ---- poll and select ---- */

/* poll_rs: the events of one rsocket now; may drive a connect on. */
static short poll_rs(struct rsk *rs, short events, int nonblock, int (*test)(struct rsk *))
{
	short rev;

	for (;;) {
		if ((rs->state & RS_CONNECTED) || rs->state == RS_DISCONNECTED || (rs->state & RS_ERROR)) {
			pthread_mutex_lock(&rs->cq_lock);
			process(rs, nonblock, test);
			rev = 0;
			if ((events & POLLIN) && conn_have_rdata(rs))
				rev |= POLLIN;
			if ((events & POLLOUT) && can_send(rs))
				rev |= POLLOUT;
			/* POLLHUP once the data that came before the peer's
			 * disconnect has been read, as a kernel TCP socket (whose
			 * peer's FIN gives POLLIN alone while data waits).
			 * librdmacm's rs_poll_rs sets it at once, so that a
			 * program taking POLLHUP as the end (rstream -T a: its
			 * do_poll) loses the last transfer when it came in one
			 * poll with the disconnect. */
			if (!(rs->state & RS_CONNECTED) && !(rs->state == RS_DISCONNECTED && have_rdata(rs)))
				rev |= rs->state == RS_DISCONNECTED ? POLLHUP : POLLERR;
			pthread_mutex_unlock(&rs->cq_lock);
			return rev;
		}
		if (rs->state == RS_LISTENING) {
			struct pollfd p = {.fd = rs->id->channel->fd, .events = events};

			poll(&p, 1, 0);
			return p.revents;
		}
		if (rs->state & RS_OPENING) {
			int e = errno;

			if (do_connect(rs) && errno == EINPROGRESS) {
				errno = e;
				return 0;
			}
			errno = e;
			continue; /* connected or failed: look again */
		}
		if (rs->state == RS_CONNECT_ERROR)
			return (events & (POLLIN | POLLOUT)) | POLLERR;
		return 0;
	}
}

static int poll_check(struct pollfd *fds, nfds_t n)
{
	int cnt = 0;

	for (nfds_t i = 0; i < n; i++) {
		struct rsk *rs = lookup(fds[i].fd);

		if (rs)
			fds[i].revents = poll_rs(rs, fds[i].events, 1, poll_all);
		else
			poll(&fds[i], 1, 0);
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

/* poll_arm arms each rsocket's CQ and puts the descriptor that wakes for
 * it (the CQ's channel, or the CM channel before it is connected) in rfds. */
static int poll_arm(struct pollfd *rfds, struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		struct rsk *rs = lookup(fds[i].fd);

		if (rs) {
			fds[i].revents = poll_rs(rs, fds[i].events, 0, is_cq_armed);
			if (fds[i].revents)
				return 1;
			rfds[i].fd = rs->state >= RS_CONNECTED ? rs->id->recv_cq_channel->fd : rs->id->channel->fd;
			rfds[i].events = POLLIN;
		} else {
			rfds[i].fd = fds[i].fd;
			rfds[i].events = fds[i].events;
		}
		rfds[i].revents = 0;
	}
	return 0;
}

static int poll_events(struct pollfd *rfds, struct pollfd *fds, nfds_t n)
{
	int cnt = 0;

	for (nfds_t i = 0; i < n; i++) {
		struct rsk *rs;

		if (!rfds[i].revents)
			continue;
		rs = lookup(fds[i].fd);
		if (rs) {
			pthread_mutex_lock(&rs->cq_wait_lock);
			if (rs->cq_armed && rs->state >= RS_CONNECTED) {
				/* Another thread may have taken the event since
				 * poll() saw it: do not wait for it here. */
				struct pollfd p = {.fd = rs->id->recv_cq_channel->fd, .events = POLLIN};

				if (poll(&p, 1, 0) == 1)
					get_cq_event(rs);
			}
			pthread_mutex_unlock(&rs->cq_wait_lock);
			fds[i].revents = poll_rs(rs, fds[i].events, 1, poll_all);
		} else {
			fds[i].revents = rfds[i].revents;
		}
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

static int any_rsocket(struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (lookup(fds[i].fd))
			return 1;
	return 0;
}

EXPORT int rpoll(struct pollfd *fds, nfds_t n, int timeout)
{
	struct pollfd *rfds;
	struct timespec t0, t1;
	int ret, left = timeout;

	if (!any_rsocket(fds, n))
		return poll(fds, n, timeout);
	ret = poll_check(fds, n);
	if (ret || !timeout)
		return ret;
	rfds = malloc(sizeof(*rfds) * (n ? n : 1));
	if (!rfds)
		FAIL(ENOMEM, -1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		ret = poll_arm(rfds, fds, n);
		if (ret)
			break;
		ret = poll(rfds, n, left);
		if (ret <= 0)
			break;
		ret = poll_events(rfds, fds, n);
		if (!ret && timeout > 0) {
			/* Woken by something the caller did not ask about
			 * (credits, a CM event): wait out the rest only. */
			clock_gettime(CLOCK_MONOTONIC, &t1);
			left = timeout - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
			if (left <= 0)
				break;
		}
	} while (!ret);
	free(rfds);
	return ret;
}

EXPORT int rselect(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *timeout)
{
	struct pollfd *fds;
	int n = 0, ret, to;

	if (nfds < 0 || nfds > FD_SETSIZE)
		FAIL(EINVAL, -1);
	fds = calloc(nfds ? nfds : 1, sizeof(*fds));
	if (!fds)
		FAIL(ENOMEM, -1);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		int want = 0;

		if (r && FD_ISSET(fd, r))
			ev |= POLLIN, want = 1;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT, want = 1;
		if (x && FD_ISSET(fd, x))
			ev |= POLLPRI, want = 1;
		if (want) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	to = !timeout ? -1 : (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
	ret = rpoll(fds, n, to);
	if (r)
		FD_ZERO(r);
	if (w)
		FD_ZERO(w);
	if (x)
		FD_ZERO(x);
	if (ret > 0) {
		ret = 0;
		for (int i = 0; i < n; i++) {
			if (r && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && (fds[i].events & POLLIN)) {
				FD_SET(fds[i].fd, r);
				ret++;
			}
			if (w && (fds[i].revents & (POLLOUT | POLLERR)) && (fds[i].events & POLLOUT)) {
				FD_SET(fds[i].fd, w);
				ret++;
			}
			if (x && (fds[i].revents & POLLPRI)) {
				FD_SET(fds[i].fd, x);
				ret++;
			}
		}
	}
	free(fds);
	return ret;
}

/* ---- closing ---- */

static void set_nonblocking(struct rsk *rs, int arg)
{
	if (rs->id->recv_cq_channel)
		fcntl(rs->id->recv_cq_channel->fd, F_SETFL, arg);
	if (rs->state < RS_CONNECTED)
		fcntl(rs->id->channel->fd, F_SETFL, arg);
}

/* rshutdown tells the peer (RS_CTRL_SHUTDOWN for the write side,
 * RS_CTRL_DISCONNECT for both) and waits for the sends in flight; once
 * disconnected the QP goes to the error state, flushing the receives so
 * that a thread in rpoll wakes. */
EXPORT int rshutdown(int s, int how)
{
	struct rsk *rs;
	int ctrl, ret = 0;

	GET(rs, s, -1);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		FAIL(EINVAL, -1);
	if (rs->fd_flags & O_NONBLOCK)
		set_nonblocking(rs, 0);
	pthread_mutex_lock(&rs->cq_lock);
	if (rs->state & RS_CONNECTED) {
		if (how == SHUT_RDWR) {
			ctrl = RS_CTRL_DISCONNECT;
			rs->state &= ~(RS_READABLE | RS_WRITABLE);
		} else if (how == SHUT_WR) {
			rs->state &= ~RS_WRITABLE;
			ctrl = (rs->state & RS_READABLE) ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
		} else {
			rs->state &= ~RS_READABLE;
			if (rs->state & RS_WRITABLE)
				goto out;
			ctrl = RS_CTRL_DISCONNECT;
		}
		if (!ctrl_avail(rs)) {
			ret = process(rs, 0, conn_can_send_ctrl);
			if (ret)
				goto out;
		}
		if ((rs->state & RS_CONNECTED) && ctrl_avail(rs)) {
			rs->ctrl_seqno++;
			ret = post_msg(rs, MSG(RS_OP_CTRL, ctrl));
		}
	}
	if (rs->state & RS_CONNECTED)
		process(rs, 0, all_sends_done);
out:
	if ((rs->fd_flags & O_NONBLOCK) && (rs->state & RS_CONNECTED))
		set_nonblocking(rs, rs->fd_flags);
	if ((rs->state & RS_DISCONNECTED) && rs->id->qp) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

		ibv_req_notify_cq(rs->id->recv_cq, 0);
		ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
	}
	pthread_mutex_unlock(&rs->cq_lock);
	return ret;
}

EXPORT int rclose(int s)
{
	struct rsk *rs;

	GET(rs, s, -1);
	if (rs->state & RS_CONNECTED)
		rshutdown(s, SHUT_RDWR);
	rs_free(rs);
	return 0;
}

/* ---- names and options ---- */

static void copy_addr(struct sockaddr *dst, const struct sockaddr *src, socklen_t *len)
{
	socklen_t full = src->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);

	memcpy(dst, src, *len < full ? *len : full);
	*len = full;
}

EXPORT int rgetpeername(int s, struct sockaddr *addr, socklen_t *len)
{
	struct rsk *rs;

	GET(rs, s, -1);
	if (!addr || !len)
		FAIL(EFAULT, -1);
	if (rs->state < RS_OPENING)
		FAIL(ENOTCONN, -1);
	copy_addr(addr, rdma_get_peer_addr(rs->id), len);
	return 0;
}

EXPORT int rgetsockname(int s, struct sockaddr *addr, socklen_t *len)
{
	struct rsk *rs;

	GET(rs, s, -1);
	if (!addr || !len)
		FAIL(EFAULT, -1);
	copy_addr(addr, rdma_get_local_addr(rs->id), len);
	return 0;
}

EXPORT int rsetsockopt(int s, int level, int name, const void *val, socklen_t len)
{
	struct rsk *rs;
	uint64_t *opts = NULL;
	int on = 0, ret = -1;

	GET(rs, s, -1);
	if (!val || len < sizeof(int))
		FAIL(EINVAL, -1);
	switch (level) {
	case SOL_SOCKET:
		opts = &rs->so_opts;
		switch (name) {
		case SO_REUSEADDR:
			/* goroce's CM binds no kernel port: nothing to reuse. */
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, (void *)val, len);
			on = *(const int *)val;
			ret = 0;
			break;
		case SO_RCVBUF:
			/* As librdmacm (and the kernel): twice what is asked, before
			 * the buffers exist. */
			if (!rs->rbuf)
				rs->rbuf_size = (*(const uint32_t *)val) << 1;
			ret = 0;
			break;
		case SO_SNDBUF:
			if (!rs->sbuf)
				rs->sbuf_size = (*(const uint32_t *)val) << 1;
			if (rs->sbuf_size < RS_SNDLOWAT)
				rs->sbuf_size = RS_SNDLOWAT << 1;
			ret = 0;
			break;
		case SO_LINGER:
			if (len < sizeof(struct linger))
				FAIL(EINVAL, -1);
			/* Stored inverted, as librdmacm: 0 (the default) is on. */
			on = !((const struct linger *)val)->l_onoff;
			ret = 0;
			break;
		case SO_KEEPALIVE:
			/* librdmacm's keepalive service thread is not served. */
			on = *(const int *)val;
			if (on)
				FAIL(EOPNOTSUPP, -1);
			ret = 0;
			break;
		case SO_OOBINLINE:
			on = *(const int *)val;
			ret = 0;
			break;
		}
		break;
	case IPPROTO_TCP:
		opts = &rs->tcp_opts;
		switch (name) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
			ret = 0; /* a reliable connection has no use for them */
			break;
		case TCP_NODELAY:
			on = *(const int *)val;
			ret = 0;
			break;
		}
		break;
	case IPPROTO_IPV6:
		opts = &rs->ipv6_opts;
		if (name == IPV6_V6ONLY) {
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (void *)val, len);
			on = *(const int *)val;
			ret = 0;
		}
		break;
	case SOL_RDMA:
		if (rs->state >= RS_OPENING)
			FAIL(EINVAL, -1);
		switch (name) {
		case RDMA_SQSIZE:
			rs->sq_size = *(const uint32_t *)val < RS_QP_MAX_SIZE ? *(const uint32_t *)val : RS_QP_MAX_SIZE;
			ret = 0;
			break;
		case RDMA_RQSIZE:
			rs->rq_size = *(const uint32_t *)val < RS_QP_MAX_SIZE ? *(const uint32_t *)val : RS_QP_MAX_SIZE;
			ret = 0;
			break;
		case RDMA_INLINE:
			rs->sq_inline = *(const uint32_t *)val < RS_QP_MAX_SIZE ? *(const uint32_t *)val : RS_QP_MAX_SIZE;
			ret = 0;
			break;
		case RDMA_IOMAPSIZE:
			/* riomap is not served: only no iomap. */
			if (*(const int *)val)
				FAIL(EOPNOTSUPP, -1);
			ret = 0;
			break;
		case RDMA_ROUTE:
			FAIL(EOPNOTSUPP, -1); /* an IB path record: none on RoCE here */
		}
		break;
	}
	if (ret)
		FAIL(ENOPROTOOPT, -1); /* an option rsockets do not know */
	if (opts && name < 64) {
		if (on)
			*opts |= 1ULL << name;
		else
			*opts &= ~(1ULL << name);
	}
	return 0;
}

EXPORT int rgetsockopt(int s, int level, int name, void *val, socklen_t *len)
{
	struct rsk *rs;
	int v;

	GET(rs, s, -1);
	if (!val || !len || *len < sizeof(int))
		FAIL(EINVAL, -1);
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			v = !!(rs->so_opts & (1ULL << name));
			break;
		case SO_RCVBUF:
			v = rs->rbuf_size;
			break;
		case SO_SNDBUF:
			v = rs->sbuf_size;
			break;
		case SO_LINGER:
			if (*len < sizeof(struct linger))
				FAIL(EINVAL, -1);
			((struct linger *)val)->l_onoff = !(rs->so_opts & (1ULL << name));
			((struct linger *)val)->l_linger = 0;
			*len = sizeof(struct linger);
			return 0;
		case SO_ERROR:
			v = rs->err;
			rs->err = 0;
			break;
		default:
			FAIL(ENOPROTOOPT, -1);
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			v = 1;
			break;
		case TCP_NODELAY:
			v = !!(rs->tcp_opts & (1ULL << name));
			break;
		case TCP_MAXSEG:
			v = 2048;
			break;
		default:
			FAIL(ENOPROTOOPT, -1);
		}
		break;
	case IPPROTO_IPV6:
		if (name != IPV6_V6ONLY)
			FAIL(ENOPROTOOPT, -1);
		v = !!(rs->ipv6_opts & (1ULL << name));
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE:
			v = rs->sq_size;
			break;
		case RDMA_RQSIZE:
			v = rs->rq_size;
			break;
		case RDMA_INLINE:
			v = rs->sq_inline;
			break;
		case RDMA_IOMAPSIZE:
			v = 0;
			break;
		default:
			FAIL(ENOPROTOOPT, -1);
		}
		break;
	default:
		FAIL(ENOPROTOOPT, -1);
	}
	*(int *)val = v;
	*len = sizeof(int);
	return 0;
}

EXPORT int rfcntl(int s, int cmd, ...)
{
	struct rsk *rs;
	va_list ap;
	int arg;

	GET(rs, s, -1);
	switch (cmd) {
	case F_GETFL:
		return rs->fd_flags;
	case F_SETFL:
		va_start(ap, cmd);
		arg = va_arg(ap, int);
		va_end(ap);
		if ((rs->fd_flags & O_NONBLOCK) != (arg & O_NONBLOCK))
			set_nonblocking(rs, arg & O_NONBLOCK);
		rs->fd_flags = arg;
		return 0;
	}
	FAIL(EOPNOTSUPP, -1);
}

/* riomap's direct placement is not served: the connect data declares an
 * iomap of size 0, so a peer never writes into one of ours. */
EXPORT off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	if (!lookup(s))
		FAIL(EBADF, -1);
	FAIL(EOPNOTSUPP, -1);
}

EXPORT int riounmap(int s, void *buf, size_t len)
{
	if (!lookup(s))
		FAIL(EBADF, -1);
	FAIL(EOPNOTSUPP, -1);
}

/* riowrite returns size_t: -1 cast, as librdmacm's own error return. */
EXPORT size_t riowrite(int s, const void *buf, size_t n, off_t offset, int flags)
{
	if (!lookup(s))
		FAIL(EBADF, (size_t)-1);
	FAIL(EOPNOTSUPP, (size_t)-1);
}
