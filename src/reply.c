/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reply.  kubelet unmarshals the whole combined output into its
 * DriverStatus (contract §1.4): "status" is one of three exact words,
 * "attached" must be a JSON boolean, "capabilities" must never be null.
 * Exit 0 for Success and Not supported, 1 for Failure (§3.2).  Every string
 * is valid UTF-8 (invalid bytes quoted from arguments become U+FFFD).
 */
#include <json-c/json.h>
#include <stdio.h>

#include "internal.h"
#include "fv/util.h"

static const char *const words[] = {
	[FV_SUCCESS] = "Success",
	[FV_FAILURE] = "Failure",
	[FV_NOT_SUPPORTED] = "Not supported",
};

const char *fv_status_word(enum fv_status st)
{
	return words[st];
}

/*
 * Length of the valid UTF-8 sequence at @s (at most @n bytes), or 0 when it
 * is not one; *ret_bad then gets how many bytes form the maximal invalid
 * prefix to replace by one U+FFFD (at least 1).  RFC 3629 section 4: no
 * overlongs, no surrogates, nothing above U+10FFFF.
 */
static size_t utf8_len(const unsigned char *s, size_t n, size_t *ret_bad)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t need, i;

	*ret_bad = 1;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		need = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		need = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		need = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	for (i = 1; i < need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*ret_bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xbf;
	}
	return need;
}

size_t fv_utf8_fix(const char *in, size_t n, char *out, size_t size)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t i = 0, o = 0;

	if (!size)
		return 0;
	while (i < n && s[i]) {
		size_t bad, k = utf8_len(s + i, n - i, &bad);

		if (k) {
			if (o + k >= size)
				break;
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		} else {
			if (o + 3 >= size)
				break;
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i += bad;
		}
	}
	out[o] = '\0';
	return o;
}

/* A valid UTF-8 copy of @s (malloc'ed), or NULL when out of memory. */
static char *utf8_dup(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(3 * n + 1);

	if (out)
		fv_utf8_fix(s, n, out, 3 * n + 1);
	return out;
}

/* Add string @v under @key, made valid UTF-8 first: kubelet reads JSON, JSON is UTF-8. */
static void add_str(json_object *o, const char *key, const char *v)
{
	char *u = utf8_dup(v);

	if (u)
		json_object_object_add(o, key, json_object_new_string(u));
	free(u);
}

static void add_bool(json_object *o, const char *key, bool v)
{
	json_object_object_add(o, key, json_object_new_boolean(v));
}

char *fv_reply_format(const struct fv_reply *r)
{
	json_object *o = json_object_new_object();
	const char *s;
	char *out = NULL;

	if (!o)
		return NULL;
	json_object_object_add(o, "status", json_object_new_string(words[r->status]));
	if (r->message && *r->message)
		add_str(o, "message", r->message);
	if (r->device)
		add_str(o, "device", r->device);
	if (r->has_attached)
		add_bool(o, "attached", r->attached);
	if (r->version)
		json_object_object_add(o, "version", json_object_new_string(r->version));
	if (r->caps) {
		json_object *c = json_object_new_object();

		if (!c)
			goto out;
		add_bool(c, "attach", r->caps->attach);
		add_bool(c, "selinuxRelabel", r->caps->selinux_relabel);
		add_bool(c, "supportsMetrics", r->caps->supports_metrics);
		add_bool(c, "fsGroup", r->caps->fsgroup);
		add_bool(c, "requiresFSResize", r->caps->requires_fs_resize);
		json_object_object_add(o, "capabilities", c);
	}
	s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (s && asprintf(&out, "%s\n", s) < 0)
		out = NULL;
out:
	json_object_put(o);
	return out;
}

/* No printf: init and Not supported run nothing else of it (docs/benchmarks.md). */
size_t fv_reply_fixed(char *buf, size_t size, enum fv_status st, const struct fv_caps *caps)
{
#define B(v) ((v) ? "true" : "false")
	if (caps)
		return fv_join(buf, size, "{\"status\":\"", words[st],
			       "\",\"capabilities\":{\"attach\":", B(caps->attach),
			       ",\"selinuxRelabel\":", B(caps->selinux_relabel),
			       ",\"supportsMetrics\":", B(caps->supports_metrics),
			       ",\"fsGroup\":", B(caps->fsgroup),
			       ",\"requiresFSResize\":", B(caps->requires_fs_resize), "}}\n", NULL);
	return fv_join(buf, size, "{\"status\":\"", words[st], "\"}\n", NULL);
#undef B
}

int fv_reply_write(int fd, const struct fv_reply *r)
{
	static const char oom[] = "{\"status\":\"Failure\",\"message\":\"out of memory\"}\n";
	char *s = fv_reply_format(r);

	if (!s) {
		(void)!write(fd, oom, sizeof(oom) - 1);
		return 1;
	}
	(void)!write(fd, s, strlen(s));
	free(s);
	return r->status == FV_FAILURE ? 1 : 0;
}
