/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The runtime around the controller's handlers (controller.c): list once,
 * then watch claims and PVs from the list's resourceVersion, and hand every
 * object to the work queue (queue.c), whose worker threads call the
 * handlers.  The shape of client-go's informer + workqueue that the
 * provisioner library is built on, in small:
 *
 * - a watch that ends (its timeoutSeconds, a dropped connection, a server
 *   restart) is started again from the last resourceVersion seen, which
 *   BOOKMARK events (allowWatchBookmarks=true) keep recent even when
 *   nothing of ours changes: no full list;
 * - a full list only when the server says that resourceVersion is gone
 *   (410 Gone / an ERROR event with code 410), and at start;
 * - the newest object of every key is kept in memory (the informer's
 *   cache), and every --resync seconds all of them are queued again, from
 *   memory (a claim whose class appeared meanwhile is provisioned then);
 *   objects a re-list no longer finds are queued as deleted;
 * - the watch thread only queues; the handlers run on --workers threads,
 *   never two for one object, each failure retried after that object's
 *   exponential backoff (queue.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flag.h"
#include "fv/macro.h"
#include "api.h"
#include "controller.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "lease.h"
#include "metrics.h"
#include "queue.h"
#include "store.h"

/* classes first: a claim's handler looks its class up in the store */
enum kind { CLASS, PV, CLAIM, KINDS };

static const struct {
	enum fvp_api_kind api;
	const char *name, *prefix;
} res[KINDS] = {
	[CLASS] = { FVP_API_CLASS, "StorageClass", "sc/" },
	[PV] = { FVP_API_PV, "PV", "pv/" },
	[CLAIM] = { FVP_API_PVC, "claim", "pvc/" },
};

/* The path of every object of @k, in all namespaces. */
static const char *collection(enum kind k, char *buf, size_t len)
{
	return fvp_api_path(buf, len, res[k].api, NULL, NULL, NULL);
}

struct runner;

/* One watch's userdata: which runner, which kind (fv_kube_watch_run() names the one that ended). */
struct watch_ud {
	struct runner *rn;
	enum kind k;
};

struct runner {
	struct fvp_prov *p;
	volatile int *stop;
	struct watch_ud ud[KINDS];
	char rv[KINDS][64];  /* resume each watch from here */
	/*
	 * key -> newest object, trimmed (fvp_ctl_trim()), of the claims and PVs a
	 * handler acts on (a json-c object is a hash table); inert ones are not
	 * kept.  Classes and PV names live in p->store (the workers read them).
	 */
	json_object *cache[KINDS];
	bool expired;	     /* a watch said 410 Gone */
};

static int mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int)ts.tv_sec;
}

static bool key_of(enum kind k, json_object *obj, char *key, size_t len)
{
	json_object *m = fv_json_get(obj, "metadata");
	const char *ns = fv_json_str(m, "namespace"), *name = fv_json_str(m, "name");

	if (!name || (k == CLAIM && !ns))
		return false;
	return (size_t)snprintf(key, len, "%s%s%s%s", res[k].prefix, k == CLAIM ? ns : "",
				k == CLAIM ? "/" : "", name) < len;
}

/* The workers' entry: one object, by kind. */
static int work(void *ud, const char *key, int kind, bool deleted, json_object *obj)
{
	struct fvp_prov *p = ud;
	int r;

	(void)key;
	if (!obj)
		return 0; /* became inert: the work queued for an older version is void */
	if (kind == PV)
		r = deleted ? fvp_ctl_pv_deleted(p, obj) : fvp_ctl_pv_changed(p, obj);
	else
		r = deleted ? fvp_ctl_claim_deleted(p, obj) : fvp_ctl_claim_changed(p, obj);
	if (r != 0)
		fvp_metrics_inc(FVP_M_RETRIES);
	return r;
}

