/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small json-c helpers for reading API objects (lib/kubejson.c): a missing member or one of
 * the wrong type reads as NULL, so a chain like fv_json_str_in(pvc, "spec",
 * "volumeName") never needs its own checks.  Nothing here allocates except
 * fv_json_set_str (which adds to @o) and does no I/O; numbers the API writes as
 * strings (quantities) are read by fv_quantity().
 */
#ifndef FV_KUBEJSON_H
#define FV_KUBEJSON_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Member @key of object @o, or NULL. */
json_object *fv_json_get(json_object *o, const char *key);
/*
 * Object member @key of @o, or NULL: what json_object_object_foreach() may be
 * given (it dereferences NULL).  The API server stores no empty map at all, so
 * an absent "parameters" or "data" is an ordinary object, not an error.
 */
json_object *fv_json_obj(json_object *o, const char *key);
/* String member @key of @o, or NULL. */
const char *fv_json_str(json_object *o, const char *key);
/* String member @b of object member @a of @o, or NULL. */
const char *fv_json_str_in(json_object *o, const char *a, const char *b);
/* Add string member @key = @val to @o (nothing when @val is NULL). */
void fv_json_set_str(json_object *o, const char *key, const char *val);
/*
 * fv_quantity() - a Kubernetes quantity ("1", "100m", "1.5Gi", "1e3") in
 * bytes, rounded up to a whole byte as the API's Quantity.Value() does.
 * Returns 0, -EINVAL (not a quantity, or negative), -ERANGE (2^64 bytes or more).
 */
int fv_quantity(const char *s, uint64_t *ret);
/* The quantity in string member @key of @o: as fv_quantity(); -EINVAL when absent. */
int fv_json_quantity(json_object *o, const char *key, uint64_t *ret);
/* Is the string @s an element of the array @arr? */
bool fv_json_array_has(json_object *arr, const char *s);

/*
 * fv_json_new_all() - one new object ('o') or array ('a') per letter of @kinds, each into the
 * json_object ** that follows, in order: true when every one was made; false (out of memory)
 * with every one NULL, none left to free.  What building an API object or a patch starts with.
 */
bool fv_json_new_all(const char *kinds, ...);

/*
 * fv_kube_object_new() - a new API object {"apiVersion": @api_version, "kind": @kind,
 * "metadata": {"name": @name, "namespace": @ns}} (no namespace when @ns is NULL), its metadata
 * in *@meta (may be NULL; the object owns it), for the rest.  NULL when out of memory.
 */
json_object *fv_kube_object_new(const char *api_version, const char *kind, const char *ns,
				const char *name, json_object **meta);

/*
 * fv_kube_query_escape() - append @s to @buf (holding @n bytes of @len) for a query string, every
 * byte but [A-Za-z0-9._-] as %XX.  Returns the new length, or len - 1 once something did not
 * fit: nothing more is appended after a cut.
 */
size_t fv_kube_query_escape(char *buf, size_t len, size_t n, const char *s);

/* API object names we put into URLs: DNS-1123 subdomains (the API guarantees it; we check). */
bool fv_kube_name_ok(const char *s);

/* The current UTC time as RFC 3339 ("2026-01-02T03:04:05Z"). */
void fv_time_rfc3339(char *buf, size_t len);

#endif
