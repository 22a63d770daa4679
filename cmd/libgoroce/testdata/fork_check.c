/*
 * fork_check: fork() with libgoroce.so preloaded (TestFork), on two
 * devices goroce0 and goroce1 (two loopback addresses).
 *
 *   fork_check before  the parent forks as qperf's server does, never
 *                      having used a device: each round two children,
 *                      one on each device, connect RC QPs through a
 *                      socketpair and move data (WRITE, SEND, READ, every
 *                      byte checked); then the parent itself does the same
 *                      between its own two devices.
 *   fork_check after   the parent moves data between its two devices,
 *                      closes goroce1 and forks while goroce0, a QP's CQ
 *                      and a registered buffer stay open; the child opens
 *                      goroce1 (a fresh engine: the parent's does not
 *                      survive fork) and moves data with the parent's
 *                      goroce0. The child's opening of goroce0, whose
 *                      address the parent's socket holds, fails with an
 *                      errno rather than hangs; the child's writes to its
 *                      copy of the parent's registered buffer do not reach
 *                      what the child READs of the parent's region. The
 *                      parent then moves data between its devices again.
 *   fork_check nested  a parent, child, grandchild and great-grandchild,
 *                      each forked after its parent used and closed both
 *                      devices, each moving data between its own two.
 *
 * Both check ibv_fork_init and ibv_is_fork_initialized (IBV_FORK_UNNEEDED:
 * goroce's registered memory is the process's own).
 */
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pair.h"

#define LEN 4096

/* A side's buffer: [0, LEN) the peer WRITEs, [LEN, 2 LEN) the peer
 * READs, [2 LEN, 3 LEN) SEND and receive. */
struct region {
	char *buf;
	struct ibv_mr *mr;
};

struct peer {
	uint32_t qpn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static void open_dev(struct side *s, int index)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	CHECK(list && n > index, "want device %d, have %d", index, n);
	open_side(s, list[index]);
	ibv_free_device_list(list);
}

static void close_side(struct side *s)
{
	if (s->qp)
		CHECK(!ibv_destroy_qp(s->qp), "destroy_qp");
	s->qp = NULL;
	CHECK(!ibv_destroy_cq(s->cq), "destroy_cq");
	CHECK(!ibv_dealloc_pd(s->pd), "dealloc_pd");
	CHECK(!ibv_close_device(s->ctx), "close_device");
}

static void reg(struct side *s, struct region *r)
{
	r->buf = calloc(3, LEN);
	CHECK(r->buf, "calloc");
	r->mr = ibv_reg_mr(s->pd, r->buf, 3 * LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(r->mr, "reg_mr: %s", strerror(errno));
}

static void unreg(struct region *r)
{
	CHECK(!ibv_dereg_mr(r->mr), "dereg_mr");
	free(r->buf);
}

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, struct region *r, size_t off, uint64_t raddr,
		 uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)r->buf + off, .length = LEN, .lkey = r->mr->lkey};
	struct ibv_send_wr wr = {0}, *bad;

	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qp, &wr, &bad), "post_send %d: %s", op, strerror(errno));
}

