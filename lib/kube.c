/* SPDX-License-Identifier: Apache-2.0 */
/* The API client: see fv/kube.h. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fv/macro.h"
#include "fv/kube.h"

#define BODY_MAX (256u << 20)  /* a list of many objects */
#define TOKEN_MAX 16384
#define WATCH_MAX 4
#define HANDLES_MAX 16	       /* idle one-shot handles kept (one per worker thread in use) */
/*
 * 429 Too Many Requests (and a 5xx with Retry-After): waited out and retried
 * like client-go's rest client does (it retries up to 10 times); each wait is
 * capped, so a worker is never parked for long: after the last try the
 * caller sees the 429 and its work item goes to the per-object backoff.
 */
#define RETRY_AFTER_TRIES 3
#define RETRY_AFTER_MAX_S 30

struct kube_watch {
	CURL *h;
	struct curl_slist *hdrs;
	struct fv_kube_stream *stream;
	fv_kube_event_fn fn;
	void *userdata;
	bool stopped; /* the callback asked to stop */
	char errbuf[CURL_ERROR_SIZE];
	char token[TOKEN_MAX]; /* the one sent: a 401 marks it stale */
};

struct fv_kube {
	char *server;
	char *token_file;
	char *ca_file;
	char *unix_socket;
	unsigned int timeout_s;
	CURLM *multi;	  /* watches: one thread (the watcher) */
	struct kube_watch *watches[WATCH_MAX];
	size_t nwatches;
	/*
	 * Shared by the worker threads, under @lock: the token and a stack of
	 * idle one-shot handles (a handle keeps its connection for reuse).
	 */
	pthread_mutex_t lock;
	CURL *idle[HANDLES_MAX];
	size_t nidle;
	char token[TOKEN_MAX];
	bool token_stale; /* a 401 said so: read the file again before the next request */
	unsigned long token_reads;
	volatile int *stop; /* waits (Retry-After) end early when it becomes true */
};


/*
 * Check the --server URL with libcurl's own parser (the one the requests
 * use, so the host checked is the host connected to): https, or http to a
 * loopback host only (the tests' fake API server); no user name or password
 * (a token goes in a header), no query, no fragment.  A string prefix is not
 * enough: "http://127.0.0.1@evil/" has host "evil".
 */

/* The message of a failure into @err; returns @r. */
static int fail(char *err, size_t len, int r, const char *fmt, ...) _printf_(4, 5);
static int fail(char *err, size_t len, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return r;
}

static int check_server(const char *url, char *err, size_t errlen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *user = NULL, *pass = NULL, *query = NULL, *frag = NULL;
	struct in_addr a4;
	int r = 0;

	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
		r = fail(err, errlen, -EINVAL, "--server is not a URL with a host: '%s'", url);
		goto out;
	}
	(void)curl_url_get(u, CURLUPART_USER, &user, 0);
	(void)curl_url_get(u, CURLUPART_PASSWORD, &pass, 0);
	(void)curl_url_get(u, CURLUPART_QUERY, &query, 0);
	(void)curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
	if (user || pass || query || frag) {
		r = fail(err, errlen, -EINVAL,
			      "--server must be a URL scheme://host[:port][/path], without user, password, "
			      "query or fragment: '%s'", url);
		goto out;
	}
	if (streq(scheme, "https"))
		goto out;
	/* 127.0.0.0/8 as an address (inet_pton takes only the full dotted quad), ::1, localhost */
	if (streq(scheme, "http") &&
	    ((inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) ||
	     streq(host, "[::1]") || streq(host, "localhost")))
		goto out;
	r = fail(err, errlen, -EINVAL,
		      "--server must be an https:// URL (http:// only for 127.0.0.1, [::1] or "
		      "localhost): '%s'", url);
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(pass);
	curl_free(query);
	curl_free(frag);
	curl_url_cleanup(u);
	return r;
}

