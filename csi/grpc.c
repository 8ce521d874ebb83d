/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gRPC unary calls over HTTP/2 (nghttp2) on a unix socket; see grpc.h.
 *
 * The wire format (gRPC over HTTP/2): a request is HEADERS (:method POST,
 * :path /<service>/<method>, content-type application/grpc...) then DATA
 * holding length-prefixed messages: one byte "compressed", four bytes
 * big-endian length, the protobuf bytes.  A unary call carries exactly one.
 * The answer is HEADERS (:status 200, content-type), DATA with one
 * length-prefixed message, and trailers (grpc-status, grpc-message); an
 * error is "trailers-only": one HEADERS frame with the status, END_STREAM.
 *
 * Threads: the loop (grpc_serve()'s caller) owns the connections, their
 * nghttp2 sessions and every call's fields but the answer's.  A call taken
 * is "running": its handler's thread writes the answer (code, msg, out) and
 * then puts the call on the done list under done_mu and wakes the loop
 * through an eventfd; the loop joins the thread (its thread-local state,
 * such as a loop device it held, is gone by then), logs the call and
 * submits the answer.  While running, a call stays allocated even when its
 * stream or connection goes (conn is then NULL; the loop frees it after).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "grpc.h"
#include "fv/util.h"

struct conn;

struct grpc_call {
	struct grpc_call *next;	 /* the connection's list of open streams */
	struct grpc_call *qnext; /* the waiting queue, or the done list */
	struct conn *conn;	 /* NULL: gone while the handler ran */
	int32_t id;
	uint64_t start_ms;	 /* its HEADERS began */
	uint64_t taken_ms;	 /* its request was complete */
	char path[128];
	bool path_bad;		 /* absent or longer than path[] */
	bool post, grpc_ct;
	uint8_t *in;		 /* the request's DATA, up to 5 + GRPC_MAX_MESSAGE */
	size_t in_len;
	size_t held;		 /* bytes of GRPC_MAX_BUFFERED kept while it waits or runs */
	bool too_big;
	bool busy;		 /* dropped: GRPC_MAX_BUFFERED reached, or out of memory */
	bool taken;		 /* the request is complete: no deadline, later DATA dropped */
	bool running;		 /* waiting for a thread or in its handler: the loop keeps off */
	bool answered;		 /* a response was submitted */
	const struct grpc_method *m;
	ProtobufCMessage *req;
	pthread_t thread;
	/* the answer, the handler's thread's while running */
	enum grpc_code code;
	char msg[1024];
	bool replied;		 /* grpc_reply() or grpc_fail() ran */
	uint8_t *out;		 /* length-prefixed response message */
	size_t out_len, out_off;
};

struct conn {
	int fd;
	nghttp2_session *h2;
	struct grpc_call *calls;
	unsigned int running;	 /* its calls waiting for a thread or in a handler */
	uint64_t last_ms;	 /* the last byte in or out */
	bool closing;		 /* GOAWAY submitted: close once it is written */
	bool dead;
	const struct grpc_method *methods;
	size_t nmethods;
};

static void logf_(const char *fmt, ...) _printf_(1, 2);

/* Where the endpoint's log goes: stderr (the container's log); the fuzz targets' /dev/null. */
static int log_fd = STDERR_FILENO;

/*
 * The endpoint's log: one line, one write (the loop thread alone logs).
 * What a client sent is escaped by the caller (grpc_log_escape()).
 */
static void logf_(const char *fmt, ...)
{
	char line[4096];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(log_fd, line, (size_t)n);
}

size_t grpc_log_escape(const char *s, char *out, size_t size)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (!size)
		return 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char e[4] = { '\\', 0, 0, 0 };
		size_t n = 2;

		if (*p == '\\' || *p == '\n' || *p == '\r' || *p == '\t') {
			e[1] = *p == '\\' ? '\\' : *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
		} else if (*p < 0x20 || *p > 0x7e) {
			e[1] = 'x';
			e[2] = hex[*p >> 4];
			e[3] = hex[*p & 15];
			n = 4;
		} else {
			e[0] = (char)*p;
			n = 1;
		}
		if (o + n >= size)
			break;
		memcpy(out + o, e, n);
		o += n;
	}
	out[o] = '\0';
	return o;
}

/* Request bytes of all calls together (GRPC_MAX_BUFFERED), until answered: the loop's. */
static size_t buffered;

