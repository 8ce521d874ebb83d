/* SPDX-License-Identifier: Apache-2.0 */
/* The keyed work queue with per-key backoff and a worker pool: see queue.h. */
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fv/macro.h"
#include "queue.h"

#define BUCKETS 1024
#define WORKERS_MAX 64

enum state {
	IDLE,	 /* only its failure count is remembered */
	READY,	 /* on the ready list */
	DELAYED, /* on the delayed list, until @not_before */
	RUNNING, /* on a worker */
};

struct entry {
	struct entry *hnext;	       /* hash chain */
	struct entry *next, *prev;     /* the ready or delayed list it is on */
	enum state state;
	bool dirty;		       /* an event came while RUNNING */
	int kind;
	bool deleted;
	bool replaced;		       /* an event gave it a newer object while RUNNING */
	char *text;		       /* the object, as JSON text (NULL: none) */
	unsigned int failures;
	uint64_t not_before;	       /* ms, CLOCK_MONOTONIC */
	char key[];
};

struct list {
	struct entry *head, *tail;
	size_t n;
};

struct fvp_queue {
	struct fvp_queue_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	struct entry *buckets[BUCKETS];
	struct list ready, delayed;
	size_t running;
	unsigned long done, failed, retried;
	pthread_t threads[WORKERS_MAX];
	unsigned int nthreads;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

unsigned int fvp_backoff_ms(unsigned int base_ms, unsigned int max_ms, unsigned int failures)
{
	uint64_t d = base_ms;

	for (unsigned int i = 1; i < failures && d < max_ms; i++)
		d *= 2;
	return d > max_ms ? max_ms : (unsigned int)d;
}

static unsigned int hash(const char *s)
{
	unsigned int h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % BUCKETS;
}

/* The worker's own object from the entry's text (nested as deep as the API's may be). */
static json_object *parse(const char *text)
{
	json_tokener *tok = json_tokener_new_ex(128);
	/* the terminating NUL included: it ends a bare number, as json_tokener_parse() does */
	json_object *o = tok ? json_tokener_parse_ex(tok, text, (int)strlen(text) + 1) : NULL;

	json_tokener_free(tok);
	return o;
}

static struct entry *find(struct fvp_queue *q, const char *key)
{
	for (struct entry *e = q->buckets[hash(key)]; e; e = e->hnext)
		if (streq(e->key, key))
			return e;
	return NULL;
}

static void list_push(struct list *l, struct entry *e)
{
	e->next = NULL;
	e->prev = l->tail;
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
	l->n++;
}

static void list_del(struct list *l, struct entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		l->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		l->tail = e->prev;
	e->next = e->prev = NULL;
	l->n--;
}

static void forget(struct fvp_queue *q, struct entry *e)
{
	struct entry **pp = &q->buckets[hash(e->key)];

	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = e->hnext;
	free(e->text);
	free(e);
}

int fvp_queue_add(struct fvp_queue *q, const char *key, int kind, bool deleted, json_object *obj)
{
	char *copy = NULL;
	struct entry *e;

	/*
	 * json-c's reference counts are not atomic (unless built with
	 * ENABLE_THREADING): an object is never shared between threads.  The
	 * queue keeps its own copy, as JSON text (a tenth of a json-c tree's
	 * size: the queue may hold every claim in flight), and the worker that
	 * takes it parses its own.  Serialised through a wrapper, so that @obj
	 * keeps no print buffer.
	 */
	if (obj) {
		json_object *w = json_object_new_array();
		const char *t;
		size_t n;

		if (!w || json_object_array_add(w, json_object_get(obj)) < 0) {
			json_object_put(w);
			return -ENOMEM;
		}
		t = json_object_to_json_string_ext(w, JSON_C_TO_STRING_PLAIN);
		n = t ? strlen(t) : 0;
		/* "[...]": the object between the brackets */
		copy = n >= 2 ? strndup(t + 1, n - 2) : NULL;
		json_object_put(w);
		if (!copy)
			return -ENOMEM;
	}
	pthread_mutex_lock(&q->lock);
	e = find(q, key);
	if (!e) {
		size_t n = strlen(key);

		e = calloc(1, sizeof(*e) + n + 1);
		if (!e) {
			pthread_mutex_unlock(&q->lock);
			free(copy);
			return -ENOMEM;
		}
		memcpy(e->key, key, n + 1);
		e->hnext = q->buckets[hash(key)];
		q->buckets[hash(key)] = e;
	}
	free(e->text);
	e->text = copy;
	e->replaced = true;
	e->kind = kind;
	e->deleted = deleted;
	switch (e->state) {
	case DELAYED:
		list_del(&q->delayed, e);
		/* an event runs it now */
		__attribute__((fallthrough));
	case IDLE:
		e->state = READY;
		list_push(&q->ready, e);
		pthread_cond_signal(&q->cond);
		break;
	case READY:
		break;
	case RUNNING:
		e->dirty = true;
		break;
	}
	pthread_mutex_unlock(&q->lock);
	return 0;
}

/* Move what is due from the delayed list to the ready one; the next due time (or 0) */
static uint64_t promote(struct fvp_queue *q, uint64_t now)
{
	uint64_t next = 0;

	for (struct entry *e = q->delayed.head, *n; e; e = n) {
		n = e->next;
		if (e->not_before <= now) {
			list_del(&q->delayed, e);
			e->state = READY;
			list_push(&q->ready, e);
		} else if (!next || e->not_before < next) {
			next = e->not_before;
		}
	}
	return next;
}

static void *worker(void *arg)
{
	struct fvp_queue *q = arg;

	pthread_mutex_lock(&q->lock);
	while (!q->stop) {
		uint64_t now = now_ms(), next = promote(q, now);
		struct entry *e = q->ready.head;
		json_object *obj;
		char *text;
		bool deleted;
		int r, kind;

		if (!e) {
			if (next) {
				struct timespec ts;
				uint64_t at;

				/* the condition variable runs on CLOCK_MONOTONIC (see fvp_queue_new) */
				clock_gettime(CLOCK_MONOTONIC, &ts);
				at = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 +
				     (next - now);
				ts.tv_sec = (time_t)(at / 1000);
				ts.tv_nsec = (long)(at % 1000) * 1000000;
				pthread_cond_timedwait(&q->cond, &q->lock, &ts);
			} else {
				pthread_cond_wait(&q->cond, &q->lock);
			}
			continue;
		}
		list_del(&q->ready, e);
		e->state = RUNNING;
		e->dirty = false;
		q->running++;
		text = TAKE_PTR(e->text); /* the worker owns it now */
		e->replaced = false;
		kind = e->kind;
		deleted = e->deleted;
		pthread_mutex_unlock(&q->lock);

		/* e->key never changes, and e is not freed while RUNNING */
		obj = text ? parse(text) : NULL;
		r = text && !obj ? -ENOMEM : q->cfg.fn(q->cfg.userdata, e->key, kind, deleted, obj);
		json_object_put(obj);

		pthread_mutex_lock(&q->lock);
		/* a retry needs the object: back into the entry unless a newer one came */
		if (!e->replaced)
			e->text = TAKE_PTR(text);
		free(text);
		q->running--;
		if (r == 0) {
			q->done++;
			e->failures = 0;
		} else {
			q->failed++;
			if (e->failures < 64)
				e->failures++;
		}
		if (e->dirty) {
			/* a newer object came meanwhile: it runs now */
			e->dirty = false;
			e->state = READY;
			list_push(&q->ready, e);
			pthread_cond_signal(&q->cond);
		} else if (r == 0) {
			forget(q, e);
		} else {
			q->retried++;
			e->state = DELAYED;
			e->not_before = now_ms() + (r > 0 ? (uint64_t)r * 1000 :
						     fvp_backoff_ms(q->cfg.base_ms, q->cfg.max_ms,
								    e->failures));
			list_push(&q->delayed, e);
			/* a sleeping worker may now have an earlier deadline to wait for */
			pthread_cond_signal(&q->cond);
		}
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int fvp_queue_new(const struct fvp_queue_config *cfg, struct fvp_queue **ret)
{
	pthread_condattr_t ca;
	struct fvp_queue *q;
	int r = 0;

	if (!cfg->fn || !cfg->workers || cfg->workers > WORKERS_MAX || !cfg->base_ms ||
	    cfg->max_ms < cfg->base_ms)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->cfg = *cfg;
	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&ca);
	/* backoff deadlines must not move with the wall clock */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cond, &ca);
	pthread_condattr_destroy(&ca);
	for (unsigned int i = 0; i < cfg->workers; i++) {
		r = -pthread_create(&q->threads[i], NULL, worker, q);
		if (r < 0)
			break;
		q->nthreads++;
	}
	if (r < 0) {
		fvp_queue_free(q);
		return r;
	}
	*ret = q;
	return 0;
}

void fvp_queue_free(struct fvp_queue *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	for (unsigned int i = 0; i < q->nthreads; i++)
		pthread_join(q->threads[i], NULL);
	for (size_t b = 0; b < BUCKETS; b++)
		while (q->buckets[b])
			forget(q, q->buckets[b]);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

void fvp_queue_stats(struct fvp_queue *q, struct fvp_queue_stats *ret)
{
	pthread_mutex_lock(&q->lock);
	ret->ready = q->ready.n;
	ret->delayed = q->delayed.n;
	ret->running = q->running;
	ret->done = q->done;
	ret->failed = q->failed;
	ret->retried = q->retried;
	pthread_mutex_unlock(&q->lock);
}

unsigned int fvp_queue_failures(struct fvp_queue *q, const char *key)
{
	struct entry *e;
	unsigned int n;

	pthread_mutex_lock(&q->lock);
	e = find(q, key);
	n = e ? e->failures : 0;
	pthread_mutex_unlock(&q->lock);
	return n;
}