bool fv_kube_option(int opt, const char *arg, struct fv_kube_config *kc)
{
	switch (opt) {
	case FV_KUBE_OPT_SERVER: kc->server = arg; return true;
	case FV_KUBE_OPT_TOKEN_FILE: kc->token_file = arg; return true;
	case FV_KUBE_OPT_CA_FILE: kc->ca_file = arg; return true;
	default: return false;
	}
}

/* Where a pod's service account is mounted: its token and the cluster's CA. */
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

int fv_kube_config_incluster(struct fv_kube_config *kc, char **server, char *err, size_t errlen)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");

	*server = NULL;
	if (kc->server)
		return 0;
	if (!host || !*host || !port || !*port)
		return fail(err, errlen, -ENOENT, "not in a cluster (KUBERNETES_SERVICE_HOST unset): "
			    "give --server");
	if (asprintf(server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port) < 0)
		return fail(err, errlen, -ENOMEM, "out of memory");
	kc->server = *server;
	if (!kc->token_file)
		kc->token_file = SA_DIR "/token";
	if (!kc->ca_file)
		kc->ca_file = SA_DIR "/ca.crt";
	return 0;
}

int fv_kube_new(const struct fv_kube_config *cfg, struct fv_kube **ret, char *err, size_t errlen)
{
	struct fv_kube *k;
	size_t n;
	int r;

	r = check_server(cfg->server, err, errlen);
	if (r < 0)
		return r;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		return fail(err, errlen, -ENOMEM, "curl_global_init failed");
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->server = strdup(cfg->server);
	k->token_file = cfg->token_file ? strdup(cfg->token_file) : NULL;
	k->ca_file = cfg->ca_file ? strdup(cfg->ca_file) : NULL;
	k->unix_socket = cfg->unix_socket ? strdup(cfg->unix_socket) : NULL;
	k->timeout_s = cfg->timeout_s ? cfg->timeout_s : 30;
	k->stop = cfg->stop;
	k->token_stale = true;
	pthread_mutex_init(&k->lock, NULL);
	k->multi = curl_multi_init();
	if (!k->server || (cfg->token_file && !k->token_file) || (cfg->ca_file && !k->ca_file) ||
	    (cfg->unix_socket && !k->unix_socket) || !k->multi) {
		fv_kube_free(k);
		return -ENOMEM;
	}
	n = strlen(k->server);
	while (n && k->server[n - 1] == '/')
		k->server[--n] = '\0';
	*ret = k;
	return 0;
}

void fv_kube_free(struct fv_kube *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k->nidle; i++)
		curl_easy_cleanup(k->idle[i]);
	if (k->multi)
		curl_multi_cleanup(k->multi);
	free(k->server);
	free(k->token_file);
	free(k->ca_file);
	free(k->unix_socket);
	pthread_mutex_destroy(&k->lock);
	explicit_bzero(k->token, sizeof(k->token));
	free(k);
}

/*
 * The bearer token (under k->lock): read once, and again after a 401.  Bound
 * service-account tokens rotate (kubelet rewrites the file at 80 % of their
 * lifetime; the old one stays valid until it expires), so a 401 is the
 * moment the file has something newer, not a clock tick.  client-go's
 * cached file token source re-reads on a timer instead; a 401-driven
 * re-read never sends a token that is known to be refused and never reads
 * the file for nothing.
 */
static int token_locked(struct fv_kube *k, char *err, size_t errlen)
{
	char buf[TOKEN_MAX];
	FILE *f;
	size_t n;

	if (!k->token_file || !k->token_stale)
		return 0;
	f = fopen(k->token_file, "re");
	if (!f)
		return fail(err, errlen, NEG_ERRNO(), "cannot read the token file '%s': %m",
			    k->token_file);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	if (!n || strpbrk(buf, "\r\n")) {
		explicit_bzero(buf, sizeof(buf));
		return fail(err, errlen, -EINVAL, "the token file '%s' is empty or not one line",
			    k->token_file);
	}
	memcpy(k->token, buf, n + 1);
	explicit_bzero(buf, sizeof(buf));
	k->token_stale = false;
	k->token_reads++;
	return 0;
}