/*
 * The handler threads.  Two classes, each with its own threads and its own
 * queue of calls waiting for one: [0] calls that change something, [1]
 * calls that only look.  The loop's but done, done_tail (under done_mu).
 */
static struct {
	const struct grpc_method *methods;
	size_t nmethods;
	unsigned int *method_busy;	/* look calls in a handler, per method */
	unsigned int busy[2];		/* threads running */
	struct grpc_call *wait_head[2], **wait_tail[2];
	unsigned int waiting;
	bool draining;			/* stop: calls not started are refused */
	bool inline_calls;		/* handlers on the loop thread (the fuzz targets) */
	int efd;			/* eventfd: a handler finished */
	pthread_attr_t attr;
	pthread_mutex_t done_mu;
	struct grpc_call *done, **done_tail;
} pool = { .efd = -1, .done_mu = PTHREAD_MUTEX_INITIALIZER };

/* Free what @c buffered of its request. */
static void drop_input(struct grpc_call *c)
{
	buffered -= c->in_len;
	free(c->in);
	c->in = NULL;
	c->in_len = 0;
}

void grpc_percent_encode(const char *msg, char *out, size_t size)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	if (!size)
		return;
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
			if (o + 1 >= size)
				break;
			out[o++] = (char)*p;
		} else {
			if (o + 3 >= size)
				break;
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
}

const char *grpc_call_method(const struct grpc_call *call)
{
	return call->path;
}

int grpc_fail(struct grpc_call *call, enum grpc_code code, const char *fmt, ...)
{
	va_list ap;

	if (call->replied)
		return code;
	call->replied = true;
	call->code = code == GRPC_OK ? GRPC_UNKNOWN : code;
	va_start(ap, fmt);
	vsnprintf(call->msg, sizeof(call->msg), fmt, ap);
	va_end(ap);
	return code;
}

void grpc_reply(struct grpc_call *call, const ProtobufCMessage *resp)
{
	size_t n = protobuf_c_message_get_packed_size(resp);

	if (call->replied)
		return;
	call->out = malloc(5 + n);
	if (!call->out) {
		grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory for a %zu-byte answer", n);
		return;
	}
	call->out[0] = 0;
	call->out[1] = (uint8_t)(n >> 24);
	call->out[2] = (uint8_t)(n >> 16);
	call->out[3] = (uint8_t)(n >> 8);
	call->out[4] = (uint8_t)n;
	protobuf_c_message_pack(resp, call->out + 5);
	call->out_len = 5 + n;
	call->replied = true;
	call->code = GRPC_OK;
}

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

