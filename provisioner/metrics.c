/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus metrics: see metrics.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fv/macro.h"
#include "metrics.h"

/*
 * Buckets for whole operations: API round trips (ms) up to a tree delete
 * that runs until its deadline (minutes).
 */
static const double buckets[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };

struct hist {
	unsigned long count[ARRAY_SIZE(buckets)]; /* not cumulative: summed when rendered */
	unsigned long total;
	double sum;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long ops[FVP_M_OPS][2]; /* [op][ok] */
static struct hist hists[FVP_M_OPS];
static unsigned long counters[FVP_M_COUNTERS];
static void (*gauges_fn)(void *, struct fvp_gauges *);
static void *gauges_ud;

static const struct {
	const char *name, *help;
} op_names[FVP_M_OPS] = {
	[FVP_M_PROVISION] = { "provision", "claims provisioned (a directory and a PV made, or refused)" },
	[FVP_M_DELETE] = { "delete", "released volumes reclaimed (onDelete done, PV deleted)" },
};

static const struct {
	const char *name, *help;
} counter_names[FVP_M_COUNTERS] = {
	[FVP_M_FS_TIMEOUTS] = { "fs_operation_timeouts_total",
				"filesystem operations killed at their deadline" },
	[FVP_M_RETRIES] = { "retries_total", "work items put back to wait out a backoff" },
	[FVP_M_RELISTS] = { "relists_total", "full lists of claims and volumes (start, 410 Gone)" },
	[FVP_M_WATCH_RESTARTS] = { "watch_restarts_total",
				   "watches started again from their resourceVersion" },
	[FVP_M_LEADER_TRANSITIONS] = { "leader_transitions_total",
				       "times this replica became the leader" },
};

void fvp_metrics_observe(enum fvp_metric_op op, bool ok, double seconds)
{
	if (op >= FVP_M_OPS)
		return;
	pthread_mutex_lock(&lock);
	ops[op][ok]++;
	for (size_t i = 0; i < ARRAY_SIZE(buckets); i++)
		if (seconds <= buckets[i]) {
			hists[op].count[i]++;
			break;
		}
	hists[op].total++;
	hists[op].sum += seconds;
	pthread_mutex_unlock(&lock);
}

void fvp_metrics_inc(enum fvp_metric_counter c)
{
	if (c >= FVP_M_COUNTERS)
		return;
	pthread_mutex_lock(&lock);
	counters[c]++;
	pthread_mutex_unlock(&lock);
}

void fvp_metrics_set_gauges(void (*fn)(void *userdata, struct fvp_gauges *ret), void *userdata)
{
	pthread_mutex_lock(&lock);
	gauges_fn = fn;
	gauges_ud = userdata;
	pthread_mutex_unlock(&lock);
}

void fvp_metrics_reset(void)
{
	pthread_mutex_lock(&lock);
	memset(ops, 0, sizeof(ops));
	memset(hists, 0, sizeof(hists));
	memset(counters, 0, sizeof(counters));
	pthread_mutex_unlock(&lock);
}

#define P "flexvol_provisioner_"

char *fvp_metrics_render(void)
{
	struct fvp_gauges g = { 0 };
	void (*fn)(void *, struct fvp_gauges *);
	unsigned long o[FVP_M_OPS][2], c[FVP_M_COUNTERS];
	struct hist h[FVP_M_OPS];
	char *out = NULL;
	size_t len = 0;
	void *ud;
	FILE *f;

	pthread_mutex_lock(&lock);
	memcpy(o, ops, sizeof(o));
	memcpy(h, hists, sizeof(h));
	memcpy(c, counters, sizeof(c));
	fn = gauges_fn;
	ud = gauges_ud;
	pthread_mutex_unlock(&lock);
	/* outside the lock: the callback takes the queue's */
	if (fn)
		fn(ud, &g);

	f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	for (int op = 0; op < FVP_M_OPS; op++) {
		const char *n = op_names[op].name;
		unsigned long cum = 0;

		fprintf(f, "# HELP " P "%s_total %s, by result.\n", n, op_names[op].help);
		fprintf(f, "# TYPE " P "%s_total counter\n", n);
		fprintf(f, P "%s_total{result=\"success\"} %lu\n", n, o[op][1]);
		fprintf(f, P "%s_total{result=\"failure\"} %lu\n", n, o[op][0]);
		fprintf(f, "# HELP " P "%s_duration_seconds Time per %s attempt.\n", n, n);
		fprintf(f, "# TYPE " P "%s_duration_seconds histogram\n", n);
		for (size_t i = 0; i < ARRAY_SIZE(buckets); i++) {
			cum += h[op].count[i];
			fprintf(f, P "%s_duration_seconds_bucket{le=\"%g\"} %lu\n", n, buckets[i], cum);
		}
		fprintf(f, P "%s_duration_seconds_bucket{le=\"+Inf\"} %lu\n", n, h[op].total);
		fprintf(f, P "%s_duration_seconds_sum %.6f\n", n, h[op].sum);
		fprintf(f, P "%s_duration_seconds_count %lu\n", n, h[op].total);
	}
	for (int i = 0; i < FVP_M_COUNTERS; i++) {
		fprintf(f, "# HELP " P "%s %s.\n", counter_names[i].name, counter_names[i].help);
		fprintf(f, "# TYPE " P "%s counter\n", counter_names[i].name);
		fprintf(f, P "%s %lu\n", counter_names[i].name, c[i]);
	}
	fprintf(f, "# HELP " P "queue_depth Work items waiting: for a worker or out a backoff.\n");
	fprintf(f, "# TYPE " P "queue_depth gauge\n" P "queue_depth %g\n", g.queue_depth);
	fprintf(f, "# HELP " P "queue_running Work items on a worker now.\n");
	fprintf(f, "# TYPE " P "queue_running gauge\n" P "queue_running %g\n", g.queue_running);
	fprintf(f, "# HELP " P "leader 1 while this replica holds the leader lease.\n");
	fprintf(f, "# TYPE " P "leader gauge\n" P "leader %g\n", g.leader);
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}
