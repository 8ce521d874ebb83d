/* SPDX-License-Identifier: Apache-2.0 */
/* Log lines and API Events: see events.h. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "events.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "metrics.h"

/* An event's message, cut at 1 kB: the length events.k8s.io/v1 allows a note. */
#define EVENT_MSG_MAX 1024
/* An event's name, "<object name cut to 200 bytes>.<nanoseconds in hex>". */
#define EVENT_NAME_MAX 300
/* One log line: a message and its subject (an event's, or a request's error). */
#define LOG_LINE_MAX 2048
/* klog's header, with a source file name of up to 64 bytes */
#define LOG_HEAD_MAX 128

/* klog's header: "Lmmdd hh:mm:ss.uuuuuu PID(7) file:line] " (events.h) */
static int header(char *buf, size_t len, enum fvp_severity sev, const char *file, int line)
{
	const char *base = strrchr(file, '/');
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	return snprintf(buf, len, "%c%02d%02d %02d:%02d:%02d.%06ld %7d %s:%d] ", (char)sev,
			tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			ts.tv_nsec / 1000, (int)getpid(), base ? base + 1 : file, line);
}

/* one entry, one line: control characters (a newline in an API error) become spaces */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = ' ';
}

void fvp_log_at(enum fvp_severity sev, const char *file, int line, const char *fmt, ...)
{
	char head[LOG_HEAD_MAX], text[LOG_LINE_MAX];
	va_list ap;

	header(head, sizeof(head), sev, file, line);
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	one_line(text);
	/* one call, one line: stdio locks the stream, so threads never interleave inside it */
	fprintf(stderr, "%s%s\n", head, text);
}

/* @s quoted as klog quotes a string value: "...", with \" \\ \n \t and \xNN escaped */
static void quote(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void fvp_logs_at(enum fvp_severity sev, const char *file, int line, const char *msg,
		 const char *const *kv, size_t n)
{
	char head[LOG_HEAD_MAX], *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f) {
		fvp_log_at(sev, file, line, "%s (out of memory)", msg);
		return;
	}
	quote(f, msg);
	for (size_t i = 0; i + 1 < n; i += 2) {
		if (!kv[i + 1])
			continue;
		fprintf(f, " %s=", kv[i]);
		quote(f, kv[i + 1]);
	}
	if (fclose(f) != 0 || !text) {
		free(text);
		fvp_log_at(sev, file, line, "%s (out of memory)", msg);
		return;
	}
	header(head, sizeof(head), sev, file, line);
	fprintf(stderr, "%s%s\n", head, text);
	free(text);
}

static unsigned long hash_str(const char *a, const char *b)
{
	unsigned long h = 5381;

	for (; *a; a++)
		h = h * 33 + (unsigned char)*a;
	for (; *b; b++)
		h = h * 33 + (unsigned char)*b;
	return h;
}

/* the cache below is shared by the worker threads */
static pthread_mutex_t sent_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Was this event (@reason, @msg) for this object sent within
 * FVP_EVENT_REPEAT_S?  Records it otherwise.  One entry per object and
 * reason: a new message for the same reason replaces the last one, and
 * events of two reasons (Provisioning, then ProvisioningFailed at every
 * retry) do not push each other out.
 */
static bool event_repeated(struct fvp_events *ev, const char *uid, const char *reason,
			   const char *msg)
{
	unsigned long r = hash_str(reason, ""), h = hash_str(reason, msg);
	time_t now = time(NULL);
	size_t slot = 0;
	bool repeated = false;

	pthread_mutex_lock(&sent_lock);
	for (size_t i = 0; i < FVP_EVENT_CACHE; i++) {
		if (ev->sent[i].reason == r && streq(ev->sent[i].key, uid)) {
			if (ev->sent[i].hash == h && now - ev->sent[i].when < FVP_EVENT_REPEAT_S)
				repeated = true;
			slot = i;
			break;
		}
		if (ev->sent[i].when < ev->sent[slot].when)
			slot = i;
	}
	if (!repeated) {
		snprintf(ev->sent[slot].key, sizeof(ev->sent[slot].key), "%s", uid);
		ev->sent[slot].reason = r;
		ev->sent[slot].hash = h;
		ev->sent[slot].when = now;
	}
	pthread_mutex_unlock(&sent_lock);
	return repeated;
}

/* --- the sender ------------------------------------------------------------------------- */

/* One event to post: its path, its body (JSON text), and what the log says of it. */
struct event_item {
	struct event_item *next;
	const char *path, *body, *reason, *ns, *name;
	char data[]; /* the five strings */
};