static ssize_t read_answer(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
			   uint32_t *flags, nghttp2_data_source *src, void *user)
{
	struct grpc_call *c = src->ptr;
	size_t n = c->out_len - c->out_off;

	if (n > length)
		n = length;
	memcpy(buf, c->out + c->out_off, n);
	c->out_off += n;
	if (c->out_off == c->out_len) {
		nghttp2_nv tr[] = { NV("grpc-status", "0") };

		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(h2, id, tr, ARRAY_SIZE(tr)) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

/* Submit the answer of @c: its message and trailers, or trailers-only with the error. */
static void submit_answer(struct conn *k, struct grpc_call *c)
{
	char code[16], msg[sizeof(c->msg) * 3];
	int r;

	c->answered = true;
	if (c->code == GRPC_OK && c->out) {
		nghttp2_nv hd[] = { NV(":status", "200"), NV("content-type", "application/grpc") };
		nghttp2_data_provider dp = { .source.ptr = c, .read_callback = read_answer };

		r = nghttp2_submit_response(k->h2, c->id, hd, ARRAY_SIZE(hd), &dp);
	} else {
		snprintf(code, sizeof(code), "%d", (int)c->code);
		grpc_percent_encode(c->msg, msg, sizeof(msg));
		nghttp2_nv hd[] = { NV(":status", "200"), NV("content-type", "application/grpc"),
				    NV("grpc-status", code), NV("grpc-message", msg) };

		r = nghttp2_submit_response(k->h2, c->id, hd, ARRAY_SIZE(hd), NULL);
	}
	if (r != 0)
		nghttp2_submit_rst_stream(k->h2, NGHTTP2_FLAG_NONE, c->id, NGHTTP2_INTERNAL_ERROR);
}

static const struct grpc_method *find_method(const struct conn *k, const char *path)
{
	for (size_t i = 0; i < k->nmethods; i++)
		if (streq(k->methods[i].path, path))
			return &k->methods[i];
	return NULL;
}

/* A protobuf varint at @p[*i..n): false when cut short or longer than 10 bytes. */
static bool varint(const uint8_t *p, size_t n, size_t *i, uint64_t *ret)
{
	uint64_t v = 0;

	for (unsigned int shift = 0; shift < 70 && *i < n; shift += 7) {
		uint8_t b = p[(*i)++];

		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*ret = v;
			return true;
		}
	}
	return false;
}

/*
 * Does a string field of message @d in @p[0..n) hold a NUL byte?  protobuf-c
 * hands strings over NUL-terminated, so "a.img\0../x" would reach the op
 * layer as "a.img": such a request is refused, as the FlexVolume options
 * parser refuses a NUL (docs/design.md, "The op layer").  Walks the wire
 * format with the descriptor, into nested messages (map entries are
 * messages).  1: a NUL; 0: none; -1: malformed (unpack refuses it).
 */
static int nul_in_strings(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n,
			  unsigned int depth)
{
	size_t i = 0;

	if (depth > 16) /* the CSI messages nest a few levels; they are not recursive */
		return 1;
	while (i < n) {
		const ProtobufCFieldDescriptor *f;
		uint64_t key, v;
		int r;

		if (!varint(p, n, &i, &key))
			return -1;
		switch (key & 7) {
		case 0: /* varint */
			if (!varint(p, n, &i, &v))
				return -1;
			break;
		case 1: /* 64-bit */
			if (n - i < 8)
				return -1;
			i += 8;
			break;
		case 5: /* 32-bit */
			if (n - i < 4)
				return -1;
			i += 4;
			break;
		case 2: /* length-delimited */
			if (!varint(p, n, &i, &v) || v > n - i)
				return -1;
			f = key >> 3 <= UINT32_MAX ?
				    protobuf_c_message_descriptor_get_field(d, (unsigned int)(key >> 3)) :
				    NULL;
			if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, v))
				return 1;
			if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
				r = nul_in_strings(f->descriptor, p + i, v, depth + 1);
				if (r)
					return r;
			}
			i += v;
			break;
		default: /* groups: not in proto3 */
			return -1;
		}
	}
	return 0;
}

/* Free a call whose stream is closed. */
static void call_free(struct grpc_call *c)
{
	drop_input(c);
	buffered -= c->held;
	free(c->out);
	free(c);
}

/* Log @c's answer (not a look call's success) and submit it, unless its stream is gone. */
static void finish(struct grpc_call *c)
{
	char path[sizeof(c->path) * 4], msg[sizeof(c->msg) * 4];

	if (!c->replied)
		grpc_fail(c, GRPC_INTERNAL, "%s gave no answer", c->path);
	buffered -= c->held;
	c->held = 0;
	if (c->code != GRPC_OK || !c->m || !c->m->look) {
		grpc_log_escape(c->path_bad ? "-" : c->path, path, sizeof(path));
		grpc_log_escape(c->code ? c->msg : "", msg, sizeof(msg));
		logf_("%s code=%d duration_ms=%llu%s%s", path, (int)c->code,
		      (unsigned long long)(fv_now_ms() - c->taken_ms), c->code ? " message=" : "",
		      msg);
	}
	if (!c->conn) {
		call_free(c); /* its stream went while it ran: nobody to answer */
		return;
	}
	submit_answer(c->conn, c);
}

/* The handler's thread: run, hand the call back to the loop. */
static void *call_thread(void *arg)
{
	struct grpc_call *c = arg;
	uint64_t one = 1;

	c->m->run(c, c->req);
	protobuf_c_message_free_unpacked(c->req, NULL);
	c->req = NULL;
	pthread_mutex_lock(&pool.done_mu);
	c->qnext = NULL;
	*pool.done_tail = c;
	pool.done_tail = &c->qnext;
	pthread_mutex_unlock(&pool.done_mu);
	/* the last touch of c: the loop may free it from here on */
	(void)!write(pool.efd, &one, sizeof(one));
	return NULL;
}

/* May a call of @m start now (a thread of its class, and its method's share of look threads)? */
static bool can_start(const struct grpc_method *m)
{
	if (!m->look)
		return pool.busy[0] < GRPC_WORKERS;
	return pool.busy[1] < GRPC_LOOKERS &&
	       pool.method_busy[m - pool.methods] < GRPC_LOOK_PER_METHOD;
}

