/*
 * shim.h: the C objects libgoroce hands to programs, and the flat records
 * the C layer (verbs.c) and the Go side (main.go) pass each other.
 *
 * Every verbs object a program sees is a libibverbs struct (ibv_context,
 * ibv_pd, ibv_mr, ibv_cq, ibv_qp, ibv_comp_channel) at the start of a
 * malloc'ed gq_* wrapper whose h names the Go object (a cgo.Handle, an
 * integer): C memory holds no Go pointer. The records below have no
 * unions, so Go reads and writes them field by field.
 */
#ifndef GOROCE_SHIM_H
#define GOROCE_SHIM_H

/* The most inline bytes one work request carries: transport.MaxInline (main.go
 * checks that they agree). */
#define GQ_MAX_INLINE 512

#include <stdint.h>
#include <pthread.h>
#include <poll.h>
#include <infiniband/verbs.h>

struct gq_device {
	struct ibv_device dev;
	int index;
};

struct gq_context {
	struct verbs_context vctx; /* ends with the ibv_context programs see */
	uintptr_t h;
};

struct gq_pd {
	struct ibv_pd pd;
	uintptr_t h;
};

struct gq_mr {
	struct ibv_mr mr;
	uintptr_t h;
};

/* One work completion, flattened. */
struct gq_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len, imm, qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
};

/* What an empty poll of a device in poll mode reads before it calls into
 * Go, in C memory the engine keeps (transport.Device.SetPollBusy and
 * PollFDs): busy is non-zero while Go may hold something a poll would
 * take that no descriptor shows; fds are the device's receive sockets,
 * of every GID. busy at 0 and one poll(2) finding none readable: the
 * poll is empty, and costs a system call rather than a crossing into Go
 * and its recvmmsg on each socket. */
#define GQ_POLL_FDS 16
struct gq_pollboard {
	uint32_t busy;
	int nfd;
	struct pollfd fds[GQ_POLL_FDS];
};

/* A CQ. One made by ibv_create_cq_ex is an ibv_cq_ex, whose first
 * fields are ibv_cq's (ibv_cq_ex_to_cq is a cast). */
struct gq_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	};
	uintptr_t h;
	/* The queue's length as the engine keeps it (^0 after an error),
	 * written by Go: an empty poll is answered here, without a call into
	 * Go, which costs a busy-polling program a crossing every time. */
	uint32_t pending;
	/* Set by Go when the device is in poll mode (GOROCE_POLL_MODE=1):
	 * an empty poll then calls into Go, whose poll receives and handles
	 * what has arrived on this thread, unless board (set with it when
	 * the device's link has descriptors to watch) says nothing has. */
	uint8_t poll_mode;
	const struct gq_pollboard *board;
	/* The ibv_cq_ex poll API: lock is held from a start_poll that found
	 * a completion to end_poll; cur is the completion the read_* see. */
	pthread_spinlock_t lock;
	struct gq_wc cur;
};

/* A batch of work requests built with the ibv_wr_* API, posted by
 * wr_complete in one call into Go. Request i keeps its SGEs at
 * sge[i * max_sge] and its inline bytes at inl[i * max_inline]; the
 * arrays grow (doubling, up to the send queue's depth) and are then
 * reused, so a steady stream of batches allocates nothing. */
struct gq_batch {
	pthread_spinlock_t lock; /* held from wr_start to wr_complete or wr_abort */
	struct gq_send *wr;
	struct ibv_sge *sge;
	uint8_t *inl;
	uint64_t ops; /* the IBV_QP_EX_WITH_* the QP was created with */
	uint32_t n, cap, max_wr, max_sge, max_inline;
	int err; /* the first error of the batch: wr_complete returns it */
};

/* A QP: laid out as libibverbs' struct verbs_qp (driver.h), whose start
 * is both the ibv_qp and the ibv_qp_ex, so that ibv_qp_to_qp_ex and the
 * inline ibv_wr_* find the extended QP where a provider's would be. */
struct gq_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx;
	};
	uint32_t comp_mask;   /* VERBS_QP_EX (1) when created with send ops */
	void *xrcd;           /* verbs_qp's; always NULL here */
	uintptr_t h;
	struct gq_batch *batch; /* the ibv_wr_* batch (created with send ops) */
};

/* A memory window. */
struct gq_mw {
	struct ibv_mw mw;
	uintptr_t h;
};

struct gq_ah {
	struct ibv_ah ah;
	uintptr_t h;
};

struct gq_srq {
	struct ibv_srq srq;
	uintptr_t h;
};

/* A completion channel: fd is an eventfd in semaphore mode, written once
 * per event; the CQs whose events are pending wait in a ring. */
struct gq_channel {
	struct ibv_comp_channel ch;
	pthread_mutex_t mu;
	struct ibv_cq **ring;
	unsigned cap, head, len;
};

/* One send work request, flattened; ah (0: none), remote_qpn and
 * remote_qkey are a UD send's destination. A bind (IBV_WR_BIND_MW) names
 * the window mw and the region mr by handle (mr 0: none) and gives the
 * window's new key in rkey. copy (not 0) is the length of inline bytes at
 * inl that no region covers (ibv_wr_set_inline_data): Go passes them
 * through a region of its own, in place of an SGE list. */
struct gq_send {
	uint64_t wr_id;
	struct ibv_sge *sge;
	uint32_t num_sge, opcode, flags, imm, rkey, invalidate_rkey;
	uint64_t remote_addr, compare_add, swap;
	uintptr_t ah;
	uint32_t remote_qpn, remote_qkey;
	uintptr_t mw, mr;
	uint64_t bind_addr, bind_length;
	uint32_t bind_access, copy;
	void *inl;
};

/* An address vector, flattened from ibv_ah_attr's GRH (RoCE addresses
 * by GID: there is no LID route). */
struct gq_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, sl, port_num;
};

/* The QP attributes goroce has (transport.QPAttr), flattened from ibv_qp_attr. */
struct gq_qp_attr {
	uint32_t state, cur_state, path_mtu, qkey, rq_psn, sq_psn, dest_qp_num, access;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, sl, port_num;
	uint16_t pkey_index;
	uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic;
	uint8_t min_rnr_timer, timeout, retry_cnt, rnr_retry;
};

/* gq_qp_attr into ibv_qp_attr (verbs.c). */
void gq_ibv_qp_attr(const struct gq_qp_attr *a, struct ibv_qp_attr *attr);

/* What a QP is created with: the CQs and the SRQ (0: none) by handle. */
struct gq_qp_init {
	uint32_t type, sq_sig_all;
	uintptr_t send_cq, recv_cq, srq;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
};

/* Called from Go when an armed CQ fires: queue cq and wake the channel. */
void gq_channel_push(struct gq_channel *c, struct ibv_cq *cq);

#endif
