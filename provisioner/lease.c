/* SPDX-License-Identifier: Apache-2.0 */
/* Leader election on a Lease: see lease.h. */
#include <errno.h>
#include <limits.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flag.h"
#include "fv/macro.h"
#include "api.h"
#include "fv/util.h"
#include "events.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "lease.h"
#include "metrics.h"

struct fvp_lease {
	struct fv_kube *k;
	struct fvp_lease_config cfg;
	volatile int *stop;
	void (*lost)(void *ud);
	void *ud;
	pthread_t thread;
	bool thread_started;
	volatile int quit;
	/*
	 * the record as last seen (a hash of holder, renewTime, resourceVersion: a
	 * copy cut to a buffer's size would never equal a longer holder, which would
	 * then never expire), and when (our monotonic clock) it last changed
	 */
	char seen_holder[256]; /* for the log */
	uint64_t seen_sig;
	uint64_t seen_at;
	bool seen_any;
};

static volatile int held;

bool fvp_lease_held(void)
{
	return fvp_flag_get(&held);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* metav1.MicroTime: RFC 3339 with microseconds, UTC. */
/* A MicroTime, "2026-01-02T03:04:05.123456Z": 27 bytes. */
#define MICRO_TIME_MAX 40

static void micro_time(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	char s[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%06ldZ", s, ts.tv_nsec / 1000);
}

static void sleep_s(struct fvp_lease *l, unsigned int s, bool jitter)
{
	/* client-go waits retryPeriod * (1 + up to 1.2) for candidates: spread them out */
	unsigned int ms = s * 1000 + (jitter ? (unsigned int)(rand() % (int)(s * 1200 + 1)) : 0);

	for (unsigned int i = 0; i < ms / 100 && !fvp_flag_get(l->stop) && !fvp_flag_get(&l->quit); i++) {
		if (l->cfg.heartbeat)
			fvp_flag_set(l->cfg.heartbeat, (int)(mono_ms() / 1000));
		usleep(100000);
	}
}

static json_object *new_spec(struct fvp_lease *l, const char *holder, unsigned int duration,
			     const char *acquired, int transitions)
{
	json_object *spec = json_object_new_object();
	char now[MICRO_TIME_MAX];

	if (!spec)
		return NULL;
	micro_time(now, sizeof(now));
	fv_json_set_str(spec, "holderIdentity", holder);
	json_object_object_add(spec, "leaseDurationSeconds", json_object_new_int((int)duration));
	fv_json_set_str(spec, "acquireTime", acquired ? acquired : now);
	fv_json_set_str(spec, "renewTime", now);
	json_object_object_add(spec, "leaseTransitions", json_object_new_int(transitions));
	(void)l;
	return spec;
}

/* Remember @lease's record; when it differs from the last one seen, it changed now. */
static void observe(struct fvp_lease *l, json_object *lease)
{
	json_object *spec = fv_json_get(lease, "spec");
	const char *h = fv_json_str(spec, "holderIdentity") ?: "", *rt = fv_json_str(spec, "renewTime") ?: "",
		   *rv = fv_json_str_in(lease, "metadata", "resourceVersion") ?: "";

	uint64_t sig = fv_hash64(h) ^ (fv_hash64(rt) * 0x9e3779b97f4a7c15ULL) ^
		       (fv_hash64(rv) * 0xff51afd7ed558ccdULL);

	if (!l->seen_any || sig != l->seen_sig) {
		size_t n = (size_t)snprintf(l->seen_holder, sizeof(l->seen_holder), "%s", h);

		/* a long holder is cut for the log, between UTF-8 characters, never in one */
		if (n >= sizeof(l->seen_holder)) {
			n = sizeof(l->seen_holder) - 1;
			while (n > 0 && ((unsigned char)h[n] & 0xc0) == 0x80)
				n--;
			l->seen_holder[n] = '\0';
		}
		l->seen_sig = sig;
		l->seen_at = mono_ms();
		l->seen_any = true;
	}
}

/*
 * One try to take or renew the Lease (@release: give it up instead).
 * Returns 1 when this process holds it now, 0 when another does, <0 on an
 * API error.
 */
static int try_once(struct fvp_lease *l, bool release)
{
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	json_object *lease = NULL, *reply = NULL, *spec, *ls;
	const char *holder, *acquired;
	int st, dur, transitions;

	fvp_api_path(path, sizeof(path), FVP_API_LEASE, l->cfg.ns, l->cfg.name, NULL);
	st = fv_kube_request(l->k, "GET", path, NULL, &lease, err, sizeof(err));
	if (st == 404 && !release) {
		json_object_put(lease);
		lease = fv_kube_object_new("coordination.k8s.io/v1", "Lease", l->cfg.ns, l->cfg.name, NULL);
		spec = new_spec(l, l->cfg.identity, l->cfg.duration_s, NULL, 0);
		if (!lease || !spec) {
			json_object_put(lease);
			json_object_put(spec);
			return -ENOMEM;
		}
		json_object_object_add(lease, "spec", spec);
		fvp_api_path(path, sizeof(path), FVP_API_LEASE, l->cfg.ns, NULL, NULL);
		st = fv_kube_request(l->k, "POST", path, lease, &reply, err, sizeof(err));
		json_object_put(lease);
		if (st == 201 || st == 200)
			observe(l, reply);
		json_object_put(reply);
		if (st < 0)
			fvp_log_warning("lease %s/%s: %s", l->cfg.ns, l->cfg.name, err);
		return st == 201 || st == 200 ? 1 : st == 409 ? 0 : st < 0 ? st : -EIO;
	}
	if (st != 200 || !lease) {
		if (st < 0)
			fvp_log_warning("lease %s/%s: %s", l->cfg.ns, l->cfg.name, err);
		else if (st != 404)
			fvp_log_warning("lease %s/%s: HTTP %d %s", l->cfg.ns, l->cfg.name, st,
				 fv_kube_status_message(lease));
		json_object_put(lease);
		return st == 404 ? 0 : st < 0 ? st : -EIO;
	}
	observe(l, lease);
	spec = fv_json_get(lease, "spec");
	holder = fv_json_str(spec, "holderIdentity") ?: "";
	dur = fv_json_get(spec, "leaseDurationSeconds") ?
		      json_object_get_int(fv_json_get(spec, "leaseDurationSeconds")) :
		      (int)l->cfg.duration_s;
	if (release) {
		if (!streq(holder, l->cfg.identity)) {
			json_object_put(lease);
			return 0;
		}
	} else if (*holder && !streq(holder, l->cfg.identity) &&
		   l->seen_at + (uint64_t)(dur > 0 ? dur : 1) * 1000 > mono_ms()) {
		json_object_put(lease);
		return 0; /* held, and renewed within its duration as far as we have seen */
	}
	transitions = fv_json_get(spec, "leaseTransitions") ?
			      json_object_get_int(fv_json_get(spec, "leaseTransitions")) :
			      0;
	acquired = streq(holder, l->cfg.identity) ? fv_json_str(spec, "acquireTime") : NULL;
	/* an int32 the API checks is not negative: it stays at its maximum, never wraps */
	if (!release && !streq(holder, l->cfg.identity) && transitions >= 0 && transitions < INT_MAX)
		transitions++;
	else if (transitions < 0)
		transitions = 0;
	ls = release ? new_spec(l, "", 1, acquired, transitions) :
		       new_spec(l, l->cfg.identity, l->cfg.duration_s, acquired, transitions);
	if (!ls) {
		json_object_put(lease);
		return -ENOMEM;
	}
	/* the whole object back, with the resourceVersion read: a concurrent writer makes it 409 */
	json_object_object_add(lease, "spec", ls);
	st = fv_kube_request(l->k, "PUT", path, lease, &reply, err, sizeof(err));
	json_object_put(lease);
	if (st == 200)
		observe(l, reply);
	else if (st < 0)
		fvp_log_warning("lease %s/%s: update: %s", l->cfg.ns, l->cfg.name, err);
	else if (st != 409)
		fvp_log_warning("lease %s/%s: update: HTTP %d %s", l->cfg.ns, l->cfg.name, st,
			 fv_kube_status_message(reply));
	json_object_put(reply);
	if (release)
		return st == 200 ? 0 : st < 0 ? st : -EIO;
	return st == 200 ? 1 : st == 409 ? 0 : st < 0 ? st : -EIO;
}

static void *renewer(void *arg)
{
	struct fvp_lease *l = arg;
	uint64_t last_ok = mono_ms();

	while (!fvp_flag_get(l->stop) && !fvp_flag_get(&l->quit)) {
		int r;

		sleep_s(l, l->cfg.retry_s, false);
		if (fvp_flag_get(l->stop) || fvp_flag_get(&l->quit))
			break;
		r = try_once(l, false);
		if (r == 1) {
			last_ok = mono_ms();
			continue;
		}
		if (r == 0 || mono_ms() - last_ok >= (uint64_t)l->cfg.renew_deadline_s * 1000) {
			fvp_flag_set(&held, 0);
			fvp_log_warning("lease %s/%s: %s: no longer the leader", l->cfg.ns, l->cfg.name,
				 r == 0 ? "another holder has it" : "not renewed within the deadline");
			l->lost(l->ud);
			break;
		}
	}
	return NULL;
}

int fvp_lease_acquire(struct fv_kube *k, const struct fvp_lease_config *cfg, volatile int *stop,
		      void (*lost)(void *ud), void *ud, struct fvp_lease **ret)
{
	struct fvp_lease *l = calloc(1, sizeof(*l));
	bool said = false;
	int r;

	if (!l)
		return -ENOMEM;
	l->k = k;
	l->cfg = *cfg;
	l->stop = stop;
	l->lost = lost;
	l->ud = ud;
	srand((unsigned int)(mono_ms() ^ (uint64_t)getpid()));
	while (!fvp_flag_get(stop)) {
		if (cfg->heartbeat)
			fvp_flag_set(cfg->heartbeat, (int)(mono_ms() / 1000));
		r = try_once(l, false);
		if (r == 1)
			break;
		if (r == 0 && !said) {
			fvp_log_info("lease %s/%s is held by %s: standing by", cfg->ns, cfg->name,
				 l->seen_holder[0] ? l->seen_holder : "another replica");
			said = true;
		}
		sleep_s(l, cfg->retry_s, true);
	}
	if (fvp_flag_get(stop)) {
		free(l);
		return -ECANCELED;
	}
	fvp_flag_set(&held, 1);
	fvp_metrics_inc(FVP_M_LEADER_TRANSITIONS);
	fvp_log_info("lease %s/%s acquired: leading as %s", cfg->ns, cfg->name, cfg->identity);
	r = -pthread_create(&l->thread, NULL, renewer, l);
	if (r < 0) {
		fvp_flag_set(&held, 0);
		free(l);
		return r;
	}
	l->thread_started = true;
	*ret = l;
	return 0;
}

void fvp_lease_release(struct fvp_lease *l)
{
	if (!l)
		return;
	fvp_flag_set(&l->quit, 1);
	if (l->thread_started)
		pthread_join(l->thread, NULL);
	if (fvp_flag_get(&held) && try_once(l, true) == 0)
		fvp_log_info("lease %s/%s released", l->cfg.ns, l->cfg.name);
	fvp_flag_set(&held, 0);
	free(l);
}