/* The class of claim @pvc (spec, or the beta annotation), or NULL. */
static const char *claim_class(json_object *pvc)
{
	const char *c = fv_json_str_in(pvc, "spec", "storageClassName");

	return c && *c ? c : fv_json_str(fv_json_get(fv_json_get(pvc, "metadata"), "annotations"),
				      FVP_ANN_CLASS_BETA);
}

/* A class of ours came or changed: its claims waiting for it are worked on again. */
static void class_changed(struct runner *rn, const char *name)
{
	json_object_object_foreach(rn->cache[CLAIM], key, val) {
		const char *c = claim_class(val);

		if (c && streq(c, name))
			(void)fvp_queue_add(rn->p->queue, key, CLAIM, false, val);
	}
}

/* A class as the API has it now: into the store when it is one of ours. */
static void class_seen(struct runner *rn, json_object *sc, bool deleted)
{
	const char *name = fv_json_str_in(sc, "metadata", "name");
	json_object *t = NULL;

	if (!name)
		return;
	if (!deleted && fvp_ctl_backend(fv_json_str(sc, "provisioner")))
		t = fvp_ctl_trim_class(sc);
	fvp_store_class_set(rn->p->store, name, t);
	json_object_put(t);
	if (t)
		class_changed(rn, name);
}

/*
 * A claim or PV as the API has it now: trimmed, remembered and queued; an
 * inert one only voids the work an older version of it may have queued.
 */
static void seen(struct runner *rn, enum kind k, json_object *obj, bool deleted)
{
	char key[FVP_KEY_MAX];
	json_object *t = NULL;
	bool known;

	if (k == CLASS) {
		class_seen(rn, obj, deleted);
		return;
	}
	if (!key_of(k, obj, key, sizeof(key)))
		return;
	if (k == PV)
		fvp_store_pv_set(rn->p->store, fv_json_str_in(obj, "metadata", "name"), !deleted);
	if (fvp_ctl_trim(rn->p, k == PV, obj, &t) < 0) {
		fvp_log_error("%s %s: out of memory, not queued", res[k].name, key);
		return;
	}
	known = json_object_object_get_ex(rn->cache[k], key, NULL);
	if (deleted || !t)
		json_object_object_del(rn->cache[k], key);
	else
		json_object_object_add(rn->cache[k], key, json_object_get(t));
	if ((t || known) && fvp_queue_add(rn->p->queue, key, k, deleted, t) < 0)
		fvp_log_error("%s %s: out of memory, not queued", res[k].name, key);
	json_object_put(t);
}

/* One page of a list being read: its items as they arrive (fv_kube_list()). */
struct page {
	struct runner *rn;
	enum kind k;
	json_object *fresh;   /* key -> trimmed object (claims, PVs) */
	json_object *inert;   /* keys of the cache's objects that are still there, inert now */
	json_object *names;   /* PV names */
	json_object *classes; /* name -> class of ours */
};

static int list_item(void *ud, json_object *o)
{
	struct page *pg = ud;
	char key[FVP_KEY_MAX];
	const char *name = fv_json_str_in(o, "metadata", "name");
	json_object *t = NULL;

	if (!name)
		return 0;
	if (pg->k == CLASS) {
		if (!fvp_ctl_backend(fv_json_str(o, "provisioner")))
			return 0;
		t = fvp_ctl_trim_class(o);
		if (!t)
			return -ENOMEM;
		json_object_object_add(pg->classes, name, t);
		return 0;
	}
	if (pg->k == PV && json_object_object_add(pg->names, name, NULL) < 0)
		return -ENOMEM;
	if (!key_of(pg->k, o, key, sizeof(key)))
		return 0;
	if (fvp_ctl_trim(pg->rn->p, pg->k == PV, o, &t) < 0)
		return -ENOMEM;
	if (t)
		json_object_object_add(pg->fresh, key, t);
	else if (json_object_object_get_ex(pg->rn->cache[pg->k], key, NULL) &&
		 json_object_object_add(pg->inert, key, NULL) < 0)
		return -ENOMEM;
	return 0;
}

