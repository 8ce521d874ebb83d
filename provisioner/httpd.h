/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tiny HTTP/1.0 responder for /metrics (metrics.c), /healthz and /readyz,
 * on its own thread.  GET and HEAD only; one connection at a time, each
 * with a 2 s deadline for the whole exchange and a 4 KiB request limit, the
 * connection closed after every answer.  Nothing is read but the request
 * line and headers; no body is ever accepted.
 *
 * Why not a library: libcurl is a client only, and the HTTP servers one
 * could link (libmicrohttpd, civetweb) would be a second network parser in
 * the static binary and the image, for three fixed GET paths that kubelet's
 * probes and Prometheus scrape.  A sequential responder with deadlines is
 * small enough to read whole.
 */
#ifndef FVP_HTTPD_H
#define FVP_HTTPD_H

#include <stdbool.h>
#include <stddef.h>

struct fvp_httpd;

struct fvp_httpd_config {
	const char *address; /* "HOST:PORT", "[V6]:PORT" or ":PORT" (every address); port 0: any */
	/* 0 when healthy (@ready: ready), else <0 with why in @msg */
	int (*health)(void *ud, bool ready, char *msg, size_t len);
	void *ud;
};

/* Bind and start serving.  The bound address goes to the log.  Returns 0 or -errno (@err). */
int fvp_httpd_start(const struct fvp_httpd_config *cfg, struct fvp_httpd **ret, char *err,
		    size_t errlen);
void fvp_httpd_stop(struct fvp_httpd *h);

/* The answer to one request (@req: the bytes received); tests. Returns the status. */
int fvp_httpd_answer(const struct fvp_httpd_config *cfg, const char *req, char **body,
		     const char **type);

#endif