/* Start @c's handler on a thread of its own: false when no thread could be made. */
static bool start(struct grpc_call *c)
{
	if (pthread_create(&c->thread, &pool.attr, call_thread, c) != 0)
		return false;
	pool.busy[c->m->look]++;
	if (c->m->look)
		pool.method_busy[c->m - pool.methods]++;
	return true;
}

/* The handler of @c ran: its thread is gone; the answer goes out; waiting calls may start. */
static void call_done(struct grpc_call *c)
{
	pthread_join(c->thread, NULL);
	pool.busy[c->m->look]--;
	if (c->m->look)
		pool.method_busy[c->m - pool.methods]--;
	c->running = false;
	if (c->conn)
		c->conn->running--;
	finish(c);
}

/* A call that cannot run now (stopping, no thread): answered at once. */
static void refuse(struct grpc_call *c, enum grpc_code code, const char *why)
{
	protobuf_c_message_free_unpacked(c->req, NULL);
	c->req = NULL;
	c->running = false;
	if (c->conn)
		c->conn->running--;
	grpc_fail(c, code, "%s", why);
	finish(c);
}

/* Start what waits, oldest first, as far as threads allow (a look method at its share waits). */
static void start_waiting(void)
{
	for (int k = 0; k < 2; k++) {
		for (struct grpc_call **pp = &pool.wait_head[k]; *pp;) {
			struct grpc_call *c = *pp;

			if (!pool.draining && !can_start(c->m)) {
				if (pool.busy[k] >= (k ? GRPC_LOOKERS : GRPC_WORKERS))
					break;
				pp = &c->qnext;
				continue;
			}
			*pp = c->qnext;
			if (!*pp)
				pool.wait_tail[k] = pp;
			pool.waiting--;
			if (pool.draining)
				refuse(c, GRPC_UNAVAILABLE, "the endpoint is stopping; try again");
			else if (!start(c))
				refuse(c, GRPC_UNAVAILABLE, "cannot start a thread for the call; "
				       "try again");
		}
	}
}

/* The answers of the handlers that finished. */
static void take_done(void)
{
	struct grpc_call *c;
	uint64_t n;

	(void)!read(pool.efd, &n, sizeof(n));
	pthread_mutex_lock(&pool.done_mu);
	c = pool.done;
	pool.done = NULL;
	pool.done_tail = &pool.done;
	pthread_mutex_unlock(&pool.done_mu);
	while (c) {
		struct grpc_call *next = c->qnext;

		call_done(c);
		c = next;
	}
	start_waiting();
}

/* Hand the unpacked request of @c to a thread, now or when one is free. */
static void take(struct conn *k, struct grpc_call *c, const struct grpc_method *m,
		 ProtobufCMessage *req, uint32_t len)
{
	int cls = m->look;

	c->m = m;
	c->req = req;
	/* the unpacked message holds copies; the bytes' share of the bound stays until answered */
	c->held = len;
	buffered += len;
	drop_input(c);
	c->running = true;
	k->running++;
	if (pool.inline_calls) {
		m->run(c, req);
		refuse(c, GRPC_INTERNAL, "no answer"); /* frees the request; a given answer stays */
		return;
	}
	if (pool.draining) {
		refuse(c, GRPC_UNAVAILABLE, "the endpoint is stopping; try again");
		return;
	}
	if (can_start(m) && !pool.wait_head[cls]) {
		if (!start(c))
			refuse(c, GRPC_UNAVAILABLE, "cannot start a thread for the call; try again");
		return;
	}
	if (pool.waiting >= GRPC_MAX_WAITING) {
		refuse(c, GRPC_RESOURCE_EXHAUSTED, "too many calls wait already; try again");
		return;
	}
	c->qnext = NULL;
	*pool.wait_tail[cls] = c;
	pool.wait_tail[cls] = &c->qnext;
	pool.waiting++;
}

