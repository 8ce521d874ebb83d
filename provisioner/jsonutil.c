/* SPDX-License-Identifier: Apache-2.0 */
/* JSON helpers for API objects: see jsonutil.h. */
#include <string.h>
#include <time.h>

#include "fv/macro.h"
#include "jsonutil.h"

json_object *jget(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ?
		       v :
		       NULL;
}

json_object *jobj(json_object *o, const char *key)
{
	json_object *v = jget(o, key);

	return json_object_is_type(v, json_type_object) ? v : NULL;
}

const char *jstr(json_object *o, const char *key)
{
	json_object *v = jget(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

const char *jstr2(json_object *o, const char *a, const char *b)
{
	return jstr(jget(o, a), b);
}

void jset(json_object *o, const char *key, const char *val)
{
	if (val)
		json_object_object_add(o, key, json_object_new_string(val));
}

bool jarray_has(json_object *arr, const char *s)
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

bool safe_name(const char *s)
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

void rfc3339(char *buf, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