/* A 401 with the token @used (a prefix is enough): read the file again next time. */
static void token_refused(struct fv_kube *k, const char *used)
{
	pthread_mutex_lock(&k->lock);
	if (k->token_file && streq(k->token, used))
		k->token_stale = true;
	pthread_mutex_unlock(&k->lock);
}

unsigned long fv_kube_token_reads(struct fv_kube *k)
{
	unsigned long n;

	pthread_mutex_lock(&k->lock);
	n = k->token_reads;
	pthread_mutex_unlock(&k->lock);
	return n;
}

/*
 * The request headers, with the current token (re-read first when stale);
 * the token used is copied to @used (TOKEN_MAX bytes) to recognise a 401 for it.
 */
static int headers(struct fv_kube *k, const char *ctype, char *used, struct curl_slist **ret, char *err,
		   size_t errlen)
{
	struct curl_slist *h = NULL, *t;
	char auth[TOKEN_MAX + 32];
	int r;

	*ret = NULL;
	pthread_mutex_lock(&k->lock);
	r = token_locked(k, err, errlen);
	memcpy(used, k->token, TOKEN_MAX);
	pthread_mutex_unlock(&k->lock);
	if (r < 0)
		return r;
	h = curl_slist_append(h, "Accept: application/json");
	if (h && ctype) {
		char ct[64];

		snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
		if ((t = curl_slist_append(h, ct)))
			h = t;
	}
	if (h && used[0]) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", used);
		if ((t = curl_slist_append(h, auth)))
			h = t;
		explicit_bzero(auth, sizeof(auth));
	}
	if (h && (t = curl_slist_append(h, "User-Agent: flexvol-provisioner")))
		h = t;
	*ret = h;
	return h ? 0 : -ENOMEM;
}

static void common_opts(struct fv_kube *k, CURL *h, const char *url)
{
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(h, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	if (k->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, k->ca_file);
	if (k->unix_socket)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, k->unix_socket);
}

struct buf {
	char *p;
	size_t n, cap;
	bool too_big;
};