/* The request of @c is complete: check its frame, unpack, hand it to a handler, or answer. */
static void run_call(struct conn *k, struct grpc_call *c)
{
	const struct grpc_method *m = NULL;
	ProtobufCMessage *req;
	uint32_t len = 0;

	if (c->taken || c->answered)
		return;
	c->taken = true;
	c->taken_ms = fv_now_ms();
	if (!c->grpc_ct) {
		/* not gRPC at all: HTTP's own answer (gRPC over HTTP/2: 415) */
		nghttp2_nv hd[] = { NV(":status", "415") };

		c->answered = true;
		drop_input(c);
		nghttp2_submit_response(k->h2, c->id, hd, ARRAY_SIZE(hd), NULL);
		return;
	}
	if (!c->post || c->path_bad)
		grpc_fail(c, GRPC_UNIMPLEMENTED, "only POST to /<service>/<method> is served");
	else if (!(m = find_method(k, c->path)))
		grpc_fail(c, GRPC_UNIMPLEMENTED, "unknown method %s", c->path);
	else if (c->busy)
		grpc_fail(c, GRPC_RESOURCE_EXHAUSTED, "the endpoint holds %u bytes of requests "
			  "already; try again", GRPC_MAX_BUFFERED);
	else if (c->too_big)
		grpc_fail(c, GRPC_RESOURCE_EXHAUSTED, "request message larger than %u bytes",
			  GRPC_MAX_MESSAGE);
	else if (c->in_len < 5)
		grpc_fail(c, GRPC_INTERNAL, "no request message (%zu bytes of a 5-byte prefix)",
			  c->in_len);
	else if (c->in[0] == 1)
		grpc_fail(c, GRPC_UNIMPLEMENTED, "compressed messages are not accepted");
	else if (c->in[0] != 0)
		grpc_fail(c, GRPC_INTERNAL, "bad message flag %u", c->in[0]);
	else if ((len = (uint32_t)c->in[1] << 24 | (uint32_t)c->in[2] << 16 |
		  (uint32_t)c->in[3] << 8 | c->in[4]) > GRPC_MAX_MESSAGE)
		grpc_fail(c, GRPC_RESOURCE_EXHAUSTED, "request message of %u bytes, limit %u",
			  len, GRPC_MAX_MESSAGE);
	else if (c->in_len - 5 < len)
		grpc_fail(c, GRPC_INTERNAL, "truncated message: %zu of %u bytes", c->in_len - 5,
			  len);
	else if (c->in_len - 5 > len)
		grpc_fail(c, GRPC_INTERNAL, "more than one message in a unary call");
	else if (nul_in_strings(m->request, c->in + 5, len, 0) == 1)
		grpc_fail(c, GRPC_INVALID_ARGUMENT, "a string in the request holds a NUL byte "
			  "(or the request nests too deep)");
	else if (!(req = protobuf_c_message_unpack(m->request, NULL, len, c->in + 5)))
		grpc_fail(c, GRPC_INTERNAL, "cannot parse the request as %s", m->request->name);
	else
		return take(k, c, m, req, len);
	drop_input(c);
	c->m = m;
	finish(c);
}

/* --- nghttp2 callbacks ---------------------------------------------------- */

static ssize_t on_send(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *user)
{
	struct conn *k = user;
	ssize_t n = send(k->fd, data, len, MSG_NOSIGNAL);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? NGHTTP2_ERR_WOULDBLOCK
							 : NGHTTP2_ERR_CALLBACK_FAILURE;
	k->last_ms = fv_now_ms();
	return n;
}

static ssize_t on_recv(nghttp2_session *h2, uint8_t *buf, size_t len, int flags, void *user)
{
	struct conn *k = user;
	ssize_t n = recv(k->fd, buf, len, 0);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? NGHTTP2_ERR_WOULDBLOCK
							 : NGHTTP2_ERR_CALLBACK_FAILURE;
	if (n == 0)
		return NGHTTP2_ERR_EOF;
	k->last_ms = fv_now_ms();
	return n;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	struct conn *k = user;
	struct grpc_call *c;

	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	c->conn = k;
	c->id = f->hd.stream_id;
	c->start_ms = fv_now_ms();
	c->path_bad = true;
	c->next = k->calls;
	k->calls = c;
	nghttp2_session_set_stream_user_data(h2, c->id, c);
	return 0;
}

static bool has_prefix_n(const uint8_t *s, size_t n, const char *p)
{
	size_t l = strlen(p);

	return n >= l && memcmp(s, p, l) == 0;
}

