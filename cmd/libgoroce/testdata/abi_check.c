/*
 * abi_check.c: run with libgoroce.so preloaded over one device; checks
 * the entry points that used to fall through to the real libibverbs and
 * librdmacm (the GID entry queries, P_Key index, data-in-order, ECE,
 * import, dma-buf) and what rsockets refuse, the errno of failing verbs (the return
 * value and errno agree, as libibverbs' do), and the kernel's leniency
 * programs rely on (a flow label past 20 bits, phys_port_cnt_ex, a real
 * cmd_fd). Prints "abi_check: ok" when every check holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rsocket.h>

static const char *prog = "abi_check";

#include "check.h"

/* An int verb that must fail with want, returned and in errno. */
#define REFUSED(call, want, what)                                                          \
	do {                                                                               \
		int rc_;                                                                   \
		errno = 0;                                                                 \
		rc_ = (call);                                                              \
		CHECK(rc_ == (want) && errno == (want), "%s: returned %d, errno %d, want %d", \
		      what, rc_, errno, want);                                             \
	} while (0)

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device_attr_ex dx;
	struct ibv_port_attr pa;
	struct ibv_gid_entry ge, table[64];
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	struct ibv_ah_attr aa = {0};
	struct ibv_qp_attr qa = {0};
	struct ibv_qp_init_attr ia = {0};
	struct ibv_ece ece = {0};
	struct ibv_comp_channel *ch;
	ssize_t n;
	int num, fd, mtu_ok;

	list = ibv_get_device_list(&num);
	CHECK(list && num >= 1, "no device");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open: %s", strerror(errno));

	/* cmd_fd: a descriptor of the context's own that dup() takes; an
	 * import through it is refused as by a provider without import. */
	CHECK(ctx->cmd_fd >= 0 && fcntl(ctx->cmd_fd, F_GETFD) >= 0, "cmd_fd %d is not an open descriptor",
	      ctx->cmd_fd);
	fd = dup(ctx->cmd_fd);
	CHECK(fd >= 0, "dup(cmd_fd): %s", strerror(errno));
	errno = 0;
	CHECK(!ibv_import_device(fd) && errno == EOPNOTSUPP, "import_device: errno %d", errno);
	close(fd);
	errno = 0;
	CHECK(!ibv_import_pd(ctx, 1) && errno == EOPNOTSUPP, "import_pd: errno %d", errno);

	/* phys_port_cnt_ex: one port, as rxe. */
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx), "query_device_ex: %s", strerror(errno));
	CHECK(dx.phys_port_cnt_ex == 1 && dx.orig_attr.phys_port_cnt == 1, "phys_port_cnt_ex %u, phys_port_cnt %u",
	      dx.phys_port_cnt_ex, dx.orig_attr.phys_port_cnt);

	/* GID entries: index 1 is the device's IPv4 address (as rxe builds
	 * the table), RoCE v2, on its interface; the table lists it. */
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "query_gid: %s", strerror(errno));
	CHECK(!ibv_query_gid_ex(ctx, 1, 1, &ge, 0), "query_gid_ex: %s", strerror(errno));
	CHECK(!memcmp(ge.gid.raw, gid.raw, 16) && ge.gid_index == 1 && ge.port_num == 1 &&
		      ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.ndev_ifindex > 0,
	      "query_gid_ex: index %u port %u type %u ifindex %u", ge.gid_index, ge.port_num, ge.gid_type,
	      ge.ndev_ifindex);
	REFUSED(ibv_query_gid_ex(ctx, 1, 100000, &ge, 0), EINVAL, "query_gid_ex past the table");
	REFUSED(ibv_query_gid_ex(ctx, 1, 1, &ge, 1), EOPNOTSUPP, "query_gid_ex with a flag");
	n = ibv_query_gid_table(ctx, table, 64, 0);
	CHECK(n >= 1, "query_gid_table: %zd", n);
	mtu_ok = 0;
	for (ssize_t i = 0; i < n; i++)
		if (table[i].gid_index == 1 && !memcmp(table[i].gid.raw, gid.raw, 16))
			mtu_ok = 1;
	CHECK(mtu_ok, "query_gid_table: GID 1 not listed among %zd", n);
	if (n > 1) {
		errno = 0;
		CHECK(ibv_query_gid_table(ctx, table, 1, 0) == -EINVAL && errno == EINVAL,
		      "query_gid_table with too little room: errno %d", errno);
	}
	errno = 0;
	CHECK(ibv_query_gid(ctx, 1, 100000, &gid) == -1 && errno == EINVAL, "query_gid past the table: errno %d",
	      errno);
	/* The table is rxe's length (1024 entries, gid_tbl_len); a slot past
	 * the device's addresses is empty: zeros from query_gid, as
	 * libibverbs gives, ENODATA from query_gid_ex. */
	CHECK(!ibv_query_port(ctx, 1, &pa) && pa.gid_tbl_len == 1024, "query_port: gid_tbl_len %d", pa.gid_tbl_len);
	{
		static const uint8_t zero[16];
		union ibv_gid empty;

		CHECK(!ibv_query_gid(ctx, 1, 1023, &empty) && !memcmp(empty.raw, zero, 16), "query_gid of an empty slot");
		REFUSED(ibv_query_gid_ex(ctx, 1, 1023, &ge, 0), ENODATA, "query_gid_ex of an empty slot");
		errno = 0;
		CHECK(ibv_query_gid(ctx, 1, 1024, &empty) == -1 && errno == EINVAL, "query_gid at the table's length: errno %d",
		      errno);
	}
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "query_gid: %s", strerror(errno));
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0, "get_pkey_index of the default P_Key");
	errno = 0;
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) == -1 && errno == EINVAL, "get_pkey_index of another: errno %d",
	      errno);

	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd: %s", strerror(errno));
	ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "create_comp_channel: %s", strerror(errno));
	cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(cq, "create_cq: %s", strerror(errno));
	errno = 0;
	CHECK(!ibv_import_mr(pd, 1) && errno == EOPNOTSUPP, "import_mr: errno %d", errno);
	errno = 0;
	CHECK(!ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE) && errno == EOPNOTSUPP,
	      "reg_dmabuf_mr: errno %d", errno);

	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "create_qp: %s", strerror(errno));
	CHECK(ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0) == 0, "query_qp_data_in_order promises order");
	REFUSED(ibv_query_ece(qp, &ece), EOPNOTSUPP, "query_ece");
	ece.vendor_id = 0x15b3;
	REFUSED(ibv_set_ece(qp, &ece), EOPNOTSUPP, "set_ece");

	/* errno of refused verbs: RESET to RTS skips INIT and RTR (EINVAL,
	 * the engine's answer), an alternate path EOPNOTSUPP; a busy PD, CQ
	 * and channel EBUSY; multicast EOPNOTSUPP. */
	qa.qp_state = IBV_QPS_RTS;
	REFUSED(ibv_modify_qp(qp, &qa, IBV_QP_STATE), EINVAL, "modify_qp RESET->RTS");
	REFUSED(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_ALT_PATH), EOPNOTSUPP, "modify_qp with an alternate path");
	REFUSED(ibv_dealloc_pd(pd), EBUSY, "dealloc_pd of a PD in use");
	REFUSED(ibv_destroy_cq(cq), EBUSY, "destroy_cq of a CQ a QP uses");
	REFUSED(ibv_destroy_comp_channel(ch), EBUSY, "destroy_comp_channel of a channel a CQ uses");
	/* resize_cq as rxe: at least the depth asked, EINVAL below 1 or
	 * beyond the device's max_cqe (rdma-core's test_resize_cq checks
	 * the refusal below the completions held). */
	CHECK(!ibv_resize_cq(cq, 32) && cq->cqe >= 32, "resize_cq to 32: %s, cqe %d", strerror(errno), cq->cqe);
	CHECK(!ibv_resize_cq(cq, 4) && cq->cqe >= 4, "resize_cq to 4: %s, cqe %d", strerror(errno), cq->cqe);
	REFUSED(ibv_resize_cq(cq, 0), EINVAL, "resize_cq to 0");
	REFUSED(ibv_resize_cq(cq, 1 << 30), EINVAL, "resize_cq beyond max_cqe");
	REFUSED(ibv_attach_mcast(qp, &gid, 0), EOPNOTSUPP, "attach_mcast");

	/* A flow label past 20 bits (UCX passes 0xffffffff): the low 20
	 * bits are taken, as the kernel's IB_GRH_FLOWLABEL_MASK and rxe do. */
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.dgid = gid;
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	aa.grh.flow_label = 0xffffffff;
	ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "create_ah with flow label 0xffffffff: %s", strerror(errno));
	CHECK(!ibv_destroy_ah(ah), "destroy_ah");
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "modify_qp to INIT: %s", strerror(errno));
	qa.qp_state = IBV_QPS_RTR;
	qa.path_mtu = IBV_MTU_1024;
	qa.dest_qp_num = qp->qp_num;
	qa.max_dest_rd_atomic = 1;
	qa.min_rnr_timer = 12;
	qa.ah_attr = aa;
	CHECK(!ibv_modify_qp(qp, &qa,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "modify_qp to RTR with flow label 0xffffffff: %s", strerror(errno));
	memset(&qa, 0, sizeof(qa));
	CHECK(!ibv_query_qp(qp, &qa, IBV_QP_AV, &ia), "query_qp: %s", strerror(errno));
	CHECK(qa.ah_attr.grh.flow_label == 0xfffff, "flow label read back %#x, want 0xfffff",
	      qa.ah_attr.grh.flow_label);

	/* rsockets: a stream rsocket is made (rsocket.c); what goroce does
	 * not serve (datagram rsockets, riomap/riowrite, the keepalive
	 * service) is refused with EOPNOTSUPP in errno, a descriptor that is
	 * no rsocket with EBADF. */
	{
		int s, one = 1;
		char c = 0;

		errno = 0;
		CHECK(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == EOPNOTSUPP, "rsocket(SOCK_DGRAM): errno %d", errno);
		s = rsocket(AF_INET, SOCK_STREAM, 0);
		CHECK(s >= 0, "rsocket(SOCK_STREAM): %s", strerror(errno));
		errno = 0;
		CHECK(riomap(s, &c, 1, PROT_WRITE, 0, -1) == -1 && errno == EOPNOTSUPP, "riomap: errno %d", errno);
		errno = 0;
		CHECK(riowrite(s, &c, 1, 0, 0) == (size_t)-1 && errno == EOPNOTSUPP, "riowrite: errno %d", errno);
		errno = 0;
		CHECK(rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == -1 && errno == EOPNOTSUPP,
		      "rsetsockopt(SO_KEEPALIVE): errno %d", errno);
		errno = 0;
		CHECK(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) == -1 && errno == ENOPROTOOPT,
		      "rsetsockopt(SO_BROADCAST): errno %d", errno);
		{
			int v = 0;
			socklen_t vl = sizeof(v);

			CHECK(!rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "rsetsockopt(TCP_NODELAY): %s",
			      strerror(errno));
			CHECK(!rgetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &vl) && v == 1, "rgetsockopt(TCP_NODELAY): %d", v);
		}
		errno = 0;
		CHECK(rsend(s, &c, 1, 0) == -1 && errno == ENOTCONN, "rsend before connect: errno %d", errno);
		CHECK(!rclose(s), "rclose: %s", strerror(errno));
		errno = 0;
		CHECK(rclose(s) == -1 && errno == EBADF, "rclose twice: errno %d", errno);
	}

	CHECK(!ibv_destroy_qp(qp), "destroy_qp");
	CHECK(!ibv_destroy_cq(cq), "destroy_cq");
	CHECK(!ibv_destroy_comp_channel(ch), "destroy_comp_channel");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close_device");
	ibv_free_device_list(list);
	printf("abi_check: ok\n");
	return 0;
}
