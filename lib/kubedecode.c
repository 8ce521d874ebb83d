/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decoders of the API's bodies, with no I/O (lib/kube.c does the requests;
 * tests/fuzz/fuzz-watch.c feeds them arbitrary bytes): one JSON object, a
 * watch stream, a list read item by item.  See fv/kube.h.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fv/kube.h"

#define BODY_MAX (256u << 20)  /* what a list holds besides its items (all of it, unrecognised) */
#define EVENT_MAX (16u << 20)  /* one watch event, one item of a list */
#define JSON_DEPTH 128	       /* managedFields nest deeper than json-c's default 32 */

struct fv_kube_stream {
	json_tokener *tok;
	size_t event_bytes; /* of the event being parsed */
};

struct dbuf {
	char *p;
	size_t n, cap;
};

json_object *fv_kube_parse(const char *s, size_t n)
{
	json_tokener *tok = json_tokener_new_ex(JSON_DEPTH);
	json_object *o;

	if (!tok)
		return NULL;
	o = json_tokener_parse_ex(tok, s, (int)n);
	/* every answer of the API is an object (the resource, a list, a Status) */
	if (o && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	if (o && json_tokener_get_parse_end(tok) < n && strspn(s + json_tokener_get_parse_end(tok), " \r\n\t") !=
	    n - json_tokener_get_parse_end(tok)) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

/*
 * A list body is split while it streams in: the bytes of each element of the
 * top-level "items" array go to @item and are parsed and handed over as soon
 * as the element is complete; every other byte (the list's kind, metadata, or
 * a whole Status) goes to @rest with the array left empty.  Only strings and
 * nesting are tracked; json-c parses each piece and decides what is valid.
 */
struct fv_kube_listdec {
	struct dbuf rest, item;
	fv_kube_item_fn fn;
	void *userdata;
	unsigned int depth;
	bool in_str, esc, in_items, items_seen;
	int r; /* the first error: nothing more is taken */
};

static int buf_put(struct dbuf *b, char c, size_t max)
{
	if (b->n + 2 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 4096;
		char *p;

		if (b->n + 2 > max)
			return -EBADMSG;
		if (cap > max)
			cap = max;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	b->p[b->n++] = c;
	b->p[b->n] = '\0';
	return 0;
}

/* Does @b end with the member name "items" and its colon (the array follows)? */
static bool after_items_key(const struct dbuf *b)
{
	size_t n = b->n;

	while (n && strchr(" \r\n\t", b->p[n - 1]))
		n--;
	if (!n || b->p[n - 1] != ':')
		return false;
	n--;
	while (n && strchr(" \r\n\t", b->p[n - 1]))
		n--;
	return n >= 7 && !memcmp(b->p + n - 7, "\"items\"", 7) && (n == 7 || b->p[n - 8] != '\\');
}

/* The element in d->item is complete: parse it and hand it over. */
static int item_done(struct fv_kube_listdec *d)
{
	json_object *o;
	int r = 0;

	if (strspn(d->item.p ? d->item.p : "", " \r\n\t") == d->item.n) {
		d->item.n = 0;
		return 0;
	}
	o = fv_kube_parse(d->item.p, d->item.n);
	d->item.n = 0;
	if (!o)
		return -EBADMSG; /* not JSON, or an element that is no object */
	r = d->fn(d->userdata, o);
	json_object_put(o);
	return r;
}

struct fv_kube_listdec *fv_kube_listdec_new(fv_kube_item_fn fn, void *userdata)
{
	struct fv_kube_listdec *d = calloc(1, sizeof(*d));

	if (d) {
		d->fn = fn;
		d->userdata = userdata;
	}
	return d;
}

void fv_kube_listdec_free(struct fv_kube_listdec *d)
{
	if (!d)
		return;
	free(d->rest.p);
	free(d->item.p);
	free(d);
}

int fv_kube_listdec_feed(struct fv_kube_listdec *d, const char *data, size_t n)
{
	for (size_t i = 0; i < n && d->r == 0; i++) {
		char c = data[i];
		bool to_item = d->in_items && d->depth >= 2;

		if (d->in_str) {
			if (d->esc)
				d->esc = false;
			else if (c == '\\')
				d->esc = true;
			else if (c == '"')
				d->in_str = false;
		} else if (c == '"') {
			d->in_str = true;
		} else if (c == '{' || c == '[') {
			if (d->depth >= JSON_DEPTH + 2) {
				d->r = -EBADMSG;
				break;
			}
			if (c == '[' && d->depth == 1 && !d->items_seen && after_items_key(&d->rest)) {
				d->in_items = d->items_seen = true;
				d->depth++;
				d->r = buf_put(&d->rest, c, BODY_MAX);
				continue;
			}
			d->depth++;
		} else if (c == '}' || c == ']') {
			if (!d->depth) {
				d->r = -EBADMSG;
				break;
			}
			d->depth--;
			if (d->in_items && d->depth == 1) {
				/* the end of the items: the last element, then back to the rest */
				d->in_items = false;
				d->r = item_done(d);
				if (d->r == 0)
					d->r = buf_put(&d->rest, c, BODY_MAX);
				continue;
			}
		} else if (c == ',' && d->in_items && d->depth == 2) {
			d->r = item_done(d);
			continue;
		}
		d->r = to_item ? buf_put(&d->item, c, EVENT_MAX) : buf_put(&d->rest, c, BODY_MAX);
	}
	return d->r;
}

/* Hand over the items of a list whose "items" the byte scan did not recognise (escaped name). */
static json_object *items_left(struct fv_kube_listdec *d, json_object *o)
{
	json_object *items;

	if (!o || !json_object_object_get_ex(o, "items", &items) ||
	    !json_object_is_type(items, json_type_array))
		return o;
	for (size_t i = 0; d->r == 0 && i < json_object_array_length(items); i++) {
		json_object *it = json_object_array_get_idx(items, i);

		if (json_object_is_type(it, json_type_object))
			d->r = d->fn(d->userdata, it);
	}
	json_object_object_add(o, "items", json_object_new_array());
	return o;
}

json_object *fv_kube_listdec_finish(struct fv_kube_listdec *d)
{
	json_object *o;

	if (d->r < 0 || d->in_str || d->in_items || d->depth || !d->rest.n)
		return NULL;
	o = fv_kube_parse(d->rest.p, d->rest.n);
	if (!d->items_seen)
		o = items_left(d, o);
	if (d->r < 0) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

int fv_kube_listdec_error(const struct fv_kube_listdec *d)
{
	return d->r;
}

struct fv_kube_stream *fv_kube_stream_new(void)
{
	struct fv_kube_stream *s = calloc(1, sizeof(*s));

	if (s && !(s->tok = json_tokener_new_ex(JSON_DEPTH))) {
		free(s);
		s = NULL;
	}
	return s;
}

void fv_kube_stream_free(struct fv_kube_stream *s)
{
	if (!s)
		return;
	json_tokener_free(s->tok);
	free(s);
}

/* Watch bodies are a stream of JSON objects, one per event (newline separated). */
int fv_kube_stream_feed(struct fv_kube_stream *s, const char *data, size_t n, fv_kube_event_fn fn,
		     void *userdata)
{
	size_t off = 0;

	while (off < n) {
		json_object *ev, *type, *obj;
		size_t end;
		int r;

		/* skip the separators json-c would otherwise count as a parse start */
		if (s->event_bytes == 0) {
			while (off < n && strchr(" \r\n\t", data[off]))
				off++;
			if (off >= n)
				break;
		}
		ev = json_tokener_parse_ex(s->tok, data + off, (int)(n - off));
		end = json_tokener_get_parse_end(s->tok);
		if (!ev) {
			/* garbage (a JSON null too): end the watch, the caller re-lists */
			if (json_tokener_get_error(s->tok) != json_tokener_continue)
				return -EBADMSG;
			s->event_bytes += n - off;
			if (s->event_bytes > EVENT_MAX)
				return -EBADMSG;
			break;
		}
		off += end;
		s->event_bytes = 0;
		json_tokener_reset(s->tok);
		/* an event that is not {"type": "...", "object": {...}} is skipped */
		r = json_object_object_get_ex(ev, "type", &type) &&
				    json_object_is_type(type, json_type_string) &&
				    json_object_object_get_ex(ev, "object", &obj) &&
				    json_object_is_type(obj, json_type_object) ?
			    fn(userdata, json_object_get_string(type), obj) :
			    0;
		json_object_put(ev);
		if (r < 0)
			return r;
	}
	return 0;
}