static bool eq_n(const uint8_t *s, size_t n, const char *p)
{
	return n == strlen(p) && memcmp(s, p, n) == 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
	struct grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);

	if (!c || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (eq_n(name, namelen, ":path")) {
		c->path_bad = valuelen == 0 || valuelen >= sizeof(c->path) || value[0] != '/';
		if (!c->path_bad) {
			memcpy(c->path, value, valuelen);
			c->path[valuelen] = '\0';
		}
	} else if (eq_n(name, namelen, ":method")) {
		c->post = eq_n(value, valuelen, "POST");
	} else if (eq_n(name, namelen, "content-type")) {
		/* application/grpc, or application/grpc+proto, application/grpc;... */
		c->grpc_ct = eq_n(value, valuelen, "application/grpc") ||
			     has_prefix_n(value, valuelen, "application/grpc+") ||
			     has_prefix_n(value, valuelen, "application/grpc;");
	}
	return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *user)
{
	struct grpc_call *c = nghttp2_session_get_stream_user_data(h2, id);
	uint8_t *p;

	if (!c || c->taken || c->answered || c->too_big || c->busy)
		return 0;
	if (len > 5 + (size_t)GRPC_MAX_MESSAGE - c->in_len) {
		c->too_big = true;
		drop_input(c);
		return 0;
	}
	if (len > GRPC_MAX_BUFFERED - buffered) {
		c->busy = true; /* every call's bytes together: the others come first */
		drop_input(c);
		return 0;
	}
	p = realloc(c->in, c->in_len + len);
	if (!p) {
		c->busy = true;
		drop_input(c);
		return 0;
	}
	memcpy(p + c->in_len, data, len);
	c->in = p;
	c->in_len += len;
	buffered += len;
	return 0;
}

static int on_frame(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	struct grpc_call *c;

	if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
	    !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (c)
		run_call(user, c);
	return 0;
}

static int on_close(nghttp2_session *h2, int32_t id, uint32_t error_code, void *user)
{
	struct conn *k = user;

	for (struct grpc_call **pp = &k->calls; *pp; pp = &(*pp)->next) {
		struct grpc_call *c = *pp;

		if (c->id != id)
			continue;
		*pp = c->next;
		if (c->running) {
			/* its handler (or its turn) is to come: the call goes when it is done */
			c->conn = NULL;
			k->running--;
		} else {
			call_free(c);
		}
		break;
	}
	return 0;
}

/* --- connections ----------------------------------------------------------- */

static void conn_free(struct conn *k)
{
	if (k->h2)
		nghttp2_session_del(k->h2); /* closes the streams: on_close frees the calls */
	while (k->calls) {
		struct grpc_call *c = k->calls;

		k->calls = c->next;
		if (c->running)
			c->conn = NULL; /* freed when its handler is done */
		else
			call_free(c);
	}
	if (k->fd >= 0)
		close(k->fd);
	free(k);
}

static struct conn *conn_new(int fd, const struct grpc_method *methods, size_t n)
{
	nghttp2_session_callbacks *cb = NULL;
	nghttp2_option *opt = NULL;
	struct conn *k = calloc(1, sizeof(*k));
	nghttp2_settings_entry set[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADERS },
	};

	if (!k) {
		close(fd);
		return NULL;
	}
	k->fd = fd;
	k->methods = methods;
	k->nmethods = n;
	k->last_ms = fv_now_ms();
	if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0)
		goto fail;
	nghttp2_session_callbacks_set_send_callback(cb, on_send);
	nghttp2_session_callbacks_set_recv_callback(cb, on_recv);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
	/* a client may not open more streams than it was told, nor queue unbounded control frames */
	nghttp2_option_set_max_reserved_remote_streams(opt, 0);
	nghttp2_option_set_max_outbound_ack(opt, 64);
	nghttp2_option_set_max_settings(opt, 16);
	if (nghttp2_session_server_new2(&k->h2, cb, k, opt) != 0)
		goto fail;
	if (nghttp2_submit_settings(k->h2, NGHTTP2_FLAG_NONE, set, ARRAY_SIZE(set)) != 0)
		goto fail;
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	return k;
fail:
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	conn_free(k);
	return NULL;
}

/*
 * Requests that did not arrive in time are answered DEADLINE_EXCEEDED; idle
 * or stuck connections go.  A connection with a call waiting or in a
 * handler has nothing to move until the answer: no timer closes it.
 */
static void conn_timers(struct conn *k, uint64_t now)
{
	for (struct grpc_call *c = k->calls; c; c = c->next) {
		if (c->taken || c->answered || now - c->start_ms < GRPC_REQUEST_MS)
			continue;
		c->taken = true;
		c->code = GRPC_DEADLINE_EXCEEDED;
		snprintf(c->msg, sizeof(c->msg), "the request did not arrive within %u ms",
			 GRPC_REQUEST_MS);
		drop_input(c);
		submit_answer(k, c);
		k->last_ms = now; /* the answer is to go out before the stall timer may drop it */
	}
	if (k->running)
		return;
	if (now - k->last_ms >= (k->calls || k->closing ? GRPC_STALL_MS : GRPC_IDLE_MS)) {
		if (k->calls || k->closing) {
			k->dead = true; /* nothing moved: the peer is gone or stuck */
		} else {
			nghttp2_session_terminate_session(k->h2, NGHTTP2_NO_ERROR);
			k->closing = true;
			k->last_ms = now;
		}
	}
}