static size_t buf_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct buf *b = arg;
	size_t n = size * nmemb;

	if (b->n + n + 1 > BODY_MAX) {
		b->too_big = true;
		return 0;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 16384;
		char *p;

		while (cap < b->n + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

static size_t listdec_write(char *data, size_t size, size_t nmemb, void *arg)
{
	size_t n = size * nmemb;

	return fv_kube_listdec_feed(arg, data, n) < 0 ? 0 : n;
}

static CURL *handle_get(struct fv_kube *k)
{
	CURL *h = NULL;

	pthread_mutex_lock(&k->lock);
	if (k->nidle)
		h = k->idle[--k->nidle];
	pthread_mutex_unlock(&k->lock);
	return h ? h : curl_easy_init();
}

static void handle_put(struct fv_kube *k, CURL *h)
{
	pthread_mutex_lock(&k->lock);
	if (k->nidle < HANDLES_MAX) {
		k->idle[k->nidle++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&k->lock);
	if (h)
		curl_easy_cleanup(h);
}

/* Sleep @s seconds, or less when *k->stop becomes true. */
static void wait_s(struct fv_kube *k, unsigned int s)
{
	for (unsigned int i = 0; i < s * 10 && !(k->stop && __atomic_load_n(k->stop, __ATOMIC_ACQUIRE)); i++) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
}

/* One try: the status, the Retry-After seconds (or -1) in *retry_after, the token used in @used. */
static int request_once(struct fv_kube *k, CURL *h, const char *method, const char *url,
			const char *path, const char *data, struct fv_kube_listdec *ld,
			json_object **ret, long *retry_after, char *used, char *err, size_t errlen)
{
	struct curl_slist *hdrs;
	struct buf b = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_off_t ra = -1;
	long status = 0;
	CURLcode c;
	int r;

	*retry_after = -1;
	/* a PATCH is a JSON merge patch (RFC 7386): what Kubernetes answers for a map of fields */
	r = headers(k, !data ? NULL : strcmp(method, "PATCH") ? "application/json" :
				       "application/merge-patch+json",
		    used, &hdrs, err, errlen);
	if (r < 0)
		return r;
	curl_easy_reset(h);
	common_opts(k, h, url);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)k->timeout_s);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ld ? listdec_write : buf_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, ld ? (void *)ld : (void *)&b);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (data) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, data);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(data));
	} else if (streq(method, "GET")) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	c = curl_easy_perform(h);
	/* the header list holds the token: not left in freed memory */
	for (struct curl_slist *l = hdrs; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(hdrs);
	if (c != CURLE_OK) {
		free(b.p);
		r = ld ? fv_kube_listdec_error(ld) : 0;
		if (r < 0 && r != -EBADMSG)
			return fail(err, errlen, r, "%s %s: reading the list: %s", method, path,
					strerror(-r));
		return fail(err, errlen, c == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT :
				r < 0 ? -EBADMSG : -EIO,
			    "%s %s: %s", method, path,
			    b.too_big ? "response too large" : r < 0 ? "not a JSON list" :
			    errbuf[0] ? errbuf : curl_easy_strerror(c));
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	/* libcurl parses both forms of the header (delay-seconds and an HTTP date) */
	if (curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra >= 0)
		*retry_after = ra > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : (long)ra;
	if (ld && ret)
		*ret = fv_kube_listdec_finish(ld);
	else if (ret && b.n)
		*ret = fv_kube_parse(b.p, b.n);
	free(b.p);
	r = ld ? fv_kube_listdec_error(ld) : 0;
	if (r < 0)
		return fail(err, errlen, r, "%s %s: %s", method, path, strerror(-r));
	return (int)status;
}

static int request(struct fv_kube *k, const char *method, const char *path, const char *data,
		   fv_kube_item_fn fn, void *userdata, json_object **ret, char *err, size_t errlen)
{
	_cleanup_free_ char *url = NULL;
	char *used;
	bool reread = false;
	CURL *h;
	int st = 0;

	if (ret)
		*ret = NULL;
	if (asprintf(&url, "%s%s", k->server, path) < 0)
		return -ENOMEM;
	used = malloc(TOKEN_MAX);
	h = handle_get(k);
	if (!used || !h) {
		free(used);
		if (h)
			handle_put(k, h);
		return -ENOMEM;
	}
	for (unsigned int tries = 0;; tries++) {
		long retry_after;

		if (ret) {
			json_object_put(*ret);
			*ret = NULL;
		}
		struct fv_kube_listdec *ld = NULL;

		/* a retried list starts over: the refused try handed no items over (no 200) */
		if (fn && !(ld = fv_kube_listdec_new(fn, userdata))) {
			st = -ENOMEM;
			break;
		}
		st = request_once(k, h, method, url, path, data, ld, ret, &retry_after, used, err,
				  errlen);
		fv_kube_listdec_free(ld);
		if (st == 401 && k->token_file && !reread) {
			/* rotated under us: read the file again and try once more */
			token_refused(k, used);
			reread = true;
			continue;
		}
		if ((st == 429 || (st >= 500 && retry_after >= 0)) && tries + 1 < RETRY_AFTER_TRIES &&
		    !(k->stop && __atomic_load_n(k->stop, __ATOMIC_ACQUIRE))) {
			/* the server said when: wait that long (at least a second) */
			wait_s(k, retry_after > 0 ? (unsigned int)retry_after : 1);
			continue;
		}
		break;
	}
	explicit_bzero(used, TOKEN_MAX);
	free(used);
	handle_put(k, h);
	return st;
}

int fv_kube_request(struct fv_kube *k, const char *method, const char *path, json_object *body,
		     json_object **ret, char *err, size_t errlen)
{
	return request(k, method, path,
		       body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL,
		       NULL, NULL, ret, err, errlen);
}

int fv_kube_request_text(struct fv_kube *k, const char *method, const char *path,
			  const char *body, json_object **ret, char *err, size_t errlen)
{
	return request(k, method, path, body, NULL, NULL, ret, err, errlen);
}

int fv_kube_list(struct fv_kube *k, const char *path, fv_kube_item_fn fn, void *userdata,
		  json_object **ret, char *err, size_t errlen)
{
	json_object *rest = NULL;
	int st = request(k, "GET", path, NULL, fn, userdata, &rest, err, errlen);

	if (ret)
		*ret = rest;
	else
		json_object_put(rest);
	return st;
}

int fv_kube_delete_uid(struct fv_kube *k, const char *path, const char *uid, json_object **ret,
		    char *err, size_t errlen)
{
	json_object *body = json_object_new_object(), *pre = json_object_new_object();
	int st;

	if (!body || !pre || !uid) {
		json_object_put(body);
		json_object_put(pre);
		snprintf(err, errlen, "%s", uid ? "out of memory" : "no uid to delete by");
		return uid ? -ENOMEM : -EINVAL;
	}
	json_object_object_add(body, "apiVersion", json_object_new_string("v1"));
	json_object_object_add(body, "kind", json_object_new_string("DeleteOptions"));
	json_object_object_add(pre, "uid", json_object_new_string(uid));
	json_object_object_add(body, "preconditions", pre);
	st = fv_kube_request(k, "DELETE", path, body, ret, err, errlen);
	json_object_put(body);
	return st;
}

const char *fv_kube_status_message(json_object *status)
{
	json_object *m;

	if (status && json_object_object_get_ex(status, "message", &m) &&
	    json_object_is_type(m, json_type_string))
		return json_object_get_string(m);
	return "";
}

/* --- watches ------------------------------------------------------------------------- */

static void watch_free(struct kube_watch *w)
{
	if (!w)
		return;
	if (w->h)
		curl_easy_cleanup(w->h);
	for (struct curl_slist *l = w->hdrs; l; l = l->next)
		explicit_bzero(l->data, strlen(l->data));
	curl_slist_free_all(w->hdrs);
	explicit_bzero(w->token, sizeof(w->token));
	fv_kube_stream_free(w->stream);
	free(w);
}

static size_t watch_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct kube_watch *w = arg;
	size_t n = size * nmemb;
	int r = fv_kube_stream_feed(w->stream, data, n, w->fn, w->userdata);

	if (r < 0) {
		/* garbage ends the watch as an error; a callback's stop ends it cleanly */
		w->stopped = r != -EBADMSG;
		return 0;
	}
	return n;
}

