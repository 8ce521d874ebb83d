/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus metrics: see metrics.h. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "fv/version.h"
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

/* the longest label value kept: a StorageClass name (a DNS subdomain) */
#define LABEL_MAX 254
/* room for every backend's "_other" beside the classes */
#define SERIES_MAX (FVP_METRICS_CLASSES + 16)

/* the attempts of one operation for one (backend, class) */
struct series {
	char backend[64];
	char cls[LABEL_MAX];
	unsigned long n[2]; /* [ok] */
	struct hist h;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct series ops[FVP_M_OPS][SERIES_MAX];
static size_t nops[FVP_M_OPS];
static unsigned long counters[FVP_M_COUNTERS];
static void (*gauges_fn)(void *, struct fvp_gauges *);
static void *gauges_ud;
static bool agent;
static unsigned long passes[2]; /* [ok] */
static time_t last_pass_ok;

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
	[FVP_M_EVENTS_DROPPED] = { "events_dropped_total",
				   "events not posted: the event queue was full, or still held "
				   "some at the stop" },
};

/* The series of (@backend, @cls) for @op, made when new; under the lock. */
static struct series *series_of(enum fvp_metric_op op, const char *backend, const char *cls)
{
	struct series *t = ops[op];
	size_t i;

	for (i = 0; i < nops[op]; i++)
		if (!strncmp(t[i].backend, backend, sizeof(t[i].backend) - 1) &&
		    !strncmp(t[i].cls, cls, sizeof(t[i].cls) - 1))
			return &t[i];
	/* past the bound: the backend's "_other" (every backend finds room for one) */
	if (nops[op] >= FVP_METRICS_CLASSES && strcmp(cls, FVP_METRICS_OTHER))
		return series_of(op, backend, FVP_METRICS_OTHER);
	if (nops[op] >= SERIES_MAX)
		return NULL;
	snprintf(t[i].backend, sizeof(t[i].backend), "%s", backend);
	snprintf(t[i].cls, sizeof(t[i].cls), "%s", cls);
	nops[op]++;
	return &t[i];
}

void fvp_metrics_observe(enum fvp_metric_op op, const char *backend, const char *cls, bool ok,
			 double seconds)
{
	struct series *se;

	if (op >= FVP_M_OPS)
		return;
	pthread_mutex_lock(&lock);
	se = series_of(op, backend ? backend : "", cls ? cls : "");
	if (se) {
		se->n[ok]++;
		for (size_t i = 0; i < ARRAY_SIZE(buckets); i++)
			if (seconds <= buckets[i]) {
				se->h.count[i]++;
				break;
			}
		se->h.total++;
		se->h.sum += seconds;
	}
	pthread_mutex_unlock(&lock);
}

void fvp_metrics_set_agent(bool on)
{
	pthread_mutex_lock(&lock);
	agent = on;
	pthread_mutex_unlock(&lock);
}

void fvp_metrics_agent_pass(bool ok)
{
	pthread_mutex_lock(&lock);
	passes[ok]++;
	if (ok)
		last_pass_ok = time(NULL);
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
	memset(nops, 0, sizeof(nops));
	memset(counters, 0, sizeof(counters));
	memset(passes, 0, sizeof(passes));
	last_pass_ok = 0;
	pthread_mutex_unlock(&lock);
}

#define P "flexvol_provisioner_"

/* @s as a label value: \\, \" and \n escaped (the exposition format's rule) */
static void label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void labels(FILE *f, const struct series *se)
{
	fputs("backend=\"", f);
	label_value(f, se->backend);
	fputs("\",class=\"", f);
	label_value(f, se->cls);
	fputc('"', f);
}

static void render_ops(FILE *f, struct series (*o)[SERIES_MAX], const size_t *n)
{
	for (int op = 0; op < FVP_M_OPS; op++) {
		const char *name = op_names[op].name;

		fprintf(f, "# HELP " P "%s_total %s, by backend, class and result.\n", name,
			op_names[op].help);
		fprintf(f, "# TYPE " P "%s_total counter\n", name);
		for (size_t s = 0; s < n[op]; s++)
			for (int ok = 1; ok >= 0; ok--) {
				fprintf(f, P "%s_total{", name);
				labels(f, &o[op][s]);
				fprintf(f, ",result=\"%s\"} %lu\n", ok ? "success" : "failure",
					o[op][s].n[ok]);
			}
		fprintf(f, "# HELP " P "%s_duration_seconds Time per %s attempt.\n", name, name);
		fprintf(f, "# TYPE " P "%s_duration_seconds histogram\n", name);
		for (size_t s = 0; s < n[op]; s++) {
			const struct hist *h = &o[op][s].h;
			unsigned long cum = 0;

			for (size_t i = 0; i < ARRAY_SIZE(buckets); i++) {
				cum += h->count[i];
				fprintf(f, P "%s_duration_seconds_bucket{", name);
				labels(f, &o[op][s]);
				fprintf(f, ",le=\"%g\"} %lu\n", buckets[i], cum);
			}
			fprintf(f, P "%s_duration_seconds_bucket{", name);
			labels(f, &o[op][s]);
			fprintf(f, ",le=\"+Inf\"} %lu\n", h->total);
			fprintf(f, P "%s_duration_seconds_sum{", name);
			labels(f, &o[op][s]);
			fprintf(f, "} %.6f\n", h->sum);
			fprintf(f, P "%s_duration_seconds_count{", name);
			labels(f, &o[op][s]);
			fprintf(f, "} %lu\n", h->total);
		}
	}
}