struct fvp_event_sender {
	struct fv_kube *k;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct event_item *head, **tail; /* FIFO: an object's events are posted in their order */
	size_t n;
	unsigned long dropped;
	bool stop;
	struct timespec stop_at; /* CLOCK_MONOTONIC */
	pthread_t thread;
};

static struct event_item *item_new(const char *path, const char *body, const char *reason,
				   const char *ns, const char *name)
{
	const char *src[5] = { path, body, reason, ns, name };
	size_t len[5], total = 0;
	struct event_item *it;
	char *d;

	for (size_t i = 0; i < 5; i++) {
		if (!src[i])
			return NULL;
		len[i] = strlen(src[i]) + 1;
		total += len[i];
	}
	it = malloc(sizeof(*it) + total);
	if (!it)
		return NULL;
	it->next = NULL;
	d = it->data;
	for (size_t i = 0; i < 5; i++) {
		memcpy(d, src[i], len[i]);
		src[i] = d;
		d += len[i];
	}
	it->path = src[0];
	it->body = src[1];
	it->reason = src[2];
	it->ns = src[3];
	it->name = src[4];
	return it;
}

/* POST @it; a refusal or a failure is a warning line (from here: the event's own line said what) */
static void post(struct fv_kube *k, const struct event_item *it)
{
	char err[FV_KUBE_ERR_MAX];
	json_object *reply = NULL;
	int st = fv_kube_request_text(k, "POST", it->path, it->body, &reply, err, sizeof(err));

	if (st < 0)
		fvp_log_warning("event %s for %s/%s not sent: %s", it->reason, it->ns, it->name, err);
	else if (st != 201 && st != 200)
		fvp_log_warning("event %s for %s/%s not sent: HTTP %d %s", it->reason, it->ns, it->name,
				st, fv_kube_status_message(reply));
	json_object_put(reply);
}

/* a drop is a warning line the first time and every 100th after: a flood of them is one */
static void dropped(struct fvp_event_sender *tx, const struct event_item *it, const char *why)
{
	unsigned long n;

	fvp_metrics_inc(FVP_M_EVENTS_DROPPED);
	pthread_mutex_lock(&tx->lock);
	n = ++tx->dropped;
	pthread_mutex_unlock(&tx->lock);
	if (n == 1 || n % 100 == 0)
		fvp_log_warning("event %s for %s/%s dropped: %s (%lu dropped so far)", it->reason,
				it->ns, it->name, why, n);
}

static void enqueue(struct fvp_event_sender *tx, struct event_item *it)
{
	bool full;

	pthread_mutex_lock(&tx->lock);
	full = tx->stop || tx->n >= FVP_EVENT_QUEUE_MAX;
	if (!full) {
		*tx->tail = it;
		tx->tail = &it->next;
		tx->n++;
		pthread_cond_signal(&tx->cond);
	}
	pthread_mutex_unlock(&tx->lock);
	if (full) {
		dropped(tx, it, "the event queue is full");
		free(it);
	}
}

static void *sender_main(void *arg)
{
	struct fvp_event_sender *tx = arg;

	for (;;) {
		struct event_item *it;
		struct timespec now;
		bool late = false;

		pthread_mutex_lock(&tx->lock);
		while (!tx->head && !tx->stop)
			pthread_cond_wait(&tx->cond, &tx->lock);
		it = tx->head;
		if (it) {
			tx->head = it->next;
			if (!tx->head)
				tx->tail = &tx->head;
			tx->n--;
		}
		if (tx->stop) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			late = now.tv_sec - tx->stop_at.tv_sec >= FVP_EVENT_DRAIN_S;
		}
		pthread_mutex_unlock(&tx->lock);
		if (!it)
			return NULL;
		if (late)
			dropped(tx, it, "still queued at the stop");
		else
			post(tx->k, it);
		free(it);
	}
}

int fvp_events_start(struct fvp_events *ev)
{
	struct fvp_event_sender *tx;
	int r;

	if (!ev->k)
		return -EINVAL;
	tx = calloc(1, sizeof(*tx));
	if (!tx)
		return -ENOMEM;
	tx->k = ev->k;
	tx->tail = &tx->head;
	pthread_mutex_init(&tx->lock, NULL);
	pthread_cond_init(&tx->cond, NULL);
	r = pthread_create(&tx->thread, NULL, sender_main, tx);
	if (r != 0) {
		pthread_cond_destroy(&tx->cond);
		pthread_mutex_destroy(&tx->lock);
		free(tx);
		return -r;
	}
	ev->tx = tx;
	return 0;
}

