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
 * nghttp2 sessions and every call's fields but the answer's, which the
 * call's handler thread writes while it runs (grpc-calls.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "grpc-int.h"
#include "fv/util.h"

void grpc_drop_input(struct grpc_call *c)
{
	grpc_buffered -= c->in_len;
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

void grpc_submit_answer(struct conn *k, struct grpc_call *c)
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
		grpc_drop_input(c);
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
		return grpc_take(k, c, m, req, len);
	grpc_drop_input(c);
	c->m = m;
	grpc_finish(c);
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
		grpc_drop_input(c);
		return 0;
	}
	if (len > GRPC_MAX_BUFFERED - grpc_buffered) {
		c->busy = true; /* every call's bytes together: the others come first */
		grpc_drop_input(c);
		return 0;
	}
	p = realloc(c->in, c->in_len + len);
	if (!p) {
		c->busy = true;
		grpc_drop_input(c);
		return 0;
	}
	memcpy(p + c->in_len, data, len);
	c->in = p;
	c->in_len += len;
	grpc_buffered += len;
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
			grpc_call_free(c);
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
			grpc_call_free(c);
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
		grpc_drop_input(c);
		grpc_submit_answer(k, c);
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
				grpc_logf("connection dropped: %s", nghttp2_strerror(r));
			k->dead = true;
			return;
		}
	}
	r = nghttp2_session_send(k->h2);
	if (r != 0) {
		if (r != NGHTTP2_ERR_CALLBACK_FAILURE) /* the socket: the peer went away */
			grpc_logf("connection dropped: %s", nghttp2_strerror(r));
		k->dead = true;
		return;
	}
	if (!nghttp2_session_want_read(k->h2) && !nghttp2_session_want_write(k->h2))
		k->dead = true;
}

/* --- the listening socket and the loop ------------------------------------- */

int grpc_listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX }, tmp = { .sun_family = AF_UNIX };
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
	/*
	 * Bound and listening under a name of its own, then renamed into place:
	 * whoever sees the socket file (kubelet's plugin watcher, a test) finds
	 * it listening, never in the moment between bind() and listen(), when a
	 * connect() is refused.  A path with no room for the suffix is bound as
	 * it is.
	 */
	if ((size_t)snprintf(tmp.sun_path, sizeof(tmp.sun_path), "%s.%d~", path, (int)getpid()) >=
	    sizeof(tmp.sun_path))
		tmp = sa;
	unlink(tmp.sun_path);
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&tmp, sizeof(tmp));
	umask(old);
	if (r == 0)
		r = listen(fd, GRPC_BACKLOG);
	if (r == 0 && !streq(tmp.sun_path, path))
		r = rename(tmp.sun_path, path);
	if (r < 0) {
		r = -errno;
		if (!streq(tmp.sun_path, path))
			unlink(tmp.sun_path);
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
			grpc_logf("%d connections and none may give way: refusing another",
				  GRPC_MAX_CONNS);
			close(fd);
			continue;
		}
		conns[i] = conn_new(fd, methods, n);
		if (conns[i])
			conn_io(conns[i], 0); /* our SETTINGS first */
	}
}

int grpc_serve(int lfd, const struct grpc_method *methods, size_t n,
	       const volatile sig_atomic_t *stop)
{
	struct conn *conns[GRPC_MAX_CONNS] = { 0 };
	struct pollfd pfd[GRPC_MAX_CONNS + 2];
	uint64_t drain_end = 0;
	int r = grpc_pool_init(methods, n);

	while (r == 0) {
		size_t np = 0, map[GRPC_MAX_CONNS];
		bool flushed = true;
		uint64_t now;

		if (*stop && !grpc_pool.draining) {
			/* SIGTERM: no new connection, no new call; those in handlers finish */
			grpc_pool.draining = true;
			drain_end = fv_now_ms() + GRPC_DRAIN_MS;
			grpc_start_waiting();
		}
		for (size_t i = 0; i < GRPC_MAX_CONNS; i++)
			if (conns[i] && nghttp2_session_want_write(conns[i]->h2))
				flushed = false;
		if (grpc_pool.draining && ((!grpc_pool_busy() && flushed) || fv_now_ms() >= drain_end)) {
			if (grpc_pool_busy())
				grpc_logf("stopping with %u calls still in their handlers after %u ms",
					  grpc_pool_busy(), GRPC_DRAIN_MS);
			break;
		}
		pfd[np++] = (struct pollfd){ .fd = grpc_pool.efd, .events = POLLIN };
		pfd[np++] = (struct pollfd){ .fd = grpc_pool.draining ? -1 : lfd, .events = POLLIN };
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
		if (poll(pfd, np, grpc_pool.draining ? 100 : 1000) < 0 && errno != EINTR) {
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
			grpc_take_done();
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
	if (!grpc_pool_busy())
		grpc_pool_fini();
	return r;
}
