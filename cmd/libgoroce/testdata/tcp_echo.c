/*
 * tcp_echo.c: an ordinary TCP program (socket, bind, listen, accept,
 * connect, send, recv, poll on plain descriptors), one process, a client
 * thread against the main thread's listener on ADDR (argv[1], default
 * 127.0.0.1). The client sends 1 MiB of a pattern and shuts its sending
 * side (shutdown SHUT_WR); the server reads it all, checks it, sees the
 * end (recv 0) and sends it back over the half-open connection; the
 * client checks the echo, then the server's end. Run
 * under librspreload.so, whose socket() makes an rsocket where it can.
 * Prints "tcp_echo: ok".
 */
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static const char *prog = "tcp_echo";

#include "check.h"

#define N (1 << 20)

static struct sockaddr_in addr;

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 7 + i / 251);
}

static void check_data(const unsigned char *b, const char *who)
{
	for (size_t i = 0; i < N; i++)
		CHECK(b[i] == pattern(i), "%s: byte %zu is %#x, want %#x", who, i, b[i], pattern(i));
}

static void *client(void *arg)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	unsigned char *buf = malloc(N);
	struct pollfd p = {.events = POLLIN};
	size_t got = 0;

	CHECK(buf, "malloc");
	CHECK(s >= 0, "client socket: %s", strerror(errno));
	CHECK(!connect(s, (struct sockaddr *)&addr, sizeof(addr)), "connect: %s", strerror(errno));
	for (size_t i = 0; i < N; i++)
		buf[i] = pattern(i);
	for (size_t off = 0; off < N;) {
		ssize_t n = send(s, buf + off, N - off, 0);

		CHECK(n > 0, "send: %s", strerror(errno));
		off += n;
	}
	CHECK(!shutdown(s, SHUT_WR), "shutdown: %s", strerror(errno));
	memset(buf, 0, N);
	p.fd = s;
	while (got < N) {
		ssize_t n;

		CHECK(poll(&p, 1, -1) == 1 && (p.revents & POLLIN), "poll: %s", strerror(errno));
		n = recv(s, buf + got, N - got, 0);
		CHECK(n > 0, "recv echo: %zd, %s", n, strerror(errno));
		got += n;
	}
	check_data(buf, "echo");
	CHECK(recv(s, buf, 1, 0) == 0, "recv after the echo: want the server's end (0): %s", strerror(errno));
	close(s);
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	socklen_t len = sizeof(addr);
	unsigned char *buf = malloc(N);
	pthread_t t;
	int l, c;

	CHECK(buf, "malloc");
	l = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0, "socket: %s", strerror(errno));
	addr.sin_family = AF_INET;
	CHECK(inet_pton(AF_INET, argc > 1 ? argv[1] : "127.0.0.1", &addr.sin_addr) == 1, "address %s", argv[1]);
	CHECK(!bind(l, (struct sockaddr *)&addr, sizeof(addr)), "bind: %s", strerror(errno));
	CHECK(!listen(l, 1), "listen: %s", strerror(errno));
	CHECK(!getsockname(l, (struct sockaddr *)&addr, &len), "getsockname: %s", strerror(errno));
	CHECK(!pthread_create(&t, NULL, client, NULL), "pthread_create");
	c = accept(l, NULL, NULL);
	CHECK(c >= 0, "accept: %s", strerror(errno));
	CHECK(recv(c, buf, N, MSG_WAITALL) == N, "recv: %s", strerror(errno));
	check_data(buf, "server");
	CHECK(recv(c, buf, 1, 0) == 0, "recv after 1 MiB: want the client's end (0): %s", strerror(errno));
	for (size_t off = 0; off < N;) {
		ssize_t n = send(c, buf + off, N - off, 0);

		CHECK(n > 0, "send back: %s", strerror(errno));
		off += n;
	}
	close(c);
	pthread_join(t, NULL);
	close(l);
	free(buf);
	printf("tcp_echo: ok\n");
	return 0;
}
