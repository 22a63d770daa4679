/*
 * tcp_echo.c: an ordinary TCP program (socket, bind, listen, accept,
 * connect, send, recv, poll on plain descriptors), one process, a client
 * thread against the main thread's listener on 127.0.0.1. Run under
 * librspreload.so, whose socket() tries rsocket() first: it must work
 * whatever rsocket() answers. Prints "tcp_echo: ok".
 */
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static const char *prog = "tcp_echo";

#include "check.h"

static struct sockaddr_in addr;

static void *client(void *arg)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	char buf[16] = {0};
	struct pollfd p = {.events = POLLIN};

	CHECK(s >= 0, "client socket: %s", strerror(errno));
	CHECK(!connect(s, (struct sockaddr *)&addr, sizeof(addr)), "connect: %s", strerror(errno));
	CHECK(send(s, "hello", 5, 0) == 5, "send: %s", strerror(errno));
	p.fd = s;
	CHECK(poll(&p, 1, -1) == 1 && (p.revents & POLLIN), "poll: %s", strerror(errno));
	CHECK(recv(s, buf, 5, MSG_WAITALL) == 5 && !strcmp(buf, "HELLO"), "echo: \"%s\"", buf);
	close(s);
	return NULL;
}

int main(void)
{
	socklen_t len = sizeof(addr);
	char buf[8] = {0};
	pthread_t t;
	int l, c;

	l = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0, "socket: %s", strerror(errno));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(!bind(l, (struct sockaddr *)&addr, sizeof(addr)), "bind: %s", strerror(errno));
	CHECK(!listen(l, 1), "listen: %s", strerror(errno));
	CHECK(!getsockname(l, (struct sockaddr *)&addr, &len), "getsockname: %s", strerror(errno));
	CHECK(!pthread_create(&t, NULL, client, NULL), "pthread_create");
	c = accept(l, NULL, NULL);
	CHECK(c >= 0, "accept: %s", strerror(errno));
	CHECK(recv(c, buf, 5, MSG_WAITALL) == 5 && !strcmp(buf, "hello"), "received \"%s\"", buf);
	CHECK(send(c, "HELLO", 5, 0) == 5, "send: %s", strerror(errno));
	pthread_join(t, NULL);
	close(c);
	close(l);
	printf("tcp_echo: ok\n");
	return 0;
}
