/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small json-c helpers for reading API objects: a missing member or one of
 * the wrong type reads as NULL, so a chain like fvp_jstr2(pvc, "spec",
 * "volumeName") never needs its own checks.  Nothing here allocates except
 * fvp_jset (which adds to @o) and does no I/O; numbers the API writes as
 * strings (quantities) are read by fvp_quantity().
 */
#ifndef FVP_JSONUTIL_H
#define FVP_JSONUTIL_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Member @key of object @o, or NULL. */
json_object *fvp_jget(json_object *o, const char *key);
/*
 * Object member @key of @o, or NULL: what json_object_object_foreach() may be
 * given (it dereferences NULL).  The API server stores no empty map at all, so
 * an absent "parameters" or "data" is an ordinary object, not an error.
 */
json_object *fvp_jobj(json_object *o, const char *key);
/* String member @key of @o, or NULL. */
const char *fvp_jstr(json_object *o, const char *key);
/* String member @b of object member @a of @o, or NULL. */
const char *fvp_jstr2(json_object *o, const char *a, const char *b);
/* Add string member @key = @val to @o (nothing when @val is NULL). */
void fvp_jset(json_object *o, const char *key, const char *val);
/*
 * fvp_quantity() - a Kubernetes quantity ("1", "100m", "1.5Gi", "1e3") in
 * bytes, rounded up to a whole byte as the API's Quantity.Value() does.
 * Returns 0, -EINVAL (not a quantity, or negative), -ERANGE (2^64 bytes or more).
 */
int fvp_quantity(const char *s, uint64_t *ret);
/* The largest volume a provisioner makes: whole MiB that an off_t holds (an image's size). */
#define FVP_SIZE_MAX ((uint64_t)INT64_MAX >> 20 << 20)
/* The quantity in string member @key of @o: as fvp_quantity(); -EINVAL when absent. */
int fvp_jquantity(json_object *o, const char *key, uint64_t *ret);
/* Is the string @s an element of the array @arr? */
bool fvp_jarray_has(json_object *arr, const char *s);

/* API object names we put into URLs: DNS-1123 subdomains (the API guarantees it; we check). */
bool fvp_safe_name(const char *s);

/* The current UTC time as RFC 3339 ("2026-01-02T03:04:05Z"). */
void fvp_rfc3339(char *buf, size_t len);

#endif
