/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small Kubernetes API client on libcurl + json-c (lib/kube.c, and its body
 * decoders lib/kubedecode.c): one-shot requests and watch streams, for the
 * programs that talk to the API server (flexvol-provisioner, flexvol-migrate).  HTTPS with the cluster CA and a bearer token (read from its
 * file at the first request and again after a 401: bound service-account
 * tokens rotate); plain http:// only for a loopback server (tests).
 *
 * fv_kube_request() may be called from several threads at once (each call
 * takes an idle connection handle or makes one); the watch functions belong
 * to one thread.  A 429 (or a 5xx with Retry-After) is waited out as the
 * server asks and retried a few times, as client-go does.
 */
#ifndef FV_KUBE_H
#define FV_KUBE_H

#include <stdbool.h>
#include <stddef.h>

/*
 * A request's error message: "<method> <path>: <libcurl's message>", a path
 * of up to 512 bytes and libcurl's CURL_ERROR_SIZE (256) bytes.
 */
#define FV_KUBE_ERR_MAX 1024

struct json_object;
struct fv_kube;

struct fv_kube_config {
	const char *server;	  /* https://host:port (or http://127.0.0.1:port) */
	const char *token_file;	  /* or NULL: no Authorization header */
	const char *ca_file;	  /* or NULL: the system CAs */
	const char *unix_socket;  /* or NULL; else every request goes over this socket (a local
				     proxy: server http://localhost) */
	unsigned int timeout_s;	  /* per one-shot request */
	volatile int *stop;	  /* or NULL: Retry-After waits end when it becomes true */
};

/*
 * The options of the API connection, the same in every program that talks to the API server,
 * for getopt_long()'s table (FV_KUBE_LONGOPTS, with <getopt.h>): --server URL, --token-file
 * FILE, --certificate-authority FILE.  fv_kube_option() takes one of them into @kc (true when
 * @opt was one); fv_kube_config_incluster() fills what was not given from the pod's service
 * account: KUBERNETES_SERVICE_HOST/PORT, its token and CA (the server's URL into *@server, the
 * caller's to free).  0, or -ENOENT outside a cluster without --server (a message in @err).
 */
#define FV_KUBE_OPT_SERVER 0x4b01
#define FV_KUBE_OPT_TOKEN_FILE 0x4b02
#define FV_KUBE_OPT_CA_FILE 0x4b03
#define FV_KUBE_LONGOPTS                                                                \
	{ "server", required_argument, NULL, FV_KUBE_OPT_SERVER },                       \
	{ "token-file", required_argument, NULL, FV_KUBE_OPT_TOKEN_FILE },               \
	{ "certificate-authority", required_argument, NULL, FV_KUBE_OPT_CA_FILE }
/* What --help says of them. */
#define FV_KUBE_OPTIONS_HELP                                                             \
	"  --server URL    the API server (https://HOST:PORT); without it, in a pod: the\n"  \
	"                  cluster's (KUBERNETES_SERVICE_HOST/PORT, the service account's\n" \
	"                  token and CA)\n"                                                    \
	"  --token-file FILE, --certificate-authority FILE  the bearer token (read again\n"   \
	"                  when it is refused: bound tokens rotate), the server's CA\n"
bool fv_kube_option(int opt, const char *arg, struct fv_kube_config *kc);
int fv_kube_config_incluster(struct fv_kube_config *kc, char **server, char *err, size_t errlen);

/* Returns 0 and *ret, or -EINVAL with a message in @err (bad server URL). */
int fv_kube_new(const struct fv_kube_config *cfg, struct fv_kube **ret, char *err, size_t errlen);
void fv_kube_free(struct fv_kube *k);

/*
 * fv_kube_request() - @method @path (with query) and an optional JSON @body.
 * Returns the HTTP status (>= 100) with the parsed body in *ret (NULL when
 * the body is not a JSON object; may be NULL when not wanted), or -errno for a
 * transport failure (message in @err).
 */
int fv_kube_request(struct fv_kube *k, const char *method, const char *path, struct json_object *body,
		 struct json_object **ret, char *err, size_t errlen);

/* The same with @body as JSON text (or NULL). */
int fv_kube_request_text(struct fv_kube *k, const char *method, const char *path,
			  const char *body, struct json_object **ret, char *err, size_t errlen);

/*
 * fv_kube_delete_uid() - DELETE @path, only if the object there still has
 * @uid (a DeleteOptions precondition: a 409 rather than the deletion of an
 * object re-created under the same name).  Returns as fv_kube_request().
 */
int fv_kube_delete_uid(struct fv_kube *k, const char *path, const char *uid, struct json_object **ret,
		    char *err, size_t errlen);

/*
 * Called for every element of a list's "items" as soon as it is read.  The
 * element is the caller's to keep (json_object_get) or drop.  Return <0 to
 * end the list (fv_kube_list() returns it).
 */
