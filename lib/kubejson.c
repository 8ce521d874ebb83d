/* SPDX-License-Identifier: Apache-2.0 */
/* JSON helpers for API objects: see fv/kubejson.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fv/macro.h"
#include "fv/kubejson.h"

json_object *fv_json_get(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ?
		       v :
		       NULL;
}

json_object *fv_json_obj(json_object *o, const char *key)
{
	json_object *v = fv_json_get(o, key);

	return json_object_is_type(v, json_type_object) ? v : NULL;
}

const char *fv_json_str(json_object *o, const char *key)
{
	json_object *v = fv_json_get(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

const char *fv_json_str_in(json_object *o, const char *a, const char *b)
{
	return fv_json_str(fv_json_get(o, a), b);
}

void fv_json_set_str(json_object *o, const char *key, const char *val)
{
	if (val)
		json_object_object_add(o, key, json_object_new_string(val));
}

/*
 * The quantity grammar of Kubernetes (k8s.io/apimachinery resource.Quantity):
 * digits with an optional fraction, then a binary suffix (Ki .. Ei), a
 * decimal one (n u m "" k M G T P E) or an exponent (e3, E-2).  The value in
 * whole bytes is rounded up, as Quantity.Value() does: "100m" is 1 byte.
 * More than 36 significant digits is -ERANGE (no byte count needs them).
 */
static bool digit(char c)
{
	return c >= '0' && c <= '9';
}

int fv_quantity(const char *s, uint64_t *ret)
{
	static const struct {
		const char *sfx;
		unsigned int bin; /* a power of two */
		int e10;	  /* or a power of ten */
	} sfx[] = {
		{ "Ki", 10, 0 }, { "Mi", 20, 0 }, { "Gi", 30, 0 }, { "Ti", 40, 0 }, { "Pi", 50, 0 },
		{ "Ei", 60, 0 }, { "n", 0, -9 },  { "u", 0, -6 },  { "m", 0, -3 },  { "", 0, 0 },
		{ "k", 0, 3 },	 { "M", 0, 6 },	  { "G", 0, 9 },   { "T", 0, 12 },  { "P", 0, 15 },
		{ "E", 0, 18 },
	};
	unsigned __int128 v = 0, q = 1;
	const char *p = s;
	bool digits = false, dot = false;
	int e10 = 0;
	size_t i;

	if (!s || strlen(s) > 64)
		return -EINVAL;
	if (*p == '+')
		p++;
	for (; digit(*p) || (*p == '.' && !dot); p++) {
		if (*p == '.') {
			dot = true;
			continue;
		}
		/* 10^36 < 2^120: room for a binary suffix below 2^128, and far past 2^64 */
		if (v > (unsigned __int128)1e36)
			return -ERANGE;
		v = v * 10 + (unsigned int)(*p - '0');
		e10 -= dot;
		digits = true;
	}
	if (!digits)
		return -EINVAL;
	if ((*p == 'e' || *p == 'E') && (digit(p[1]) || ((p[1] == '-' || p[1] == '+') && digit(p[2])))) {
		char *end;
		long x = strtol(p + 1, &end, 10);

		if (*end || x < -100 || x > 100)
			return -EINVAL;
		e10 += (int)x;
	} else {
		for (i = 0; i < ARRAY_SIZE(sfx) && !streq(p, sfx[i].sfx); i++)
			;
		if (i == ARRAY_SIZE(sfx))
			return -EINVAL;
		if (v > (~(unsigned __int128)0 >> sfx[i].bin))
			return -ERANGE;
		v <<= sfx[i].bin;
		e10 += sfx[i].e10;
	}
	for (; e10 > 0 && v; e10--) {
		if (v > UINT64_MAX)
			return -ERANGE;
		v *= 10;
	}
	for (; e10 < 0 && q <= (unsigned __int128)1e36; e10++)
		q *= 10;
	if (e10 < 0) /* a fraction of a byte smaller than 10^-37: one byte */
		v = v ? 1 : 0;
	else
		v = v / q + (v % q != 0);
	if (v > UINT64_MAX)
		return -ERANGE;
	*ret = (uint64_t)v;
	return 0;
}

int fv_json_quantity(json_object *o, const char *key, uint64_t *ret)
{
	const char *s = fv_json_str(o, key);

	return s ? fv_quantity(s, ret) : -EINVAL;
}

bool fv_json_array_has(json_object *arr, const char *s)
{
	for (size_t i = 0; arr && json_object_is_type(arr, json_type_array) &&
			   i < json_object_array_length(arr);
	     i++) {
		json_object *v = json_object_array_get_idx(arr, i);

		if (json_object_is_type(v, json_type_string) && streq(json_object_get_string(v), s))
			return true;
	}
	return false;
}

bool fv_json_new_all(const char *kinds, ...)
{
	json_object **made[16];
	size_t n = 0;
	bool ok = true;
	va_list ap;

	va_start(ap, kinds);
	for (const char *k = kinds; *k && n < ARRAY_SIZE(made); k++) {
		made[n] = va_arg(ap, json_object **);
		*made[n] = *k == 'a' ? json_object_new_array() : json_object_new_object();
		ok = ok && *made[n];
		n++;
	}
	va_end(ap);
	if (kinds[n])
		ok = false; /* more than it takes: a caller's mistake, nothing made */
	for (size_t i = 0; !ok && i < n; i++) {
		json_object_put(*made[i]);
		*made[i] = NULL;
	}
	return ok;
}

json_object *fv_kube_object_new(const char *api_version, const char *kind, const char *ns,
				const char *name, json_object **meta)
{
	json_object *o, *m;

	if (!fv_json_new_all("oo", &o, &m))
		return NULL;
	fv_json_set_str(o, "apiVersion", api_version);
	fv_json_set_str(o, "kind", kind);
	fv_json_set_str(m, "name", name);
	fv_json_set_str(m, "namespace", ns);
	json_object_object_add(o, "metadata", m);
	if (meta)
		*meta = m;
	return o;
}

size_t fv_kube_query_escape(char *buf, size_t len, size_t n, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';

		if (n + (plain ? 1 : 3) >= len) {
			buf[n] = '\0';
			return len - 1;
		}
		if (plain)
			buf[n++] = (char)c;
		else
			n += (size_t)snprintf(buf + n, len - n, "%%%02X", c);
	}
	buf[n] = '\0';
	return n;
}

bool fv_kube_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n || n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '.'))
			return false;
	return true;
}

void fv_time_rfc3339(char *buf, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
