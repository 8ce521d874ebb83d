/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A call's way from its unpacked request to its answer (grpc-int.h): the
 * handler threads, and the endpoint's log line.
 *
 * A call taken is "running": its handler's thread writes the answer (code,
 * msg, out), then puts the call on the done list under done_mu and wakes
 * the loop through an eventfd; the loop joins the thread (its thread-local
 * state, such as a loop device it held, is gone by then), logs the call
 * and submits the answer.  While running, a call stays allocated even when
 * its stream or connection goes (conn is then NULL; the loop frees it
 * after).  Two classes of threads, each with its own queue: calls that
 * change something, calls that only look (grpc.h, "The bounds").
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "grpc-int.h"
#include "fv/util.h"

struct grpc_pool grpc_pool = { .efd = -1, .done_mu = PTHREAD_MUTEX_INITIALIZER };
size_t grpc_buffered;
int grpc_log_fd = STDERR_FILENO;

/*
 * The endpoint's log: one line, one write (the loop thread alone logs).
 * What a client sent is escaped by the caller (grpc_log_escape()).
 */
void grpc_logf(const char *fmt, ...)
{
	char line[4096];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line + 13, sizeof(line) - 14, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	memcpy(line, "flexvol-csi: ", 13);
	n += 13;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(grpc_log_fd, line, (size_t)n);
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

void grpc_call_free(struct grpc_call *c)
{
	grpc_drop_input(c);
	grpc_buffered -= c->held;
	free(c->out);
	free(c);
}

void grpc_finish(struct grpc_call *c)
{
	char path[sizeof(c->path) * 4], msg[sizeof(c->msg) * 4];

	if (!c->replied)
		grpc_fail(c, GRPC_INTERNAL, "%s gave no answer", c->path);
	grpc_buffered -= c->held;
	c->held = 0;
	if (c->code != GRPC_OK || !c->m || !c->m->look) {
		grpc_log_escape(c->path_bad ? "-" : c->path, path, sizeof(path));
		grpc_log_escape(c->code ? c->msg : "", msg, sizeof(msg));
		grpc_logf("%s code=%d duration_ms=%llu%s%s", path, (int)c->code,
			  (unsigned long long)(fv_now_ms() - c->taken_ms), c->code ? " message=" : "",
			  msg);
	}
	if (!c->conn) {
		grpc_call_free(c); /* its stream went while it ran: nobody to answer */
		return;
	}
	grpc_submit_answer(c->conn, c);
}

/* The handler's thread: run, hand the call back to the loop. */
static void *call_thread(void *arg)
{
	struct grpc_call *c = arg;
	uint64_t one = 1;

	c->m->run(c, c->req);
	protobuf_c_message_free_unpacked(c->req, NULL);
	c->req = NULL;
	pthread_mutex_lock(&grpc_pool.done_mu);
	c->qnext = NULL;
	*grpc_pool.done_tail = c;
	grpc_pool.done_tail = &c->qnext;
	pthread_mutex_unlock(&grpc_pool.done_mu);
	/* the last touch of c: the loop may free it from here on */
	(void)!write(grpc_pool.efd, &one, sizeof(one));
	return NULL;
}

/* May a call of @m start now (a thread of its class, and its method's share of look threads)? */
static bool can_start(const struct grpc_method *m)
{
	if (!m->look)
		return grpc_pool.busy[0] < GRPC_WORKERS;
	return grpc_pool.busy[1] < GRPC_LOOKERS &&
	       grpc_pool.method_busy[m - grpc_pool.methods] < GRPC_LOOK_PER_METHOD;
}

/*
 * The handlers' stacks, kept here from one call to the next (the loop's:
 * taken in start(), given back once the thread is joined, so no stack is
 * reused while its thread may still touch it).  A stack glibc made is
 * released to the kernel at each thread's end (MADV_DONTNEED of all but its
 * top), so every call paid a page fault for each page of stack it touched
 * again, about 20 a call; a stack of ours keeps its pages.  A guard page at
 * the bottom, as glibc's.
 */
#define GUARD 4096u

static void *stack_take(void)
{
	uint8_t *b;

	if (grpc_pool.nstacks)
		return grpc_pool.stacks[--grpc_pool.nstacks];
	b = mmap(NULL, GUARD + GRPC_THREAD_STACK, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (b == MAP_FAILED)
		return NULL;
	if (mprotect(b, GUARD, PROT_NONE) < 0) {
		munmap(b, GUARD + GRPC_THREAD_STACK);
		return NULL;
	}
	return b;
}

static void stack_give(void *b)
{
	if (!b)
		return;
	if (grpc_pool.nstacks < ARRAY_SIZE(grpc_pool.stacks))
		grpc_pool.stacks[grpc_pool.nstacks++] = b;
	else
		munmap(b, GUARD + GRPC_THREAD_STACK);
}

/* Start @c's handler on a thread of its own: false when no thread could be made. */
static bool start(struct grpc_call *c)
{
	c->stack = stack_take();
	if (!c->stack ||
	    pthread_attr_setstack(&grpc_pool.attr, (uint8_t *)c->stack + GUARD, GRPC_THREAD_STACK) ||
	    pthread_create(&c->thread, &grpc_pool.attr, call_thread, c) != 0) {
		stack_give(c->stack);
		c->stack = NULL;
		return false;
	}
	grpc_pool.busy[c->m->look]++;
	if (c->m->look)
		grpc_pool.method_busy[c->m - grpc_pool.methods]++;
	return true;
}

/* The handler of @c ran: its thread is gone; the answer goes out; waiting calls may start. */
static void call_done(struct grpc_call *c)
{
	pthread_join(c->thread, NULL);
	stack_give(c->stack);
	c->stack = NULL;
	grpc_pool.busy[c->m->look]--;
	if (c->m->look)
		grpc_pool.method_busy[c->m - grpc_pool.methods]--;
	c->running = false;
	if (c->conn)
		c->conn->running--;
	grpc_finish(c);
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
	grpc_finish(c);
}

/* Start what waits, oldest first, as far as threads allow (a look method at its share waits). */
void grpc_start_waiting(void)
{
	for (int k = 0; k < 2; k++) {
		for (struct grpc_call **pp = &grpc_pool.wait_head[k]; *pp;) {
			struct grpc_call *c = *pp;

			if (!grpc_pool.draining && !can_start(c->m)) {
				if (grpc_pool.busy[k] >= (k ? GRPC_LOOKERS : GRPC_WORKERS))
					break;
				pp = &c->qnext;
				continue;
			}
			*pp = c->qnext;
			if (!*pp)
				grpc_pool.wait_tail[k] = pp;
			grpc_pool.waiting--;
			if (grpc_pool.draining)
				refuse(c, GRPC_UNAVAILABLE, "the endpoint is stopping; try again");
			else if (!start(c))
				refuse(c, GRPC_UNAVAILABLE, "cannot start a thread for the call; "
				       "try again");
		}
	}
}

/* The answers of the handlers that finished. */
void grpc_take_done(void)
{
	struct grpc_call *c;
	uint64_t n;

	(void)!read(grpc_pool.efd, &n, sizeof(n));
	pthread_mutex_lock(&grpc_pool.done_mu);
	c = grpc_pool.done;
	grpc_pool.done = NULL;
	grpc_pool.done_tail = &grpc_pool.done;
	pthread_mutex_unlock(&grpc_pool.done_mu);
	while (c) {
		struct grpc_call *next = c->qnext;

		call_done(c);
		c = next;
	}
	grpc_start_waiting();
}

/* Hand the unpacked request of @c to a thread, now or when one is free. */
void grpc_take(struct conn *k, struct grpc_call *c, const struct grpc_method *m,
		 ProtobufCMessage *req, uint32_t len)
{
	int cls = m->look;

	c->m = m;
	c->req = req;
	/* the unpacked message holds copies; the bytes' share of the bound stays until answered */
	c->held = len;
	grpc_buffered += len;
	grpc_drop_input(c);
	c->running = true;
	k->running++;
	if (grpc_pool.inline_calls) {
		m->run(c, req);
		refuse(c, GRPC_INTERNAL, "no answer"); /* frees the request; a given answer stays */
		return;
	}
	if (grpc_pool.draining) {
		refuse(c, GRPC_UNAVAILABLE, "the endpoint is stopping; try again");
		return;
	}
	/*
	 * Nothing of its kind that could run waits (grpc_take_done() starts what
	 * can as soon as a thread ends): a look call whose method is not at its
	 * share starts even when calls of a stuck method wait ahead of it.
	 */
	if (can_start(m)) {
		if (!start(c))
			refuse(c, GRPC_UNAVAILABLE, "cannot start a thread for the call; try again");
		return;
	}
	if (grpc_pool.waiting >= GRPC_MAX_WAITING) {
		refuse(c, GRPC_RESOURCE_EXHAUSTED, "too many calls wait already; try again");
		return;
	}
	c->qnext = NULL;
	*grpc_pool.wait_tail[cls] = c;
	grpc_pool.wait_tail[cls] = &c->qnext;
	grpc_pool.waiting++;
}

/* The handler threads' settings, the queues; once, before the first call. */
int grpc_pool_init(const struct grpc_method *methods, size_t n)
{
	sigset_t mask;
	int r;

	grpc_pool.methods = methods;
	grpc_pool.nmethods = n;
	grpc_pool.method_busy = calloc(n ? n : 1, sizeof(*grpc_pool.method_busy));
	if (!grpc_pool.method_busy)
		return -ENOMEM;
	for (int k = 0; k < 2; k++)
		grpc_pool.wait_tail[k] = &grpc_pool.wait_head[k];
	grpc_pool.done_tail = &grpc_pool.done;
	grpc_pool.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (grpc_pool.efd < 0)
		return -errno;
	r = pthread_attr_init(&grpc_pool.attr);
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
		r = pthread_attr_setsigmask_np(&grpc_pool.attr, &mask);
	return -r;
}

void grpc_pool_fini(void)
{
	while (grpc_pool.nstacks)
		munmap(grpc_pool.stacks[--grpc_pool.nstacks], GUARD + GRPC_THREAD_STACK);
	pthread_attr_destroy(&grpc_pool.attr);
	if (grpc_pool.efd >= 0)
		close(grpc_pool.efd);
	grpc_pool.efd = -1;
	free(grpc_pool.method_busy);
	grpc_pool.method_busy = NULL;
}

/* Calls in a handler now (waiting ones are refused once stopping). */
unsigned int grpc_pool_busy(void)
{
	return grpc_pool.busy[0] + grpc_pool.busy[1];
}