typedef int (*fv_kube_item_fn)(void *userdata, struct json_object *item);

/*
 * fv_kube_list() - GET the list @path, handing every element of its
 * "items" to @fn as it arrives: a list is never held whole, as text or as a
 * tree; at most one element and the list's other members are.  Returns the
 * HTTP status with the list minus its items in *ret (its metadata:
 * resourceVersion, continue; a Status on an error; NULL when the body is no
 * JSON object), or -errno for a transport failure (message in @err), or
 * @fn's <0, or -EBADMSG for a body that is not JSON.
 */
int fv_kube_list(struct fv_kube *k, const char *path, fv_kube_item_fn fn, void *userdata,
		  struct json_object **ret, char *err, size_t errlen);

/*
 * The decoder fv_kube_list() reads a body with, on its own for the fuzz
 * target (tests/fuzz/fuzz-watch.c): fed the body cut anywhere into pieces,
 * it hands every element of the top-level "items" array to @fn;
 * fv_kube_listdec_finish() returns the rest of the body parsed (NULL when it
 * is no JSON object).  feed returns 0, -EBADMSG (not JSON, nested past the
 * parser's depth, an element past 16 MiB or the rest past 256 MiB), -ENOMEM
 * or @fn's <0; after an error the decoder takes nothing more.
 */
struct fv_kube_listdec;
struct fv_kube_listdec *fv_kube_listdec_new(fv_kube_item_fn fn, void *userdata);
int fv_kube_listdec_feed(struct fv_kube_listdec *d, const char *data, size_t n);
struct json_object *fv_kube_listdec_finish(struct fv_kube_listdec *d);
/* The decoder's first error (as feed returned it), or 0. */
int fv_kube_listdec_error(const struct fv_kube_listdec *d);

/*
 * One API answer: a JSON object and nothing after it but white space (depth
 * up to 128: managedFields nest deep).  NULL otherwise.
 */
struct json_object *fv_kube_parse(const char *s, size_t n);
void fv_kube_listdec_free(struct fv_kube_listdec *d);

/* How often the token file was read (tests, metrics). */
unsigned long fv_kube_token_reads(struct fv_kube *k);

/* The "message" of an API Status body, or "". */
const char *fv_kube_status_message(struct json_object *status);

/* --- watches ------------------------------------------------------------------------------ */

/*
 * The decoder of a watch body (a stream of {"type","object"} JSON objects,
 * cut anywhere into pieces), on its own for the fuzz target
 * (tests/fuzz/fuzz-watch.c) and the watches below: fv_kube_stream_feed() hands
 * every whole event whose object is a JSON object to @fn and keeps a
 * partial one for the next piece.  Returns 0, -EBADMSG (not such a stream,
 * or one event past 16 MiB: the watch must end), or @fn's <0.
 */
struct fv_kube_stream;
struct fv_kube_stream *fv_kube_stream_new(void);
void fv_kube_stream_free(struct fv_kube_stream *s);

struct kube_watch;

/*
 * Called for every {"type","object"} event, from inside libcurl: queue it
 * (json_object_get) and act on it in the @after hook of fv_kube_watch_run().
 * Return <0 to end the watch.
 */
typedef int (*fv_kube_event_fn)(void *userdata, const char *type, struct json_object *object);

/*
 * Start watching @path ("/api/v1/persistentvolumes?watch=1&resourceVersion=...").
 * -EINVAL for a path with bytes that do not belong in a URL (a resourceVersion
 * is the server's text), -E2BIG past WATCH_MAX.  A caller that adds several
 * and fails half-way must fv_kube_watch_clear() before it tries again.
 */
int fv_kube_stream_feed(struct fv_kube_stream *s, const char *data, size_t n, fv_kube_event_fn fn,
		     void *userdata);

int fv_kube_watch_add(struct fv_kube *k, const char *path, fv_kube_event_fn fn, void *userdata,
		   unsigned int timeout_s, struct kube_watch **ret);

/* End and free every added watch (a watch set that failed half-way through starting). */
void fv_kube_watch_clear(struct fv_kube *k);

/*
 * fv_kube_watch_run() - run every added watch until one of them ends (server
 * closed, timed out, HTTP error, transport error, or the callback said
 * stop), @after returned <0, or *@stop becomes true.  @after runs after
 * every round of transfers, outside libcurl's callbacks (it may make
 * requests).  When one watch ended, only that one is removed (the others
 * keep streaming) and *@ended is its userdata; otherwise every watch is
 * removed and *@ended is NULL.  Returns 0 when a watch ended cleanly,
 * -ESTALE for HTTP 410, -EACCES for 401 (the token is read again before the
 * next request), -errno otherwise (message in @err).
 */
int fv_kube_watch_run(struct fv_kube *k, volatile int *stop, int (*after)(void *), void *userdata,
		   void **ended, char *err, size_t errlen);

#endif
