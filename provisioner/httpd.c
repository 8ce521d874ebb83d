/* SPDX-License-Identifier: Apache-2.0 */
/* /metrics, /healthz, /readyz: see httpd.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "flag.h"
#include "fv/macro.h"
#include "events.h"
#include "httpd.h"
#include "metrics.h"
#include "params.h"

#define REQUEST_MAX 4096
#define DEADLINE_MS 2000

struct fvp_httpd {
	struct fvp_httpd_config cfg;
	int fd;
	pthread_t thread;
	volatile int quit;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int fvp_httpd_answer(const struct fvp_httpd_config *cfg, const char *req, char **body,
		     const char **type)
{
	char path[256], msg[256] = "";
	size_t m = strcspn(req, " "), n;
	const char *p;
	int r;

	*type = "text/plain; charset=utf-8";
	*body = NULL;
	if (!((m == 3 && !strncmp(req, "GET", 3)) || (m == 4 && !strncmp(req, "HEAD", 4)))) {
		*body = strdup("only GET and HEAD\n");
		return 405;
	}
	p = req + m;
	if (*p != ' ')
		return 400;
	p++;
	n = strcspn(p, " ?\r\n");
	if (!n || n >= sizeof(path) || p[0] != '/')
		return 400;
	memcpy(path, p, n);
	path[n] = '\0';
	if (streq(path, "/metrics")) {
		*type = "text/plain; version=0.0.4; charset=utf-8";
		*body = fvp_metrics_render();
		return *body ? 200 : 500;
	}
	if (streq(path, "/healthz") || streq(path, "/livez") || streq(path, "/readyz")) {
		bool ready = streq(path, "/readyz");

		r = cfg->health ? cfg->health(cfg->ud, ready, msg, sizeof(msg)) : 0;
		if (r < 0) {
			if (asprintf(body, "%s\n", msg[0] ? msg : "unhealthy") < 0)
				*body = NULL;
			return 503;
		}
		*body = strdup("ok\n");
		return 200;
	}
	*body = strdup("not found: /metrics, /healthz, /readyz\n");
	return 404;
}

/* Wait for @events on @fd until @deadline (ms).  1 when ready, 0 on timeout, <0. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mono_ms();
		struct pollfd pf = { .fd = fd, .events = events };
		int n;

		if (now >= deadline)
			return 0;
		n = poll(&pf, 1, (int)(deadline - now));
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? NEG_ERRNO() : n > 0;
	}
}

static void serve_one(struct fvp_httpd *h, int c)
{
	uint64_t deadline = mono_ms() + DEADLINE_MS;
	char req[REQUEST_MAX + 1], head[256];
	const char *type, *reason;
	size_t got = 0, off = 0, hl, bl;
	char *body = NULL;
	bool is_head;
	int st;

	/* the request line and headers, up to the blank line, within the deadline and the limit */
	while (got < REQUEST_MAX) {
		ssize_t k;

		if (wait_fd(c, POLLIN, deadline) <= 0)
			return;
		k = recv(c, req + got, REQUEST_MAX - got, MSG_DONTWAIT);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k <= 0)
			return;
		got += (size_t)k;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[got] = '\0';
	is_head = !strncmp(req, "HEAD ", 5);
	st = got >= REQUEST_MAX ? 431 : fvp_httpd_answer(&h->cfg, req, &body, &type);
	if (st == 431 || st == 400)
		type = "text/plain; charset=utf-8";
	reason = st == 200 ? "OK" : st == 404 ? "Not Found" : st == 405 ? "Method Not Allowed" :
		 st == 503 ? "Service Unavailable" : st == 431 ? "Request Header Fields Too Large" :
		 st == 500 ? "Internal Server Error" : "Bad Request";
	bl = body ? strlen(body) : 0;
	hl = (size_t)snprintf(head, sizeof(head),
			      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			      "Connection: close\r\n\r\n",
			      st, reason, type, bl);
	for (int part = 0; part < 2; part++) {
		const char *d = part ? body : head;
		size_t len = part ? (is_head ? 0 : bl) : hl;

		for (off = 0; off < len;) {
			ssize_t k;

			if (wait_fd(c, POLLOUT, deadline) <= 0)
				goto out;
			k = send(c, d + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (k < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (k <= 0)
				goto out;
			off += (size_t)k;
		}
	}
out:
	free(body);
}

static void *loop(void *arg)
{
	struct fvp_httpd *h = arg;

	while (!fvp_flag_get(&h->quit)) {
		struct pollfd pf = { .fd = h->fd, .events = POLLIN };
		int c;

		if (poll(&pf, 1, 500) <= 0)
			continue;
		c = accept4(h->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0)
			continue;
		serve_one(h, c);
		close(c);
	}
	return NULL;
}

int fvp_httpd_start(const struct fvp_httpd_config *cfg, struct fvp_httpd **ret, char *err,
		    size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[128], port[16], shown[160];
	const char *colon = strrchr(cfg->address, ':');
	struct fvp_httpd *h;
	int fd, one = 1, zero = 0, r;
	size_t hn;

	if (!colon || !colon[1] || strlen(colon + 1) >= sizeof(port) ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return fvp_fail(err, errlen, -EINVAL,
				 "--http-endpoint '%s': HOST:PORT, [V6]:PORT or :PORT", cfg->address);
	hn = (size_t)(colon - cfg->address);
	if (hn >= sizeof(host))
		return fvp_fail(err, errlen, -EINVAL, "--http-endpoint '%s': host too long",
				 cfg->address);
	memcpy(host, cfg->address, hn);
	host[hn] = '\0';
	if (hn >= 2 && host[0] == '[' && host[hn - 1] == ']') {
		memmove(host, host + 1, hn - 2);
		host[hn - 2] = '\0';
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	/* ":PORT": every address, IPv6 and IPv4 on one socket where the kernel has IPv6 */
	hints.ai_family = host[0] ? AF_UNSPEC : AF_INET6;
	r = getaddrinfo(host[0] ? host : "::", port, &hints, &ai);
	if (r != 0 && !host[0]) {
		hints.ai_family = AF_INET;
		r = getaddrinfo("0.0.0.0", port, &hints, &ai);
	}
	if (r != 0 || !ai)
		return fvp_fail(err, errlen, -EINVAL, "--http-endpoint '%s': %s", cfg->address,
				 gai_strerror(r));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 && !host[0] && ai->ai_family == AF_INET6) {
		/* no IPv6 in this pod: IPv4 only */
		freeaddrinfo(ai);
		hints.ai_family = AF_INET;
		if (getaddrinfo("0.0.0.0", port, &hints, &ai) != 0)
			return fvp_fail(err, errlen, -EINVAL, "--http-endpoint '%s'", cfg->address);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	}
	if (fd < 0) {
		r = NEG_ERRNO();
		freeaddrinfo(ai);
		return fvp_fail(err, errlen, r, "--http-endpoint: socket: %s", strerror(-r));
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6 && !host[0])
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
		r = NEG_ERRNO();
		freeaddrinfo(ai);
		close(fd);
		return fvp_fail(err, errlen, r, "--http-endpoint '%s': %s", cfg->address,
				 strerror(-r));
	}
	freeaddrinfo(ai);
	h = calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		return -ENOMEM;
	}
	h->cfg = *cfg;
	h->fd = fd;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(shown, sizeof(shown), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
	else
		snprintf(shown, sizeof(shown), "%s", cfg->address);
	r = -pthread_create(&h->thread, NULL, loop, h);
	if (r < 0) {
		close(fd);
		free(h);
		return fvp_fail(err, errlen, r, "cannot start the HTTP thread: %s", strerror(-r));
	}
	fvp_log_info("serving /metrics, /healthz, /readyz on http://%s", shown);
	*ret = h;
	return 0;
}

void fvp_httpd_stop(struct fvp_httpd *h)
{
	if (!h)
		return;
	fvp_flag_set(&h->quit, 1);
	pthread_join(h->thread, NULL);
	close(h->fd);
	free(h);
}