static void post_recv(struct ibv_qp *qp, struct region *r)
{
	struct ibv_sge sge = {.addr = (uintptr_t)r->buf + 2 * LEN, .length = LEN, .lkey = r->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad;

	CHECK(!ibv_post_recv(qp, &wr, &bad), "post_recv: %s", strerror(errno));
}

static void same(const char *got, int seed, const char *what)
{
	char want[LEN];

	fill(want, LEN, seed);
	CHECK(!memcmp(got, want, LEN), "%s: bytes differ", what);
}

static void xfer(int fd, void *p, size_t n, int out)
{
	for (size_t k = 0; k < n;) {
		ssize_t m = out ? write(fd, (char *)p + k, n - k) : read(fd, (char *)p + k, n - k);

		CHECK(m > 0, "%s the peer's socket: %s", out ? "write to" : "read from",
		      m < 0 ? strerror(errno) : "closed");
		k += m;
	}
}

/*
 * exchange runs one RC connection's worth of traffic with the process at
 * the other end of fd, on side s (a new QP) and region r. Role 0 WRITEs
 * [0, LEN) with seed, SENDs [2 LEN, 3 LEN) with seed + 2 and READs the
 * peer's [LEN, 2 LEN), which must hold seed + 1 (the caller of role 1
 * filled it); role 1 checks what arrived.
 */
static void exchange(struct side *s, struct region *r, int fd, int role, int seed)
{
	struct peer me, them;
	char token = 0;

	s->qp = make_qp(s, IBV_QPT_RC, 0, 0);
	to_init(s->qp);
	if (role == 1)
		post_recv(s->qp, r);
	me = (struct peer){.qpn = s->qp->qp_num, .rkey = r->mr->rkey, .addr = (uintptr_t)r->buf, .gid = s->gid};
	xfer(fd, &me, sizeof(me), 1);
	xfer(fd, &them, sizeof(them), 0);
	to_rts(s->qp, them.qpn, them.gid);
	/* Both in RTS, role 1's receive posted, before the first packet. */
	xfer(fd, &token, 1, 1);
	xfer(fd, &token, 1, 0);
	if (role == 0) {
		fill(r->buf, LEN, seed);
		fill(r->buf + 2 * LEN, LEN, seed + 2);
		post(s->qp, IBV_WR_RDMA_WRITE, r, 0, them.addr, them.rkey, 1);
		expect(s->cq, 1, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
		post(s->qp, IBV_WR_SEND, r, 2 * LEN, 0, 0, 2);
		expect(s->cq, 2, IBV_WC_SEND, IBV_WC_SUCCESS);
		post(s->qp, IBV_WR_RDMA_READ, r, LEN, them.addr + LEN, them.rkey, 3);
		expect(s->cq, 3, IBV_WC_RDMA_READ, IBV_WC_SUCCESS);
		same(r->buf + LEN, seed + 1, "READ of the peer's region");
	} else {
		struct ibv_wc wc = expect(s->cq, 7, IBV_WC_RECV, IBV_WC_SUCCESS);

		CHECK(wc.byte_len == LEN, "received %u bytes", wc.byte_len);
		same(r->buf, seed, "WRITE from the peer");
		same(r->buf + 2 * LEN, seed + 2, "SEND from the peer");
	}
	/* Role 1 keeps its QP until role 0's READ is answered. */
	xfer(fd, &token, 1, 1);
	xfer(fd, &token, 1, 0);
	CHECK(!ibv_destroy_qp(s->qp), "destroy_qp");
	s->qp = NULL;
}

/* child runs exchange on device index as role, in a new process. */
static pid_t child(int index, int fd, int other, int role, int seed)
{
	pid_t pid = fork();

	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct side s = {0};
		struct region r;

		close(other);
		open_dev(&s, index);
		reg(&s, &r);
		if (role == 1)
			fill(r.buf + LEN, LEN, seed + 1);
		exchange(&s, &r, fd, role, seed);
		unreg(&r);
		close_side(&s);
		exit(0);
	}
	return pid;
}

static void reap(pid_t pid, const char *what)
{
	int st;

	CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (status %#x)", what, st);
}

/* local moves data between the process's own goroce0 (a, already open)
 * and goroce1, with a WRITE checked byte for byte. */
static void local(struct side *a, int seed)
{
	struct side b = {0};
	struct region ra, rb;

	open_dev(&b, 1);
	reg(a, &ra);
	reg(&b, &rb);
	connect_pair(a, &b, 0, 0);
	fill(ra.buf, LEN, seed);
	post(a->qp, IBV_WR_RDMA_WRITE, &ra, 0, (uintptr_t)rb.buf, rb.mr->rkey, 9);
	expect(a->cq, 9, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
	same(rb.buf, seed, "WRITE between the parent's devices");
	CHECK(!ibv_destroy_qp(a->qp), "destroy_qp");
	a->qp = NULL;
	unreg(&ra);
	unreg(&rb);
	close_side(&b);
}

static void before(void)
{
	struct side a = {0};

	for (int round = 0; round < 3; round++) {
		int sv[2];
		pid_t p0, p1;

		CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv), "socketpair: %s", strerror(errno));
		p0 = child(0, sv[0], sv[1], 0, 10 * round);
		p1 = child(1, sv[1], sv[0], 1, 10 * round);
		close(sv[0]);
		close(sv[1]);
		reap(p0, "child on goroce0");
		reap(p1, "child on goroce1");
		printf("fork_check: round %d: two children moved data\n", round);
	}
	open_dev(&a, 0);
	local(&a, 77);
	close_side(&a);
}

static void after(void)
{
	struct side a = {0};
	struct region r;
	int sv[2];
	pid_t pid;

	open_dev(&a, 0);
	local(&a, 55);
	reg(&a, &r);
	fill(r.buf + LEN, LEN, 20 + 1);
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, sv), "socketpair: %s", strerror(errno));
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct side s = {0};
		struct region own;
		struct ibv_device **list;
		struct ibv_context *ctx;
		int n;

		close(sv[1]);
		/* The child's copy of the parent's registered buffer is the
		 * child's: the parent's region, READ below, keeps seed + 1. */
		memset(r.buf, 0xee, 3 * LEN);
		list = ibv_get_device_list(&n);
		CHECK(list && n == 2, "device list in the child");
		/* goroce0's address is the parent's too: the child shares its
		 * port as any second process does (the parent owns it, the
		 * child starts roced serve --auto), as an rxe device serves
		 * both, and moves the data over it. */
		ctx = ibv_open_device(list[0]);
		CHECK(ctx, "opening goroce0, which the parent holds: %s", strerror(errno));
		ibv_close_device(ctx);
		printf("fork_check: child: goroce0 shared with the parent\n");
		ibv_free_device_list(list);
		open_dev(&s, 0);
		reg(&s, &own);
		exchange(&s, &own, sv[0], 0, 20);
		unreg(&own);
		close_side(&s);
		exit(0);
	}
	close(sv[0]);
	exchange(&a, &r, sv[1], 1, 20);
	close(sv[1]);
	reap(pid, "child");
	printf("fork_check: the child moved data with the parent\n");
	unreg(&r);
	local(&a, 66);
	close_side(&a);
}

