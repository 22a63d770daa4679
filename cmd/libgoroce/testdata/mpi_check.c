/*
 * mpi_check: MPI point-to-point and collective traffic with every byte
 * checked, and a record of what the kernel's TCP did meanwhile (TestOpenMPI,
 * the recipe of docs/cluster.md). Any number of ranks.
 *
 *   mpi_check [-n ITERS]
 *
 * Ping-pong: every pair of ranks (a round-robin schedule: each round
 * pairs every rank with another, the pairs of a round running at once)
 * exchanges messages of 1 B, 2 B, 4 B ... 1 MiB and a few sizes between
 * (3 B, 1000 B, 4097 B, 65535 B, 1 MiB - 1), ITERS times (default 1):
 * the lower rank sends, the higher checks the length and every byte and
 * answers with a message of its own, which the lower checks. Each
 * message's bytes depend on its sender, receiver, size and iteration,
 * and the receive buffer is filled with another pattern first, so a
 * message delivered twice, to the wrong rank, late, short or not at all
 * is seen.
 *
 * Allreduce: MPI_SUM over uint32 and MPI_BXOR over bytes, for 1 element
 * up to 1 MiB, each rank's contribution its own pattern, every element of
 * the result checked against the sum (xor) computed locally.
 *
 * Around the exchanges (after a barrier before, and before the barrier
 * that ends them) each rank reads its network namespace's counters:
 * TcpExt TCPOrigDataSent (TCP segments carrying data, retransmissions
 * aside) and TcpRetransSegs, and IpExt OutOctets (bytes of every IP
 * packet sent, loopback's included). No rank prints until every rank
 * has read them, so Open MPI's forwarding of the output over TCP is
 * outside every window. Rank 0 prints a line for each rank, in rank
 * order:
 *
 *   mpi_check: rank R/N on HOST: sent B bytes in M messages, allreduced E
 *   elements; window: tcp_data_segs D tcp_retrans T ip_out_octets O
 *
 * (one line; B counts the ping-pong's messages only)
 *
 * and then, once every rank's checks are summed, "mpi_check: ok" or
 * "mpi_check: FAILED (E errors)"; the exit status is 0 only with ok.
 * A check that fails prints the first few mismatches (rank, peer,
 * size, offset, want, got).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *prog = "mpi_check";
static int rank, nranks;
static long errors;

#define MAXMSG (1 << 20)

static void fail(const char *what)
{
	fprintf(stderr, "%s: rank %d: %s\n", prog, rank, what);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* A byte of message (from, to, size, iter) at offset off: a function of
 * all five, so no two messages nor two offsets of one agree for long. */
static uint8_t pat(int from, int to, int size, int iter, size_t off)
{
	uint32_t x = (uint32_t)from * 2654435761u ^ (uint32_t)to * 40503u ^
		     (uint32_t)size * 97u ^ (uint32_t)iter * 7919u;
	x += (uint32_t)off * 2246822519u;
	x ^= x >> 15;
	x *= 2654435761u;
	return (uint8_t)(x >> 24 ^ off >> 8);
}

static void fill(uint8_t *b, int from, int to, int size, int iter)
{
	for (int i = 0; i < size; i++)
		b[i] = pat(from, to, size, iter, i);
}

static void verify(const uint8_t *b, int got, int from, int to, int size, int iter)
{
	if (got != size) {
		errors++;
		fprintf(stderr, "%s: rank %d: from %d size %d iter %d: %d bytes arrived\n",
			prog, rank, from, size, iter, got);
		return;
	}
	for (int i = 0; i < size; i++) {
		uint8_t want = pat(from, to, size, iter, i);
		if (b[i] != want) {
			if (errors++ < 5)
				fprintf(stderr, "%s: rank %d: from %d size %d iter %d offset %d: want %#x got %#x\n",
					prog, rank, from, size, iter, i, want, b[i]);
		}
	}
}

/* The namespace's counter NAME in the table TABLE ("TcpExt", "IpExt") of
 * /proc/net/FILE: a header line of names, then a line of values. */
