/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What csi/grpc.c (the wire: HTTP/2, frames, connections, the loop) and
 * csi/grpc-calls.c (a call's way from its unpacked request to its answer:
 * the handler threads, the log) share; see grpc.h and grpc.c's comment.
 * Everything here is the loop thread's but what grpc-calls.c says otherwise.
 */
#ifndef FV_CSI_GRPC_INT_H
#define FV_CSI_GRPC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "grpc.h"

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
	void *stack;		 /* its thread's stack (grpc-calls.c), until joined */
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

/*
 * The handler threads.  Two classes, each with its own threads and its own
 * queue of calls waiting for one: [0] calls that change something, [1]
 * calls that only look.  The loop's but done, done_tail (under done_mu); grpc-calls.c.
 */
struct grpc_pool {
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
	void *stacks[GRPC_WORKERS + GRPC_LOOKERS]; /* handler stacks no thread runs on */
	unsigned int nstacks;
	pthread_mutex_t done_mu;
	struct grpc_call *done, **done_tail;
};

extern struct grpc_pool grpc_pool;
/* Request bytes of all calls together (GRPC_MAX_BUFFERED), until answered: the loop's. */
extern size_t grpc_buffered;
/* Where the endpoint's log goes: stderr; the fuzz targets' /dev/null. */
extern int grpc_log_fd;

/* grpc.c */
/* Free what @c buffered of its request. */
void grpc_drop_input(struct grpc_call *c);
/* Submit the answer of @c: its message and trailers, or trailers-only with the error. */
void grpc_submit_answer(struct conn *k, struct grpc_call *c);

/* grpc-calls.c */
/* The endpoint's log: one line, "flexvol-csi: " and the text (escaped by the caller). */
void grpc_logf(const char *fmt, ...) _printf_(1, 2);
/* Free a call whose stream is closed. */
void grpc_call_free(struct grpc_call *c);
/* Log @c's answer (not a look call's success) and submit it, unless its stream is gone. */
void grpc_finish(struct grpc_call *c);
/* Hand the unpacked request of @c (@len bytes packed) to a thread, now or when one is free. */
void grpc_take(struct conn *k, struct grpc_call *c, const struct grpc_method *m,
	       ProtobufCMessage *req, uint32_t len);
/* The answers of the handlers that finished (the eventfd said so): submitted. */
void grpc_take_done(void);
/* Start what waits, as far as threads allow; refuse it all once draining. */
void grpc_start_waiting(void);
/* The handler threads' settings and queues: once, before the first call.  0 or -errno. */
int grpc_pool_init(const struct grpc_method *methods, size_t n);
void grpc_pool_fini(void);
/* Calls in a handler now. */
unsigned int grpc_pool_busy(void);

#endif