/* the build: one series, value 1, as Kubernetes' components and Prometheus' own have */
static void render_build_info(FILE *f)
{
#if defined(__x86_64__)
	const char *arch = "amd64";
#elif defined(__aarch64__)
	const char *arch = "arm64";
#else
	const char *arch = "other";
#endif
#if defined(__clang__)
	const char *cc = "clang " __clang_version__;
#elif defined(__GNUC__)
	const char *cc = "gcc " __VERSION__;
#else
	const char *cc = "unknown";
#endif

	fprintf(f, "# HELP " P "build_info The build: version, compiler and architecture.\n");
	fprintf(f, "# TYPE " P "build_info gauge\n" P "build_info{version=\"");
	label_value(f, fv_version);
	fputs("\",compiler=\"", f);
	label_value(f, cc);
	fprintf(f, "\",arch=\"%s\"} 1\n", arch);
}

static void gauge(FILE *f, const char *name, const char *help, double v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %.15g\n", name, help, name, name, v);
}

/*
 * Prometheus' process collector, by its names: CPU (getrusage: both
 * threads and children waited for are not the process's own, so
 * RUSAGE_SELF), the descriptor limit, and from /proc when it is mounted
 * (not in an empty chroot) open descriptors, memory and start time.
 */
static void render_process(FILE *f)
{
	struct rusage ru;
	struct rlimit rl;
	char line[1024], *p;
	long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	unsigned long long start = 0, vsize = 0, btime = 0;
	long long rss = 0;
	FILE *st;
	DIR *d;

	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
			     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;

		fprintf(f, "# HELP process_cpu_seconds_total Total user and system CPU time spent "
			   "in seconds.\n# TYPE process_cpu_seconds_total counter\n"
			   "process_cpu_seconds_total %.6f\n", cpu);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		gauge(f, "process_max_fds", "Maximum number of open file descriptors.",
		      (double)rl.rlim_cur);
	d = opendir("/proc/self/fd");
	if (d) {
		long n = 0;
		struct dirent *e;

		while ((e = readdir(d)))
			if (e->d_name[0] != '.')
				n++;
		closedir(d);
		/* less the one reading the directory */
		gauge(f, "process_open_fds", "Number of open file descriptors.", (double)(n - 1));
	}
	st = fopen("/proc/self/stat", "re");
	if (st) {
		/* after the command name's closing parenthesis: field 3 on */
		if (fgets(line, sizeof(line), st) && (p = strrchr(line, ')')) &&
		    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
				  "%*d %*d %*d %llu %llu %lld", &start, &vsize, &rss) == 3) {
			gauge(f, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
			      (double)vsize);
			gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.",
			      (double)rss * (double)page);
		}
		fclose(st);
	}
	st = start && tck > 0 ? fopen("/proc/stat", "re") : NULL;
	if (st) {
		while (fgets(line, sizeof(line), st))
			if (sscanf(line, "btime %llu", &btime) == 1)
				break;
		fclose(st);
		if (btime)
			gauge(f, "process_start_time_seconds",
			      "Start time of the process since unix epoch in seconds.",
			      (double)btime + (double)start / (double)tck);
	}
}

char *fvp_metrics_render(void)
{
	struct fvp_gauges g = { 0 };
	void (*fn)(void *, struct fvp_gauges *);
	unsigned long c[FVP_M_COUNTERS], pa[2];
	struct series (*o)[SERIES_MAX] = NULL;
	size_t n[FVP_M_OPS];
	time_t last;
	char *out = NULL;
	size_t len = 0;
	bool ag;
	void *ud;
	FILE *f;

	/* a copy, so that the workers never wait for a scrape's writing */
	o = malloc(sizeof(ops));
	if (!o)
		return NULL;
	pthread_mutex_lock(&lock);
	memcpy(o, ops, sizeof(ops));
	memcpy(n, nops, sizeof(n));
	memcpy(c, counters, sizeof(c));
	memcpy(pa, passes, sizeof(pa));
	last = last_pass_ok;
	ag = agent;
	fn = gauges_fn;
	ud = gauges_ud;
	pthread_mutex_unlock(&lock);
	/* outside the lock: the callback takes the queue's */
	if (fn)
		fn(ud, &g);

	f = open_memstream(&out, &len);
	if (!f) {
		free(o);
		return NULL;
	}
	render_build_info(f);
	render_process(f);
	if (ag) {
		fprintf(f, "# HELP " P "agent_passes_total Node agent passes (images, reclaims, "
			   "the space report), by result.\n");
		fprintf(f, "# TYPE " P "agent_passes_total counter\n");
		fprintf(f, P "agent_passes_total{result=\"success\"} %lu\n", pa[1]);
		fprintf(f, P "agent_passes_total{result=\"failure\"} %lu\n", pa[0]);
		gauge(f, P "agent_last_success_timestamp_seconds",
		      "When the last pass without a failure ended, seconds since the epoch (0: none yet).",
		      (double)last);
		goto done;
	}
	render_ops(f, o, n);
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
done:
	free(o);
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}
