/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The options JSON (contract §2): a flat object of string values, compact,
 * Go-escaped (\u0026 ...), keys in any order.  Parsed once here.  Values of
 * keys we do not know are ignored whatever their type; a key we read must
 * hold a string.  Nothing here logs values: secrets live in this object.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "fv/util.h"

#define OPTS_MAX (1024 * 1024)
#define KEY_SHOWN 64 /* bytes of a key quoted in a message */

/*
 * Values are exactly what the JSON says.  A string with a
 * NUL (\u0000 - argv cannot carry a raw one) would be read by every C
 * consumer up to the NUL only: "ok.img\u0000../x" as "ok.img".  Such a
 * string is refused for every key, known or not, nested or not, and in a
 * key itself, before any option is read.
 */

/* Copy @key into @buf for a message: control bytes as \xNN, at most KEY_SHOWN bytes. */
static const char *shown(const char *key, size_t len, char *buf, size_t size)
{
	size_t n = 0;

	for (size_t i = 0; i < len && i < KEY_SHOWN && n + 5 < size; i++) {
		unsigned char c = (unsigned char)key[i];

		if (c < 0x20 || c == 0x7f)
			n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
		else
			buf[n++] = (char)c;
	}
	buf[n] = '\0';
	return buf;
}

/* Does any string in @v (recursively) hold a NUL? */
static bool holds_nul(json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_string:
		return strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v);
	case json_type_array:
		for (size_t i = 0; i < json_object_array_length(v); i++)
			if (holds_nul(json_object_array_get_idx(v, i)))
				return true;
		return false;
	case json_type_object: {
		json_object_object_foreach(v, k, x) {
			(void)k;
			if (holds_nul(x))
				return true;
		}
		return false;
	}
	default:
		return false;
	}
}

/*
 * The first string literal of the (valid) JSON text @json that holds the
 * escape \u0000 and is a key (followed by ':'), as its raw text; NULL when
 * none.  json-c cuts keys at a NUL, so keys are checked on the text.
 */
static const char *nul_key_literal(const char *json, size_t *ret_len)
{
	const char *p = json, *start = NULL;
	bool nul = false;

	for (; *p; p++) {
		if (!start) {
			if (*p == '"') {
				start = p + 1;
				nul = false;
			}
			continue;
		}
		if (*p == '\\') {
			if (p[1] == 'u' && !strncmp(p + 2, "0000", 4))
				nul = true;
			if (p[1])
				p++;
			continue;
		}
		if (*p != '"')
			continue;
		if (nul) {
			const char *q = p + 1;

			while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
				q++;
			if (*q == ':') {
				*ret_len = (size_t)(p - start);
				return start;
			}
		}
		start = NULL;
	}
	return NULL;
}

static int refuse_nul(struct fv_ctx *cx, const char *json, json_object *obj)
{
	char buf[KEY_SHOWN * 4 + 8];
	const char *lit;
	size_t len = 0;

	if (!strstr(json, "\\u0000"))
		return 0; /* cheap: no escape, no NUL (a false hit is sorted out below) */
	lit = nul_key_literal(json, &len);
	if (lit)
		return fv_fail(cx, -FV_ERR_BADOPT, "an option key holds a NUL character (\\u0000): "
			       "\"%s\"", shown(lit, len, buf, sizeof(buf)));
	json_object_object_foreach(obj, key, v) {
		if (holds_nul(v))
			return fv_fail(cx, -FV_ERR_BADOPT, "option '%s' holds a NUL character "
				       "(\\u0000)", shown(key, strlen(key), buf, sizeof(buf)));
	}
	return 0;
}

/* Borrow the value of @key: 0 found (may be ""), 1 absent, <0 not a string. */
static int get_str(struct fv_ctx *cx, const struct fv_opts *o, const char *key, const char **ret)
{
	for (size_t i = o->n; i-- > 0;) {
		if (!streq(o->pairs[i].key, key))
			continue;
		if (!o->pairs[i].value)
			return fv_fail(cx, -FV_ERR_BADOPT, "option '%s' must be a string", key);
		*ret = o->pairs[i].value;
		return 0;
	}
	return 1;
}

int fv_opt(struct fv_ctx *cx, const struct fv_opts *o, const char *key, const char **ret)
{
	const char *v = NULL;
	int r = get_str(cx, o, key, &v);

	if (r != 0)
		return r;
	if (!*v)
		return 1;
	*ret = v;
	return 0;
}

int fv_opt_required(struct fv_ctx *cx, const struct fv_opts *o, const char *key, const char **ret)
{
	int r = fv_opt(cx, o, key, ret);

	if (r > 0)
		return fv_fail(cx, -FV_ERR_BADOPT, "option '%s' is required", key);
	return r;
}