/* nested moves data between the process's two devices, closes them and
 * forks a child that does the same, depth times over: each generation
 * after the first loads an engine of its own, the one before it having
 * run its own before the fork. The parent moves data again at the end. */
static void nested(int depth)
{
	struct side a = {0};
	pid_t pid;

	open_dev(&a, 0);
	local(&a, depth);
	close_side(&a);
	if (depth == 0)
		return;
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		nested(depth - 1);
		exit(0);
	}
	reap(pid, "child");
	printf("fork_check: generation %d moved data\n", depth);
	open_dev(&a, 0);
	local(&a, 100 + depth);
	close_side(&a);
}

int main(int argc, char **argv)
{
	prog = "fork_check";
	/* Unbuffered: a child must not inherit, and print again, what the
	 * parent had not yet written. */
	setvbuf(stdout, NULL, _IONBF, 0);
	CHECK(argc == 2, "usage: fork_check before|after|nested");
	CHECK(ibv_fork_init() == 0, "ibv_fork_init: %s", strerror(errno));
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized: %d",
	      ibv_is_fork_initialized());
	if (!strcmp(argv[1], "before"))
		before();
	else if (!strcmp(argv[1], "after"))
		after();
	else if (!strcmp(argv[1], "nested"))
		nested(3);
	else
		CHECK(0, "usage: fork_check before|after|nested");
	printf("fork_check: ok\n");
	return 0;
}