void fvp_events_stop(struct fvp_events *ev)
{
	struct fvp_event_sender *tx = ev ? ev->tx : NULL;

	if (!tx)
		return;
	pthread_mutex_lock(&tx->lock);
	tx->stop = true;
	clock_gettime(CLOCK_MONOTONIC, &tx->stop_at);
	pthread_cond_signal(&tx->cond);
	pthread_mutex_unlock(&tx->lock);
	pthread_join(tx->thread, NULL);
	ev->tx = NULL;
	pthread_cond_destroy(&tx->cond);
	pthread_mutex_destroy(&tx->lock);
	free(tx);
}

size_t fvp_events_queued(struct fvp_events *ev)
{
	struct fvp_event_sender *tx = ev ? ev->tx : NULL;
	size_t n;

	if (!tx)
		return 0;
	pthread_mutex_lock(&tx->lock);
	n = tx->n;
	pthread_mutex_unlock(&tx->lock);
	return n;
}

void fvp_event_at(const char *file, int line, struct fvp_events *evs, json_object *obj,
		  bool warning, const char *reason, const char *fmt, ...)
{
	json_object *meta = fv_json_get(obj, "metadata"), *ev, *io, *src;
	const char *ns = fv_json_str(meta, "namespace"), *name = fv_json_str(meta, "name"),
		   *uid = fv_json_str(meta, "uid");
	/* a claim has a namespace; a PV has none and its events go to "default", as client-go's */
	bool is_pv = !ns;
	const char *evns = is_pv ? "default" : ns;
	char msg[EVENT_MSG_MAX], now[FVP_TIME_MAX], evname[EVENT_NAME_MAX], subject[600];
	char path[FVP_API_PATH_MAX];
	struct event_item *it;
	struct timespec ts;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(subject, sizeof(subject), "%s%s%s", is_pv ? "" : ns, is_pv ? "" : "/",
		 name ? name : "?");
	/* client-go's recorder logs every event so; the source line is the caller's */
	fvp_logs_at(warning ? FVP_WARNING : FVP_INFO, file, line, "Event occurred",
		    (const char *[]){ "object", subject, "kind",
				      is_pv ? "PersistentVolume" : "PersistentVolumeClaim", "type",
				      warning ? "Warning" : "Normal", "reason", reason, "message",
				      msg },
		    10);
	if (!evs->k || !fv_kube_name_ok(evns) || !name || !uid || event_repeated(evs, uid, reason, msg))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	fv_time_rfc3339(now, sizeof(now));
	/* client-go's naming: <object>.<unix nanoseconds in hex> */
	snprintf(evname, sizeof(evname), "%.200s.%llx", name,
		 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	ev = fv_kube_object_new("v1", "Event", evns, evname, NULL);
	if (!ev || !fv_json_new_all("oo", &io, &src)) {
		json_object_put(ev);
		return;
	}
	fv_json_set_str(io, "apiVersion", "v1");
	fv_json_set_str(io, "kind", is_pv ? "PersistentVolume" : "PersistentVolumeClaim");
	fv_json_set_str(io, "namespace", ns);
	fv_json_set_str(io, "name", name);
	fv_json_set_str(io, "uid", uid);
	fv_json_set_str(io, "resourceVersion", fv_json_str(meta, "resourceVersion"));
	json_object_object_add(ev, "involvedObject", io);
	fv_json_set_str(ev, "reason", reason);
	fv_json_set_str(ev, "message", msg);
	fv_json_set_str(ev, "type", warning ? "Warning" : "Normal");
	fv_json_set_str(src, "component", FVP_COMPONENT);
	json_object_object_add(ev, "source", src);
	fv_json_set_str(ev, "firstTimestamp", now);
	fv_json_set_str(ev, "lastTimestamp", now);
	json_object_object_add(ev, "count", json_object_new_int(1));
	fv_json_set_str(ev, "reportingComponent", FVP_COMPONENT);
	fv_json_set_str(ev, "reportingInstance", evs->identity);
	fvp_api_path(path, sizeof(path), FVP_API_EVENT, evns, NULL, NULL);
	it = item_new(path, json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN), reason,
		      evns, name);
	json_object_put(ev);
	if (!it) {
		fvp_log_warning("event %s for %s/%s not sent: out of memory", reason, evns, name);
		return;
	}
	if (!evs->tx) {
		post(evs->k, it);
		free(it);
		return;
	}
	enqueue(evs->tx, it);
}