/* Read and write what @revents allows; mark @k dead when it is done. */
static void conn_io(struct conn *k, short revents)
{
	int r;

	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		r = nghttp2_session_recv(k->h2);
		if (r != 0) {
			if (r != NGHTTP2_ERR_EOF && r != NGHTTP2_ERR_CALLBACK_FAILURE)
				logf_("connection dropped: %s", nghttp2_strerror(r));
			k->dead = true;
			return;
		}
	}
	r = nghttp2_session_send(k->h2);
	if (r != 0) {
		if (r != NGHTTP2_ERR_CALLBACK_FAILURE) /* the socket: the peer went away */
			logf_("connection dropped: %s", nghttp2_strerror(r));
		k->dead = true;
		return;
	}
	if (!nghttp2_session_want_read(k->h2) && !nghttp2_session_want_write(k->h2))
		k->dead = true;
}

/* --- the listening socket and the loop ------------------------------------- */

int grpc_listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* a socket file somebody still accepts on is theirs; a stale one is ours to replace */
	{
		struct stat st;
		int probe;

		if (lstat(path, &st) == 0) {
			if (!S_ISSOCK(st.st_mode)) {
				close(fd);
				return -EEXIST;
			}
			probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
				close(probe);
				close(fd);
				return -EADDRINUSE;
			}
			if (probe >= 0)
				close(probe);
			unlink(path);
		}
	}
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, GRPC_BACKLOG) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/*
 * Every slot is taken: close the connection without a call idle longest, so
 * that clients which leave connections open (or never speak) cannot lock the
 * endpoint out; else the one silent longest, GRPC_EVICT_MS at least, of
 * those with no call waiting or in a handler (a request that stalls half-way,
 * an answer its reader does not take).  Returns its slot, or GRPC_MAX_CONNS
 * when none may go.
 */
static size_t evict(struct conn **conns, uint64_t now)
{
	size_t idle = GRPC_MAX_CONNS, silent = GRPC_MAX_CONNS, best;

	for (size_t i = 0; i < GRPC_MAX_CONNS; i++) {
		const struct conn *k = conns[i];

		if (k->running)
			continue;
		if (!k->calls && (idle == GRPC_MAX_CONNS || k->last_ms < conns[idle]->last_ms))
			idle = i;
		if (k->calls && now - k->last_ms >= GRPC_EVICT_MS &&
		    (silent == GRPC_MAX_CONNS || k->last_ms < conns[silent]->last_ms))
			silent = i;
	}
	best = idle < GRPC_MAX_CONNS ? idle : silent;
	if (best < GRPC_MAX_CONNS) {
		conn_free(conns[best]);
		conns[best] = NULL;
	}
	return best;
}

/* Accept what the backlog holds, into free slots (or those evict() frees). */
static void accept_all(int lfd, struct conn **conns, const struct grpc_method *methods, size_t n)
{
	for (unsigned int tries = 0; tries < GRPC_BACKLOG; tries++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		size_t i;

		if (fd < 0)
			return; /* EAGAIN: all taken; else the next poll tells */
		for (i = 0; i < GRPC_MAX_CONNS && conns[i]; i++)
			;
		if (i == GRPC_MAX_CONNS)
			i = evict(conns, fv_now_ms());
		if (i == GRPC_MAX_CONNS) {
			logf_("%d connections with calls in progress: refusing another",
			      GRPC_MAX_CONNS);
			close(fd);
			continue;
		}
		conns[i] = conn_new(fd, methods, n);
		if (conns[i])
			conn_io(conns[i], 0); /* our SETTINGS first */
	}
}

