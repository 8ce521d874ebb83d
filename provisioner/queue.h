/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The work queue between the watches and the workers, with the semantics of
 * client-go's rate-limited workqueue that sig-storage-lib-external-provisioner
 * runs its claim and volume controllers on:
 *
 * - keyed: one entry per object ("pvc/<ns>/<name>", "pv/<name>"); an event
 *   for a key already waiting only replaces the object it will be handed
 *   (the newest wins), so a burst of updates is one piece of work;
 * - never the same key on two workers: an event for a key being worked on
 *   marks it dirty, and it runs again (with the newest object) when the
 *   worker is done;
 * - per-key exponential backoff: a failure waits base * 2^(failures-1),
 *   capped (the library: 15 s .. 1000 s), or the seconds the handler asks
 *   for (an API server's Retry-After); a success forgets the failures; an
 *   event for a key waiting out its backoff runs it at once (as an informer
 *   event does), the failure count is kept;
 * - a fixed pool of worker threads.
 *
 * Not client-go's overall token-bucket limiter (10 qps): the API server's
 * 429 + Retry-After (kube.c) is what protects it here.
 */
#ifndef FVP_QUEUE_H
#define FVP_QUEUE_H

#include <stdbool.h>
#include <stddef.h>

struct json_object;
struct fvp_queue;

#define FVP_KEY_MAX 600

/*
 * The work: @kind and @deleted as given to fvp_queue_add(), @obj the newest
 * object for @key (the queue's copy: this thread's alone while the call runs).
 * Returns 0 (done: the key's failures are forgotten), > 0 (retry after that
 * many seconds, counted as a failure), < 0 (failed: retry after the backoff).
 */
typedef int (*fvp_work_fn)(void *userdata, const char *key, int kind, bool deleted,
			   struct json_object *obj);

struct fvp_queue_config {
	unsigned int workers;	   /* threads, 1..64 */
	unsigned int base_ms;	   /* first backoff */
	unsigned int max_ms;	   /* backoff cap */
	fvp_work_fn fn;
	void *userdata;
};

/* Returns 0 with *ret and the workers running, or -errno. */
int fvp_queue_new(const struct fvp_queue_config *cfg, struct fvp_queue **ret);

/*
 * Stop: workers finish the item they are on (every filesystem operation has
 * its own deadline) and are joined; what is still queued is dropped.
 */
void fvp_queue_free(struct fvp_queue *q);

/* Queue @key with a copy of @obj (never shared with the caller's thread).  Returns 0 or -ENOMEM. */
int fvp_queue_add(struct fvp_queue *q, const char *key, int kind, bool deleted,
		  struct json_object *obj);

struct fvp_queue_stats {
	size_t ready;	  /* waiting for a worker */
	size_t delayed;	  /* waiting out a backoff */
	size_t running;	  /* on a worker now */
	unsigned long done, failed, retried;
};

void fvp_queue_stats(struct fvp_queue *q, struct fvp_queue_stats *ret);

/* The failures counted for @key (0 when it has none or is unknown): tests. */
unsigned int fvp_queue_failures(struct fvp_queue *q, const char *key);

/* The backoff after @failures failures (>= 1), in ms: base * 2^(failures-1), capped. */
unsigned int fvp_backoff_ms(unsigned int base_ms, unsigned int max_ms, unsigned int failures);

#endif