int fv_kube_watch_add(struct fv_kube *k, const char *path, fv_kube_event_fn fn, void *userdata,
		   unsigned int timeout_s, struct kube_watch **ret)
{
	_cleanup_free_ char *url = NULL;
	struct kube_watch *w;
	char err[256];
	int r;

	if (path[0] != '/' ||
	    strspn(path, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
			 "/?&=._~%:,+-") != strlen(path))
		return -EINVAL;
	if (k->nwatches >= WATCH_MAX)
		return -E2BIG;
	if (asprintf(&url, "%s%s", k->server, path) < 0)
		return -ENOMEM;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->h = curl_easy_init();
	w->stream = fv_kube_stream_new();
	r = headers(k, NULL, w->token, &w->hdrs, err, sizeof(err));
	if (r < 0 || !w->h || !w->stream) {
		watch_free(w);
		return r < 0 ? r : -ENOMEM;
	}
	w->fn = fn;
	w->userdata = userdata;
	common_opts(k, w->h, url);
	curl_easy_setopt(w->h, CURLOPT_HTTPHEADER, w->hdrs);
	curl_easy_setopt(w->h, CURLOPT_HTTPGET, 1L);
	/* the server ends the watch after timeoutSeconds; a dead server is caught here */
	curl_easy_setopt(w->h, CURLOPT_TIMEOUT, (long)timeout_s + 30);
	curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, watch_write);
	curl_easy_setopt(w->h, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(w->h, CURLOPT_ERRORBUFFER, w->errbuf);
	curl_easy_setopt(w->h, CURLOPT_PRIVATE, w);
	/* an HTTP error status (410 on an old resourceVersion) ends the transfer at once */
	curl_easy_setopt(w->h, CURLOPT_FAILONERROR, 1L);
	if (curl_multi_add_handle(k->multi, w->h) != CURLM_OK) {
		watch_free(w);
		return -ENOMEM;
	}
	k->watches[k->nwatches++] = w;
	if (ret)
		*ret = w;
	return 0;
}

