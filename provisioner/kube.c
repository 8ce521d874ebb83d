/* SPDX-License-Identifier: Apache-2.0 */
/* The API client: see kube.h. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fv/macro.h"
#include "kube.h"
#include "params.h"

#define BODY_MAX (256u << 20)  /* a list of many objects */
#define EVENT_MAX (16u << 20)  /* one watch event */
#define TOKEN_MAX 16384
#define TOKEN_REREAD_S 60      /* client-go re-reads the token file every minute */
#define JSON_DEPTH 128	       /* managedFields nest deeper than json-c's default 32 */
#define WATCH_MAX 4

struct kube_watch {
	CURL *h;
	struct curl_slist *hdrs;
	json_tokener *tok;
	size_t event_bytes;
	kube_event_fn fn;
	void *userdata;
	bool stopped; /* the callback asked to stop */
	char errbuf[CURL_ERROR_SIZE];
};

struct kube {
	char *server;
	char *token_file;
	char *ca_file;
	unsigned int timeout_s;
	CURL *h;	  /* one-shot requests */
	CURLM *multi;	  /* watches */
	struct kube_watch *watches[WATCH_MAX];
	size_t nwatches;
	char token[TOKEN_MAX];
	time_t token_read;
};


/*
 * Check the --server URL with libcurl's own parser (the one the requests
 * use, so the host checked is the host connected to): https, or http to a
 * loopback host only (the tests' fake API server); no user name or password
 * (a token goes in a header), no query, no fragment.  A string prefix is not
 * enough: "http://127.0.0.1@evil/" has host "evil".
 */
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
		r = prov_fail(err, errlen, -EINVAL, "--server is not a URL with a host: '%s'", url);
		goto out;
	}
	(void)curl_url_get(u, CURLUPART_USER, &user, 0);
	(void)curl_url_get(u, CURLUPART_PASSWORD, &pass, 0);
	(void)curl_url_get(u, CURLUPART_QUERY, &query, 0);
	(void)curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
	if (user || pass || query || frag) {
		r = prov_fail(err, errlen, -EINVAL,
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
	r = prov_fail(err, errlen, -EINVAL,
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

int kube_new(const struct kube_config *cfg, struct kube **ret, char *err, size_t errlen)
{
	struct kube *k;
	size_t n;
	int r;

	r = check_server(cfg->server, err, errlen);
	if (r < 0)
		return r;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		return prov_fail(err, errlen, -ENOMEM, "curl_global_init failed");
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->server = strdup(cfg->server);
	k->token_file = cfg->token_file ? strdup(cfg->token_file) : NULL;
	k->ca_file = cfg->ca_file ? strdup(cfg->ca_file) : NULL;
	k->timeout_s = cfg->timeout_s ? cfg->timeout_s : 30;
	k->h = curl_easy_init();
	k->multi = curl_multi_init();
	if (!k->server || (cfg->token_file && !k->token_file) || (cfg->ca_file && !k->ca_file) ||
	    !k->h || !k->multi) {
		kube_free(k);
		return -ENOMEM;
	}
	n = strlen(k->server);
	while (n && k->server[n - 1] == '/')
		k->server[--n] = '\0';
	*ret = k;
	return 0;
}

void kube_free(struct kube *k)
{
	if (!k)
		return;
	if (k->h)
		curl_easy_cleanup(k->h);
	if (k->multi)
		curl_multi_cleanup(k->multi);
	free(k->server);
	free(k->token_file);
	free(k->ca_file);
	free(k);
}

/* The bearer token, re-read at most every minute (rotation). */
static int token(struct kube *k, char *err, size_t errlen)
{
	time_t now = time(NULL);
	FILE *f;
	size_t n;

	if (!k->token_file || (k->token[0] && now - k->token_read < TOKEN_REREAD_S))
		return 0;
	f = fopen(k->token_file, "re");
	if (!f)
		return prov_fail(err, errlen, NEG_ERRNO(), "cannot read the token file '%s': %m",
			    k->token_file);
	n = fread(k->token, 1, sizeof(k->token) - 1, f);
	fclose(f);
	while (n && (k->token[n - 1] == '\n' || k->token[n - 1] == '\r' || k->token[n - 1] == ' '))
		n--;
	k->token[n] = '\0';
	if (!n || strpbrk(k->token, "\r\n"))
		return prov_fail(err, errlen, -EINVAL, "the token file '%s' is empty or not one line",
			    k->token_file);
	k->token_read = now;
	return 0;
}

static struct curl_slist *headers(struct kube *k, bool json_body)
{
	struct curl_slist *h = NULL, *t;
	char auth[TOKEN_MAX + 32];

	h = curl_slist_append(h, "Accept: application/json");
	if (h && json_body && (t = curl_slist_append(h, "Content-Type: application/json")))
		h = t;
	if (h && k->token[0]) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", k->token);
		if ((t = curl_slist_append(h, auth)))
			h = t;
		explicit_bzero(auth, sizeof(auth));
	}
	if (h && (t = curl_slist_append(h, "User-Agent: flexvol-provisioner")))
		h = t;
	return h;
}

static void common_opts(struct kube *k, CURL *h, const char *url)
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

static json_object *parse_json(const char *s, size_t n)
{
	json_tokener *tok = json_tokener_new_ex(JSON_DEPTH);
	json_object *o;

	if (!tok)
		return NULL;
	o = json_tokener_parse_ex(tok, s, (int)n);
	if (o && json_tokener_get_parse_end(tok) < n && strspn(s + json_tokener_get_parse_end(tok), " \r\n\t") !=
	    n - json_tokener_get_parse_end(tok)) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

int kube_request(struct kube *k, const char *method, const char *path, json_object *body,
		 json_object **ret, char *err, size_t errlen)
{
	_cleanup_free_ char *url = NULL;
	struct curl_slist *h;
	struct buf b = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "";
	const char *data = NULL;
	long status = 0;
	CURLcode c;
	int r;

	if (ret)
		*ret = NULL;
	r = token(k, err, errlen);
	if (r < 0)
		return r;
	if (asprintf(&url, "%s%s", k->server, path) < 0)
		return -ENOMEM;
	curl_easy_reset(k->h);
	common_opts(k, k->h, url);
	curl_easy_setopt(k->h, CURLOPT_TIMEOUT, (long)k->timeout_s);
	curl_easy_setopt(k->h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(k->h, CURLOPT_WRITEFUNCTION, buf_write);
	curl_easy_setopt(k->h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(k->h, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		data = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
		curl_easy_setopt(k->h, CURLOPT_POSTFIELDS, data);
		curl_easy_setopt(k->h, CURLOPT_POSTFIELDSIZE, (long)strlen(data));
	} else if (streq(method, "GET")) {
		curl_easy_setopt(k->h, CURLOPT_HTTPGET, 1L);
	}
	h = headers(k, body != NULL);
	curl_easy_setopt(k->h, CURLOPT_HTTPHEADER, h);
	c = curl_easy_perform(k->h);
	curl_slist_free_all(h);
	if (c != CURLE_OK) {
		free(b.p);
		return prov_fail(err, errlen, c == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO,
			    "%s %s: %s", method, path,
			    b.too_big ? "response too large" : errbuf[0] ? errbuf : curl_easy_strerror(c));
	}
	curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &status);
	if (ret && b.n)
		*ret = parse_json(b.p, b.n);
	free(b.p);
	return (int)status;
}

const char *kube_status_message(json_object *status)
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
	curl_slist_free_all(w->hdrs);
	if (w->tok)
		json_tokener_free(w->tok);
	free(w);
}

/* Watch bodies are a stream of JSON objects, one per event (newline separated). */
static size_t watch_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct kube_watch *w = arg;
	size_t n = size * nmemb, off = 0;

	while (off < n) {
		json_object *ev, *type, *obj;
		size_t end;

		/* skip the separators json-c would otherwise count as a parse start */
		if (w->event_bytes == 0) {
			while (off < n && strchr(" \r\n\t", data[off]))
				off++;
			if (off >= n)
				break;
		}
		ev = json_tokener_parse_ex(w->tok, data + off, (int)(n - off));
		end = json_tokener_get_parse_end(w->tok);
		if (!ev) {
			if (json_tokener_get_error(w->tok) != json_tokener_continue)
				return 0; /* garbage: end the watch, the caller re-lists */
			w->event_bytes += n - off;
			if (w->event_bytes > EVENT_MAX)
				return 0;
			break;
		}
		off += end;
		w->event_bytes = 0;
		json_tokener_reset(w->tok);
		if (json_object_object_get_ex(ev, "type", &type) &&
		    json_object_is_type(type, json_type_string) &&
		    json_object_object_get_ex(ev, "object", &obj) &&
		    w->fn(w->userdata, json_object_get_string(type), obj) < 0) {
			json_object_put(ev);
			w->stopped = true;
			return 0;
		}
		json_object_put(ev);
	}
	return n;
}

int kube_watch_add(struct kube *k, const char *path, kube_event_fn fn, void *userdata,
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
	r = token(k, err, sizeof(err));
	if (r < 0)
		return r;
	if (asprintf(&url, "%s%s", k->server, path) < 0)
		return -ENOMEM;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->h = curl_easy_init();
	w->tok = json_tokener_new_ex(JSON_DEPTH);
	w->hdrs = headers(k, false);
	if (!w->h || !w->tok || !w->hdrs) {
		watch_free(w);
		return -ENOMEM;
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

void kube_watch_clear(struct kube *k)
{
	for (size_t i = 0; i < k->nwatches; i++) {
		curl_multi_remove_handle(k->multi, k->watches[i]->h);
		watch_free(k->watches[i]);
		k->watches[i] = NULL;
	}
	k->nwatches = 0;
}

int kube_watch_run(struct kube *k, volatile int *stop, int (*after)(void *), void *userdata,
		   char *err, size_t errlen)
{
	int running = 1, r = 0;

	while (!*stop) {
		CURLMcode mc = curl_multi_perform(k->multi, &running);
		CURLMsg *msg;
		int left;

		if (mc != CURLM_OK) {
			r = prov_fail(err, errlen, -EIO, "watch: %s", curl_multi_strerror(mc));
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
			char *url = NULL;

			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&w);
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
			curl_easy_getinfo(msg->easy_handle, CURLINFO_EFFECTIVE_URL, &url);
			if (w && w->stopped)
				r = 0;
			else if (msg->data.result == CURLE_OK)
				r = prov_fail(err, errlen, 0, "watch ended by the server");
			else if (msg->data.result == CURLE_HTTP_RETURNED_ERROR)
				r = prov_fail(err, errlen, status == 410 ? -ESTALE : -EIO,
					 "watch: HTTP %ld", status);
			else
				r = prov_fail(err, errlen, -EIO, "watch: %s",
					 w && w->errbuf[0] ? w->errbuf :
							     curl_easy_strerror(msg->data.result));
			break;
		}
		if (!running) {
			r = prov_fail(err, errlen, 0, "no watch running");
			break;
		}
		mc = curl_multi_poll(k->multi, NULL, 0, 1000, NULL);
		if (mc != CURLM_OK) {
			r = prov_fail(err, errlen, -EIO, "watch: %s", curl_multi_strerror(mc));
			break;
		}
	}
	kube_watch_clear(k);
	return r;
}