/*
 * List every object of @k in pages into a new cache; what the old cache had
 * and the list lacks was deleted while we were not watching.  The list's
 * resourceVersion is where the watch starts.  Returns 0, -ESTALE (the
 * continue token expired), <0.
 */
static int list_all(struct runner *rn, enum kind k)
{
	_cleanup_free_ char *cont = NULL;
	struct page pg = { .rn = rn, .k = k, .fresh = json_object_new_object(),
			   .inert = json_object_new_object(), .names = json_object_new_object(),
			   .classes = json_object_new_object() };
	json_object *fresh = pg.fresh, *old;
	char err[512], base[FVP_API_PATH_MAX];
	int st;

	if (!pg.fresh || !pg.inert || !pg.names || !pg.classes) {
		st = -ENOMEM;
		goto fail;
	}
	for (;;) {
		_cleanup_free_ char *path = NULL;
		json_object *list = NULL;
		const char *c;

		if (asprintf(&path, "%s?limit=500%s%s", collection(k, base, sizeof(base)),
			     cont ? "&continue=" : "", cont ? cont : "") < 0) {
			st = -ENOMEM;
			goto fail;
		}
		fvp_flag_set(&rn->p->healthy_at, mono_s()); /* a list of a big cluster is many pages */
		/* items trimmed as they arrive: a page is never held whole */
		st = fv_kube_list(rn->p->k, path, list_item, &pg, &list, err, sizeof(err));
		if (st < 0 || st != 200 || !list) {
			if (st < 0)
				fvp_log_warning("list %s: %s", base, err);
			else
				fvp_log_warning("list %s: HTTP %d %s", base, st, fv_kube_status_message(list));
			json_object_put(list);
			st = st < 0 ? st : st == 410 ? -ESTALE : -EIO;
			goto fail;
		}
		snprintf(rn->rv[k], sizeof(rn->rv[k]), "%s",
			 fv_json_str_in(list, "metadata", "resourceVersion") ?: "");
		c = fv_json_str_in(list, "metadata", "continue");
		free(cont);
		cont = c && *c ? strdup(c) : NULL;
		json_object_put(list);
		if (!cont)
			break;
		/* a continue token is base64url: safe in a query, but check */
		if (strspn(cont, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=") !=
		    strlen(cont)) {
			st = -EIO;
			goto fail;
		}
	}
	if (k == CLASS) {
		fvp_store_replace(rn->p->store, NULL, pg.classes);
		json_object_put(pg.fresh);
		json_object_put(pg.inert);
		json_object_put(pg.names);
		return 0;
	}
	json_object_put(pg.classes);
	fvp_store_replace(rn->p->store, k == PV ? pg.names : NULL, NULL);
	if (k != PV)
		json_object_put(pg.names);
	old = rn->cache[k];
	rn->cache[k] = fresh;
	/*
	 * Gone while we were not watching: queued as deleted (the informer's
	 * DeletedFinalStateUnknown).  Still there but inert now: only the work an
	 * older version may have queued is voided.
	 */
	json_object_object_foreach(old, okey, oval) {
		if (json_object_object_get_ex(pg.inert, okey, NULL))
			(void)fvp_queue_add(rn->p->queue, okey, k, false, NULL);
		else if (!json_object_object_get_ex(fresh, okey, NULL))
			(void)fvp_queue_add(rn->p->queue, okey, k, true, oval);
	}
	json_object_put(old);
	json_object_put(pg.inert);
	json_object_object_foreach(fresh, key, val)
		(void)fvp_queue_add(rn->p->queue, key, k, false, val);
	return 0;
fail:
	json_object_put(pg.fresh);
	json_object_put(pg.inert);
	json_object_put(pg.names);
	json_object_put(pg.classes);
	return st;
}

static void note_rv(struct runner *rn, enum kind k, json_object *obj)
{
	const char *rv = fv_json_str_in(obj, "metadata", "resourceVersion");

	/* opaque to clients, but it goes into a URL: only what needs no escaping */
	if (rv && *rv && strlen(rv) < sizeof(rn->rv[k]) &&
	    strspn(rv, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
		    strlen(rv))
		snprintf(rn->rv[k], sizeof(rn->rv[k]), "%s", rv);
}

static int on_event(struct runner *rn, enum kind k, const char *type, json_object *obj)
{
	if (streq(type, "ERROR")) {
		/* {"kind":"Status","code":410,"reason":"Expired",...}: the resourceVersion is gone */
		json_object *code = fv_json_get(obj, "code");

		fvp_log_warning("%s watch: %s (%d %s)", res[k].name, fv_kube_status_message(obj),
			 code ? json_object_get_int(code) : 0, fv_json_str(obj, "reason") ?: "");
		if (code && json_object_get_int(code) == 410)
			rn->expired = true;
		return -1;
	}
	note_rv(rn, k, obj);
	if (streq(type, "BOOKMARK"))
		return 0;
	seen(rn, k, obj, streq(type, "DELETED"));
	return 0;
}

static int on_watch_event(void *ud, const char *type, json_object *obj)
{
	struct watch_ud *w = ud;

	return on_event(w->rn, w->k, type, obj);
}

static int resync_at;

/* After every round of watch transfers: the heartbeat, and the periodic resync from memory. */
static int after(void *ud)
{
	struct runner *rn = ud;
	int now = mono_s();

	fvp_flag_set(&rn->p->healthy_at, now);
	if (rn->p->resync && now >= resync_at) {
		resync_at = now + (int)rn->p->resync;
		for (int k = 0; k < KINDS; k++) {
			json_object_object_foreach(rn->cache[k], key, val)
				(void)fvp_queue_add(rn->p->queue, key, k, false, val);
		}
	}
	return 0;
}

static void pause_s(struct runner *rn, unsigned int s)
{
	for (unsigned int i = 0; i < s * 10 && !fvp_flag_get(rn->stop); i++) {
		fvp_flag_set(&rn->p->healthy_at, mono_s());
		usleep(100000);
	}
}

/* p->queue as the HTTP thread's gauges see it: set and cleared by fvp_ctl_run() under it */
static pthread_mutex_t gauge_lock = PTHREAD_MUTEX_INITIALIZER;

void fvp_ctl_gauges(void *ud, struct fvp_gauges *g)
{
	struct fvp_prov *p = ud;
	struct fvp_queue_stats st;

	g->leader = !p->leader_elect || fvp_lease_held();
	pthread_mutex_lock(&gauge_lock);
	if (p->queue) {
		fvp_queue_stats(p->queue, &st);
		g->queue_depth = (double)(st.ready + st.delayed);
		g->queue_running = (double)st.running;
	}
	pthread_mutex_unlock(&gauge_lock);
}

int fvp_ctl_run(struct fvp_prov *p, volatile int *stopping)
{
	struct fvp_queue_config qc = { .workers = p->workers ? p->workers : 4,
				       .base_ms = p->retry_base_ms ? p->retry_base_ms : 15000,
				       .max_ms = p->retry_max_ms ? p->retry_max_ms : 1000000,
				       .fn = work, .userdata = p };
	struct runner rn = { .p = p, .stop = stopping };
	struct fvp_queue *q;
	unsigned int backoff = 1;
	bool listed = false, watching[KINDS] = { false };
	struct fvp_store *store = fvp_store_new();
	time_t started[KINDS] = { 0 };
	int r;

	p->ev.k = p->k;
	if (qc.max_ms < qc.base_ms)
		qc.max_ms = qc.base_ms;
	/* before the workers start: they read it */
	p->store = store;
	r = store ? fvp_queue_new(&qc, &q) : -ENOMEM;
	if (r < 0) {
		p->store = NULL;
		fvp_store_free(store);
		fvp_log_error("cannot start the workers: %s", strerror(-r));
		return r;
	}
	pthread_mutex_lock(&gauge_lock);
	p->queue = q;
	pthread_mutex_unlock(&gauge_lock);
	for (int k = 0; k < KINDS; k++) {
		rn.ud[k].rn = &rn;
		rn.ud[k].k = (enum kind)k;
		rn.cache[k] = json_object_new_object();
	}
	resync_at = mono_s() + (int)p->resync;
	while (!fvp_flag_get(stopping)) {
		char err[512], path[400], base[FVP_API_PATH_MAX];
		void *ended = NULL;
		bool quick;

		fvp_flag_set(&p->healthy_at, mono_s());
		if (!listed) {
			fv_kube_watch_clear(p->k);
			for (int k = 0; k < KINDS; k++)
				watching[k] = false;
			/*
			 * Classes, then PVs, then claims: a claim's handler looks its class
			 * and its PV up in what the first two lists stored.
			 */
			fvp_metrics_inc(FVP_M_RELISTS);
			r = 0;
			for (int k = 0; k < KINDS && r == 0; k++)
				r = list_all(&rn, (enum kind)k);
			if (r < 0) {
				fvp_log_warning("list failed (re-list failed); next try in %u s", backoff);
				pause_s(&rn, backoff);
				backoff = backoff >= 30 ? 60 : backoff * 2;
				continue;
			}
			listed = true;
			fvp_flag_set(&p->synced, 1);
		}
		r = 0;
		for (int k = 0; k < KINDS && r >= 0; k++) {
			if (watching[k])
				continue;
			snprintf(path, sizeof(path),
				 "%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s"
				 "&timeoutSeconds=%u", collection(k, base, sizeof(base)), rn.rv[k],
				 p->watch_s);
			r = fv_kube_watch_add(p->k, path, on_watch_event, &rn.ud[k], p->watch_s, NULL);
			watching[k] = r >= 0;
			started[k] = time(NULL);
		}
		if (r < 0) {
			/*
			 * Never leave half a watch set behind; a watch that cannot start
			 * from where we are (a resourceVersion the server will not take)
			 * starts again from a fresh list.
			 */
			fv_kube_watch_clear(p->k);
			for (int k = 0; k < KINDS; k++)
				watching[k] = false;
			listed = false;
			fvp_log_warning("cannot start watches: %s; next try in %u s", strerror(-r), backoff);
			pause_s(&rn, backoff);
			backoff = backoff >= 30 ? 60 : backoff * 2;
			continue;
		}
		rn.expired = false;
		err[0] = '\0';
		r = fv_kube_watch_run(p->k, stopping, after, &rn, &ended, err, sizeof(err));
		if (fvp_flag_get(stopping))
			break;
		if (ended) {
			enum kind k = ((struct watch_ud *)ended)->k;

			watching[k] = false;
			quick = time(NULL) - started[k] < 1;
		} else {
			for (int k = 0; k < KINDS; k++)
				watching[k] = false;
			quick = true;
		}
		if (rn.expired || r == -ESTALE) {
			fvp_log_info("watch expired (410 Gone): listing again");
			listed = false;
		} else {
			fvp_metrics_inc(FVP_M_WATCH_RESTARTS);
			fvp_log_info("%s watch ended (%s): resuming from resourceVersion %s",
				 ended ? res[((struct watch_ud *)ended)->k].name : "every",
				 err[0] ? err : "stopped",
				 ended ? rn.rv[((struct watch_ud *)ended)->k] : "(last seen)");
		}
		/* a server that ends watches at once must not make this a busy loop */
		if (r < 0 || quick) {
			pause_s(&rn, backoff);
			backoff = backoff >= 30 ? 60 : backoff * 2;
		} else {
			backoff = 1;
		}
	}
	fv_kube_watch_clear(p->k);
	/* the workers finish what they are on (each storage call has its deadline) */
	pthread_mutex_lock(&gauge_lock);
	p->queue = NULL;
	pthread_mutex_unlock(&gauge_lock);
	fvp_queue_free(q);
	p->store = NULL;
	fvp_store_free(store);
	for (int k = 0; k < KINDS; k++)
		json_object_put(rn.cache[k]);
	return 0;
}
