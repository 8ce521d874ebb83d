/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the watch-stream decoder (lib/kubedecode.c,
 * fv_kube_stream_feed()), fed the input cut into pieces as libcurl may hand
 * them over (the first byte sets the piece size), each event then read as
 * the runner reads it (its key, its resourceVersion, an ERROR's code); then
 * the same input, in the same pieces, as a list body (fv_kube_listdec: every
 * element of "items" handed over as it is read, the rest parsed at the end).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fv/kubejson.h"
#include "fv/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_event(void *ud, const char *type, json_object *obj)
{
	size_t *n = ud;
	json_object *code = fv_json_get(obj, "code");
	char key[600];

	/* runner.c's on_event(): what it reads of every event */
	snprintf(key, sizeof(key), "%s/%s %s %d %s", fv_json_str_in(obj, "metadata", "namespace") ?: "",
		 fv_json_str_in(obj, "metadata", "name") ?: "", fv_json_str_in(obj, "metadata", "resourceVersion") ?: "",
		 code ? json_object_get_int(code) : 0, fv_kube_status_message(obj));
	(*n)++;
	/* a callback may end the watch: an ERROR event does */
	return strcmp(type, "ERROR") ? 0 : -1;
}

/* runner.c's list_item(): what it reads of every item of a list */
static int on_item(void *ud, json_object *obj)
{
	return on_event(ud, "ADDED", obj);
}

/* The same input as a list body (fv_kube_list()'s decoder), in the same pieces. */
static void as_list(const uint8_t *data, size_t size, size_t piece)
{
	struct fv_kube_listdec *d = fv_kube_listdec_new(on_item, &(size_t){ 0 });
	json_object *rest;

	if (!d)
		return;
	for (size_t off = 0; off < size; off += piece)
		if (fv_kube_listdec_feed(d, (const char *)data + off,
					  size - off < piece ? size - off : piece) < 0)
			break;
	rest = fv_kube_listdec_finish(d);
	(void)fv_json_str_in(rest, "metadata", "continue");
	json_object_put(rest);
	fv_kube_listdec_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fv_kube_stream *s = fv_kube_stream_new();
	size_t piece, n = 0;

	if (!s || !size) {
		fv_kube_stream_free(s);
		return 0;
	}
	piece = data[0] ? data[0] : size;
	data++, size--;
	for (size_t off = 0; off < size; off += piece)
		if (fv_kube_stream_feed(s, (const char *)data + off, size - off < piece ? size - off : piece,
				     on_event, &n) < 0)
			break;
	fv_kube_stream_free(s);
	as_list(data, size, piece);
	return 0;
}