void fv_kube_watch_clear(struct fv_kube *k)
{
	for (size_t i = 0; i < k->nwatches; i++) {
		curl_multi_remove_handle(k->multi, k->watches[i]->h);
		watch_free(k->watches[i]);
		k->watches[i] = NULL;
	}
	k->nwatches = 0;
}

/* Remove and free watch @w only (the others keep streaming). */
static void watch_remove(struct fv_kube *k, struct kube_watch *w)
{
	for (size_t i = 0; i < k->nwatches; i++) {
		if (k->watches[i] != w)
			continue;
		curl_multi_remove_handle(k->multi, w->h);
		watch_free(w);
		k->watches[i] = k->watches[--k->nwatches];
		k->watches[k->nwatches] = NULL;
		return;
	}
}

int fv_kube_watch_run(struct fv_kube *k, volatile int *stop, int (*after)(void *), void *userdata,
		   void **ended, char *err, size_t errlen)
{
	int running = 1, r = 0;

	*ended = NULL;
	while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
		CURLMcode mc = curl_multi_perform(k->multi, &running);
		CURLMsg *msg;
		int left;

		if (mc != CURLM_OK) {
			r = fail(err, errlen, -EIO, "watch: %s", curl_multi_strerror(mc));
			break;
		}
		/* events were queued by the callbacks: handle them outside libcurl */
		if (after && after(userdata) < 0) {
			r = 0;
			break;
		}
		msg = curl_multi_info_read(k->multi, &left);
		if (msg && msg->msg == CURLMSG_DONE) {
			struct kube_watch *w = NULL;
			long status = 0;

			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&w);
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
			if (w && w->stopped)
				r = 0;
			else if (msg->data.result == CURLE_OK)
				r = fail(err, errlen, 0, "watch ended by the server");
			else if (msg->data.result == CURLE_HTTP_RETURNED_ERROR && status == 401) {
				if (w)
					token_refused(k, w->token);
				r = fail(err, errlen, -EACCES, "watch: HTTP 401 (token refused)");
			} else if (msg->data.result == CURLE_HTTP_RETURNED_ERROR)
				r = fail(err, errlen, status == 410 ? -ESTALE : -EIO,
					 "watch: HTTP %ld", status);
			else
				r = fail(err, errlen, -EIO, "watch: %s",
					 w && w->errbuf[0] ? w->errbuf :
							     curl_easy_strerror(msg->data.result));
			if (w) {
				/* only this one ends: the others keep their place in their streams */
				*ended = w->userdata;
				watch_remove(k, w);
				return r;
			}
			break;
		}
		if (!running) {
			r = fail(err, errlen, 0, "no watch running");
			break;
		}
		mc = curl_multi_poll(k->multi, NULL, 0, 1000, NULL);
		if (mc != CURLM_OK) {
			r = fail(err, errlen, -EIO, "watch: %s", curl_multi_strerror(mc));
			break;
		}
	}
	fv_kube_watch_clear(k);
	return r;
}