/* The handler threads' settings, the queues; once, before the first call. */
static int pool_init(const struct grpc_method *methods, size_t n)
{
	sigset_t mask;
	int r;

	pool.methods = methods;
	pool.nmethods = n;
	pool.method_busy = calloc(n ? n : 1, sizeof(*pool.method_busy));
	if (!pool.method_busy)
		return -ENOMEM;
	for (int k = 0; k < 2; k++)
		pool.wait_tail[k] = &pool.wait_head[k];
	pool.done_tail = &pool.done;
	pool.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pool.efd < 0)
		return -errno;
	r = pthread_attr_init(&pool.attr);
	if (r == 0)
		r = pthread_attr_setstacksize(&pool.attr, GRPC_THREAD_STACK);
	/*
	 * SIGTERM and SIGINT are the loop's (its poll() returns); a handler
	 * keeps SIGALRM (the op layer's lock waits) and the faults.
	 */
	sigfillset(&mask);
	sigdelset(&mask, SIGALRM);
	sigdelset(&mask, SIGSEGV);
	sigdelset(&mask, SIGBUS);
	sigdelset(&mask, SIGFPE);
	sigdelset(&mask, SIGILL);
	sigdelset(&mask, SIGABRT);
	if (r == 0)
		r = pthread_attr_setsigmask_np(&pool.attr, &mask);
	return -r;
}

static void pool_fini(void)
{
	pthread_attr_destroy(&pool.attr);
	if (pool.efd >= 0)
		close(pool.efd);
	pool.efd = -1;
	free(pool.method_busy);
	pool.method_busy = NULL;
}

/* Calls in a handler now (waiting ones are refused once stopping). */
static unsigned int pool_busy(void)
{
	return pool.busy[0] + pool.busy[1];
}

int grpc_serve(int lfd, const struct grpc_method *methods, size_t n,
	       const volatile sig_atomic_t *stop)
{
	struct conn *conns[GRPC_MAX_CONNS] = { 0 };
	struct pollfd pfd[GRPC_MAX_CONNS + 2];
	uint64_t drain_end = 0;
	int r = pool_init(methods, n);

	while (r == 0) {
		size_t np = 0, map[GRPC_MAX_CONNS];
		bool flushed = true;
		uint64_t now;

		if (*stop && !pool.draining) {
			/* SIGTERM: no new connection, no new call; those in handlers finish */
			pool.draining = true;
			drain_end = fv_now_ms() + GRPC_DRAIN_MS;
			start_waiting();
		}
		for (size_t i = 0; i < GRPC_MAX_CONNS; i++)
			if (conns[i] && nghttp2_session_want_write(conns[i]->h2))
				flushed = false;
		if (pool.draining && ((!pool_busy() && flushed) || fv_now_ms() >= drain_end)) {
			if (pool_busy())
				logf_("stopping with %u calls still in their handlers after %u ms",
				      pool_busy(), GRPC_DRAIN_MS);
			break;
		}
		pfd[np++] = (struct pollfd){ .fd = pool.efd, .events = POLLIN };
		pfd[np++] = (struct pollfd){ .fd = pool.draining ? -1 : lfd, .events = POLLIN };
		for (size_t i = 0; i < GRPC_MAX_CONNS; i++) {
			struct conn *k = conns[i];

			if (!k)
				continue;
			pfd[np] = (struct pollfd){ .fd = k->fd, .events = 0 };
			if (nghttp2_session_want_read(k->h2))
				pfd[np].events |= POLLIN;
			if (nghttp2_session_want_write(k->h2))
				pfd[np].events |= POLLOUT;
			map[np - 2] = i;
			np++;
		}
		if (poll(pfd, np, pool.draining ? 100 : 1000) < 0 && errno != EINTR) {
			r = -errno;
			break;
		}
		if (pfd[1].revents & POLLIN)
			accept_all(lfd, conns, methods, n);
		for (size_t p = 2; p < np; p++) {
			struct conn *k = conns[map[p - 2]];

			if (k && pfd[p].revents)
				conn_io(k, pfd[p].revents);
		}
		if (pfd[0].revents & POLLIN)
			take_done();
		now = fv_now_ms(); /* after the I/O, which stamps last_ms and start_ms */
		for (size_t i = 0; i < GRPC_MAX_CONNS; i++) {
			struct conn *k = conns[i];

			if (!k)
				continue;
			if (!k->dead) {
				conn_timers(k, now);
				if (!k->dead)
					conn_io(k, 0); /* what the timers and the handlers submitted */
			}
			if (k->dead) {
				conn_free(k);
				conns[i] = NULL;
			}
		}
	}
	for (size_t i = 0; i < GRPC_MAX_CONNS; i++)
		if (conns[i])
			conn_free(conns[i]);
	/* handlers past the drain: left to the process's exit (their calls are orphans now) */
	if (!pool_busy())
		pool_fini();
	return r;
}