static long long counter(const char *file, const char *table, const char *name)
{
	char path[64], names[8192], values[8192];
	snprintf(path, sizeof path, "/proc/net/%s", file);
	FILE *f = fopen(path, "r");
	if (!f)
		fail("cannot open /proc/net counters");
	size_t tl = strlen(table);
	long long v = -1;
	while (fgets(names, sizeof names, f) && fgets(values, sizeof values, f)) {
		if (strncmp(names, table, tl) || names[tl] != ':')
			continue;
		char *sn, *sv;
		char *n = strtok_r(names + tl + 1, " \n", &sn);
		char *val = strtok_r(values + tl + 1, " \n", &sv);
		for (; n && val; n = strtok_r(NULL, " \n", &sn), val = strtok_r(NULL, " \n", &sv))
			if (!strcmp(n, name)) {
				v = atoll(val);
				break;
			}
	}
	fclose(f);
	if (v < 0) {
		fprintf(stderr, "%s: rank %d: no %s %s in /proc/net/%s\n", prog, rank, table, name, file);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return v;
}

struct counters {
	long long tcp_data, tcp_retrans, ip_out;
};

static struct counters read_counters(void)
{
	struct counters c;
	c.tcp_data = counter("netstat", "TcpExt", "TCPOrigDataSent");
	c.tcp_retrans = counter("snmp", "Tcp", "RetransSegs");
	c.ip_out = counter("netstat", "IpExt", "OutOctets");
	return c;
}

static const int extra[] = {3, 1000, 4097, 65535, MAXMSG - 1};

/* The allreduces' element counts: 4 B to 1 MiB of uint32s. */
static const int counts[] = {1, 3, 64, 1000, 4097, 65536, MAXMSG / 4};

/* The sizes of the ping-pong, ascending: powers of two and the extras. */
static int sizes(int *out)
{
	int n = 0, e = 0;
	for (int s = 1; s <= MAXMSG; s *= 2) {
		while (e < (int)(sizeof extra / sizeof extra[0]) && extra[e] < s)
			out[n++] = extra[e++];
		out[n++] = s;
	}
	return n;
}

static long long sent_bytes, sent_msgs, reduced;

static void pingpong(int peer, int iters, uint8_t *sbuf, uint8_t *rbuf)
{
	int sz[64], nsz = sizes(sz);
	int lead = rank < peer;
	for (int k = 0; k < nsz; k++) {
		int size = sz[k];
		for (int it = 0; it < iters; it++) {
			MPI_Status st;
			int got;
			fill(sbuf, rank, peer, size, it);
			memset(rbuf, 0x5a, size + 1);
			if (lead) {
				MPI_Send(sbuf, size, MPI_BYTE, peer, size, MPI_COMM_WORLD);
				MPI_Recv(rbuf, size + 1, MPI_BYTE, peer, size, MPI_COMM_WORLD, &st);
			} else {
				MPI_Recv(rbuf, size + 1, MPI_BYTE, peer, size, MPI_COMM_WORLD, &st);
				MPI_Send(sbuf, size, MPI_BYTE, peer, size, MPI_COMM_WORLD);
			}
			MPI_Get_count(&st, MPI_BYTE, &got);
			verify(rbuf, got, peer, rank, size, it);
			if (rbuf[size] != 0x5a) {
				errors++;
				fprintf(stderr, "%s: rank %d: from %d size %d: a byte past the message was written\n",
					prog, rank, peer, size);
			}
			sent_bytes += size;
			sent_msgs++;
		}
	}
}

static uint32_t contrib32(int r, int count, size_t i)
{
	return (uint32_t)pat(r, count, 4, 0, i) << 24 | (uint32_t)pat(r, count, 4, 1, i) << 8 | (uint32_t)(r + i);
}

static void allreduce(int count, uint32_t *in, uint32_t *out)
{
	for (int i = 0; i < count; i++)
		in[i] = contrib32(rank, count, i);
	memset(out, 0x5a, (size_t)count * 4);
	MPI_Allreduce(in, out, count, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
	long bad = 0;
	for (int i = 0; i < count; i++) {
		uint32_t want = 0;
		for (int r = 0; r < nranks; r++)
			want += contrib32(r, count, i);
		if (out[i] != want && bad++ < 5)
			fprintf(stderr, "%s: rank %d: allreduce sum count %d element %d: want %#x got %#x\n",
				prog, rank, count, i, want, out[i]);
	}
	/* The same buffers as bytes, reduced by xor. */
	uint8_t *bin = (uint8_t *)in, *bout = (uint8_t *)out;
	int nbytes = count * 4;
	for (int i = 0; i < nbytes; i++)
		bin[i] = pat(rank, nbytes, nbytes, 2, i);
	memset(bout, 0x5a, nbytes);
	MPI_Allreduce(bin, bout, nbytes, MPI_UINT8_T, MPI_BXOR, MPI_COMM_WORLD);
	for (int i = 0; i < nbytes; i++) {
		uint8_t want = 0;
		for (int r = 0; r < nranks; r++)
			want ^= pat(r, nbytes, nbytes, 2, i);
		if (bout[i] != want && bad++ < 5)
			fprintf(stderr, "%s: rank %d: allreduce bxor %d bytes offset %d: want %#x got %#x\n",
				prog, rank, nbytes, i, want, bout[i]);
	}
	errors += bad;
	reduced += count;
}

int main(int argc, char **argv)
{
	int iters = 1, opt;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	while ((opt = getopt(argc, argv, "n:")) != -1) {
		if (opt == 'n' && atoi(optarg) > 0) {
			iters = atoi(optarg);
		} else {
			if (rank == 0)
				fprintf(stderr, "usage: %s [-n ITERS]\n", prog);
			MPI_Finalize();
			return 2;
		}
	}
	if (optind != argc) {
		if (rank == 0)
			fprintf(stderr, "%s: takes no operand (usage: %s [-n ITERS])\n", prog, prog);
		MPI_Finalize();
		return 2;
	}
	char host[MPI_MAX_PROCESSOR_NAME];
	int hl;
	MPI_Get_processor_name(host, &hl);
	uint8_t *sbuf = malloc(MAXMSG + 1), *rbuf = malloc(MAXMSG + 1);
	uint32_t *in = malloc(MAXMSG), *out = malloc(MAXMSG);
	if (!sbuf || !rbuf || !in || !out)
		fail("out of memory");

	MPI_Barrier(MPI_COMM_WORLD);
	struct counters before = read_counters();

	/* Round-robin (the circle method): with an odd count a phantom rank
	 * nranks sits out each round in turn. */
	int n = nranks + (nranks & 1);
	for (int round = 0; round < n - 1; round++) {
		int peer;
		if (rank == n - 1) {
			peer = round;
		} else {
			peer = ((2 * round - rank) % (n - 1) + (n - 1)) % (n - 1);
			if (peer == rank)
				peer = n - 1;
		}
		if (peer < nranks)
			pingpong(peer, iters, sbuf, rbuf);
	}
	for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
		allreduce(counts[k], in, out);

	struct counters after = read_counters();
	MPI_Barrier(MPI_COMM_WORLD);

	/* Rank 0 prints every rank's line, in rank order, then the verdict:
	 * output forwarded from many hosts would interleave. */
	char line[512], *all = NULL;
	memset(line, 0, sizeof line);
	snprintf(line, sizeof line,
		 "%s: rank %d/%d on %s: sent %lld bytes in %lld messages, allreduced %lld elements; window: tcp_data_segs %lld tcp_retrans %lld ip_out_octets %lld",
		 prog, rank, nranks, host, sent_bytes, sent_msgs, reduced,
		 after.tcp_data - before.tcp_data, after.tcp_retrans - before.tcp_retrans,
		 after.ip_out - before.ip_out);
	if (rank == 0 && !(all = malloc(sizeof line * (size_t)nranks)))
		fail("out of memory");
	MPI_Gather(line, sizeof line, MPI_CHAR, all, sizeof line, MPI_CHAR, 0, MPI_COMM_WORLD);
	long total = 0;
	MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		for (int r = 0; r < nranks; r++)
			printf("%s\n", all + (size_t)r * sizeof line);
		if (total == 0)
			printf("%s: ok\n", prog);
		else
			printf("%s: FAILED (%ld errors)\n", prog, total);
		fflush(stdout);
		free(all);
	}
	MPI_Bcast(&total, 1, MPI_LONG, 0, MPI_COMM_WORLD);
	free(sbuf);
	free(rbuf);
	free(in);
	free(out);
	MPI_Finalize();
	return total == 0 ? 0 : 1;
}