/* The kubernetes.io keys the op layer knows, into @o's typed fields. */
static int read_typed(struct fv_ctx *cx, struct fv_opts *o)
{
	const char *v;
	int r;

	r = fv_opt(cx, o, "kubernetes.io/fsType", &o->fstype);
	if (r < 0)
		return r;
	r = fv_opt(cx, o, "kubernetes.io/pvOrVolumeName", &o->volume);
	if (r < 0)
		return r;
	r = fv_opt(cx, o, "kubernetes.io/pod.uid", &o->pod_uid);
	if (r < 0)
		return r;
	r = fv_opt(cx, o, "kubernetes.io/readwrite", &v);
	if (r < 0)
		return r;
	if (r == 0) {
		if (streq(v, "ro"))
			o->readonly = true;
		else if (!streq(v, "rw"))
			return fv_fail(cx, -FV_ERR_BADOPT,
				       "option 'kubernetes.io/readwrite' must be 'ro' or 'rw', not '%s'",
				       v);
	}
	r = fv_opt(cx, o, "kubernetes.io/mounterArgs.FsGroup", &v);
	if (r < 0)
		return r;
	if (r == 0) {
		uint64_t g;

		if (fv_parse_u64(v, &g) < 0 || g > UINT32_MAX - 1)
			return fv_fail(cx, -FV_ERR_BADOPT, "option 'kubernetes.io/mounterArgs.FsGroup' "
				       "is not a group id: '%s'", v);
		o->has_fsgroup = true;
		o->fsgroup = (uint32_t)g;
	}
	return 0;
}

int fv_opts_set(struct fv_ctx *cx, const struct fv_opt_pair *pairs, size_t n, struct fv_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->pairs = pairs;
	o->n = n;
	return read_typed(cx, o);
}

/* The pairs of the JSON object @obj (a null value is an absent key), into @o. */
static int take_pairs(json_object *obj, struct fv_opts *o)
{
	size_t n = 0;

	json_object_object_foreach(obj, k, v) {
		(void)k;
		n += !json_object_is_type(v, json_type_null);
	}
	o->owned = calloc(n ? n : 1, sizeof(*o->owned));
	if (!o->owned)
		return -ENOMEM;
	n = 0;
	json_object_object_foreach(obj, key, val) {
		if (json_object_is_type(val, json_type_null))
			continue;
		o->owned[n].key = key;
		o->owned[n++].value = json_object_is_type(val, json_type_string) ?
					      json_object_get_string(val) : NULL;
	}
	o->pairs = o->owned;
	o->n = n;
	return 0;
}

int fv_opts_from_object(struct fv_ctx *cx, json_object *obj, struct fv_opts *o)
{
	int r;

	memset(o, 0, sizeof(*o));
	if (!json_object_is_type(obj, json_type_object))
		return fv_fail(cx, -FV_ERR_BADOPT, "options must be a JSON object");
	o->json = json_object_get(obj);
	r = take_pairs(obj, o);
	if (r == 0)
		r = read_typed(cx, o);
	if (r < 0)
		fv_opts_done(o);
	return r;
}

int fv_opts_parse(struct fv_ctx *cx, const char *json, struct fv_opts *o)
{
	struct json_tokener *tok;
	json_object *obj;
	size_t len = strlen(json);
	int r;

	memset(o, 0, sizeof(*o));
	if (len > OPTS_MAX)
		return fv_fail(cx, -FV_ERR_BADOPT, "options JSON is larger than %d bytes", OPTS_MAX);
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	obj = json_tokener_parse_ex(tok, json, (int)len);
	if (!obj || json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != len) {
		enum json_tokener_error e = json_tokener_get_error(tok);

		json_object_put(obj);
		json_tokener_free(tok);
		if (e == json_tokener_success || e == json_tokener_continue)
			return fv_fail(cx, -FV_ERR_BADOPT, "options are not one JSON object");
		return fv_fail(cx, -FV_ERR_BADOPT, "options are not valid JSON: %s",
			       json_tokener_error_desc(e));
	}
	json_tokener_free(tok);
	r = json_object_is_type(obj, json_type_object) ? refuse_nul(cx, json, obj) : 0;
	if (r == 0)
		r = fv_opts_from_object(cx, obj, o);
	json_object_put(obj); /* @o holds its own reference */
	return r;
}

void fv_opts_done(struct fv_opts *o)
{
	json_object_put(o->json);
	free(o->owned);
	memset(o, 0, sizeof(*o));
}
