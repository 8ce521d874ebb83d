/* SPDX-License-Identifier: Apache-2.0 */
/*
 * StorageClass parameters, the path pattern, and the PV's flexVolume options.
 *
 * The nfs options (server, share, subPath, nfsVersion, mountOptions, readOnly)
 * are not checked here by a second set of rules: the options object the PV
 * will carry is handed to the nfs driver's own parser (fv/nfs.h,
 * fv_nfs_check_options), so what the provisioner accepts is exactly what
 * the driver will mount, and a refusal carries the driver's message.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fv/ctx.h"
#include "fv/nfs.h"
#include "fv/util.h"
#include "params.h"

#define DEFAULT_PATTERN "${namespace}-${pvc}-${pv}"
#define COMPONENT_MAX 255

int fvp_fail(char *err, size_t len, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return r;
}

/* A JSON string member, or NULL when absent or not a string. */
static const char *str_at(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

const char *fvp_on_delete_name(enum fvp_on_delete d)
{
	return d == FVP_DELETE ? "delete" : d == FVP_RETAIN ? "retain" : "archive";
}

int fvp_on_delete_parse(const char *s, enum fvp_on_delete *ret)
{
	if (streq(s, "archive"))
		*ret = FVP_ARCHIVE;
	else if (streq(s, "delete"))
		*ret = FVP_DELETE;
	else if (streq(s, "retain"))
		*ret = FVP_RETAIN;
	else
		return -EINVAL;
	return 0;
}

/* --- the path pattern -------------------------------------------------------------------- */

/* The value of variable @var (the text between "${" and "}") for @pvc, or NULL (message set). */
static const char *lookup(const char *var, size_t n, json_object *pvc, const char *pv,
			  char *err, size_t errlen)
{
	static const char lab[] = ".PVC.labels.", ann[] = ".PVC.annotations.";
	json_object *meta = NULL, *map = NULL;
	char key[320];
	const char *v;

	if (pvc)
		json_object_object_get_ex(pvc, "metadata", &meta);
#define IS(s) (n == strlen(s) && !strncmp(var, s, n))
	if (IS("namespace") || IS(".PVC.namespace"))
		v = str_at(meta, "namespace");
	else if (IS("pvc") || IS(".PVC.name"))
		v = str_at(meta, "name");
	else if (IS("pv") || IS(".PV.name"))
		v = pv;
	else if ((n > sizeof(lab) - 1 && !strncmp(var, lab, sizeof(lab) - 1)) ||
		 (n > sizeof(ann) - 1 && !strncmp(var, ann, sizeof(ann) - 1))) {
		bool is_lab = var[5] == 'l';
		size_t skip = is_lab ? sizeof(lab) - 1 : sizeof(ann) - 1;

		if (n - skip >= sizeof(key)) {
			fvp_fail(err, errlen, 0, "pathPattern: '${%.*s}' is too long", (int)n, var);
			return NULL;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(n - skip), var + skip);
		if (!pvc)
			return ""; /* syntax check only */
		if (meta)
			json_object_object_get_ex(meta, is_lab ? "labels" : "annotations", &map);
		v = str_at(map, key);
		if (!v) {
			fvp_fail(err, errlen, 0, "pathPattern: the claim has no %s '%s'",
			     is_lab ? "label" : "annotation", key);
			return NULL;
		}
	} else {
		fvp_fail(err, errlen, 0,
		     "pathPattern: unknown variable '${%.*s}' (known: ${namespace} ${pvc} ${pv} "
		     "${.PVC.namespace} ${.PVC.name} ${.PVC.labels.KEY} ${.PVC.annotations.KEY})",
		     (int)n, var);
		return NULL;
	}
#undef IS
	if (!pvc)
		return "";
	if (!v) {
		fvp_fail(err, errlen, 0, "pathPattern: the claim has no '%.*s'", (int)n, var);
		return NULL;
	}
	return v;
}

/* What to change when a claim's values make the path too long (names up to 253 bytes are valid). */
static const char *too_long_hint(json_object *pvc)
{
	return pvc ? " for this claim: give it a shorter name (or namespace, label, annotation), "
		     "or use a class whose pathPattern puts fewer or shorter values in one "
		     "directory name, such as ${namespace}/${pv}" : "";
}

static bool bad_component(const char *c, size_t n)
{
	return !n || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.');
}

/*
 * Expand @pattern into @out.  With @pvc NULL, only the syntax is checked
 * (variables expand to "", so empty components are not checked).
 */
static int expand(const char *pattern, json_object *pvc, const char *pv, char *out, size_t outlen,
		  char *err, size_t errlen)
{
	size_t o = 0, comp = 0; /* comp: bytes in the current component */
	bool comp_var = false;	/* the current component holds a variable */

	if (!*pattern)
		return fvp_fail(err, errlen, -EINVAL, "pathPattern is empty");
	if (pattern[0] == '/')
		return fvp_fail(err, errlen, -EINVAL, "pathPattern must be relative to the share: '%s'",
			    pattern);
	out[0] = '\0';
	for (const char *p = pattern; *p;) {
		const char *v;
		size_t vn;

		if (p[0] == '$') {
			const char *end;

			if (p[1] != '{' || !(end = strchr(p + 2, '}')))
				return fvp_fail(err, errlen, -EINVAL,
					    "pathPattern: '$' must start a '${name}' variable: '%s'",
					    pattern);
			v = lookup(p + 2, (size_t)(end - p - 2), pvc, pv, err, errlen);
			if (!v)
				return -EINVAL;
			vn = strlen(v);
			for (size_t i = 0; i < vn; i++)
				if (!name_char(v[i]))
					return fvp_fail(err, errlen, -EINVAL,
						    "pathPattern: the value of '${%.*s}' may only hold "
						    "letters, digits, '.', '_' and '-': '%s'",
						    (int)(end - p - 2), p + 2, v);
			p = end + 1;
			comp_var = true;
		} else if (p[0] == '/') {
			/* without a claim (the class check), literal components only */
			if ((pvc || !comp_var) && bad_component(out + o - comp, comp))
				return fvp_fail(err, errlen, -EINVAL,
					    "pathPattern: empty, '.' or '..' directory in '%s'",
					    pattern);
			if (!p[1])
				return fvp_fail(err, errlen, -EINVAL,
					    "pathPattern must not end with '/': '%s'", pattern);
			v = "/";
			vn = 1;
			comp = 0;
			comp_var = false;
			p++;
		} else if (name_char(p[0])) {
			v = p;
			vn = 1;
			p++;
		} else {
			return fvp_fail(err, errlen, -EINVAL,
				    "pathPattern may only hold letters, digits, '.', '_', '-', '/' "
				    "and ${...} variables: '%s'",
				    pattern);
		}
		if (o + vn + 1 > outlen || o + vn > FVP_PATH_MAX)
			return fvp_fail(err, errlen, -ENAMETOOLONG,
				    "pathPattern: the path is longer than %d bytes%s", FVP_PATH_MAX,
				    too_long_hint(pvc));
		memcpy(out + o, v, vn);
		o += vn;
		out[o] = '\0';
		if (v[0] != '/')
			comp += vn;
		if (comp > COMPONENT_MAX)
			return fvp_fail(err, errlen, -ENAMETOOLONG,
				    "pathPattern: a directory name is longer than %d bytes%s",
				    COMPONENT_MAX, too_long_hint(pvc));
	}
	if (!pvc && !comp_var && bad_component(out + o - comp, comp))
		return fvp_fail(err, errlen, -EINVAL, "pathPattern: empty, '.' or '..' directory in '%s'",
			    pattern);
	if (pvc && !fvp_check_subpath(out))
		return fvp_fail(err, errlen, -EINVAL, "pathPattern: '%s' gives an empty, '.' or '..' "
			    "directory: '%s'", pattern, out);
	return 0;
}

int fvp_path_expand(const char *pattern, json_object *pvc, const char *pv_name, char *out,
		    size_t outlen, char *err, size_t errlen)
{
	return expand(pattern, pvc, pv_name, out, outlen, err, errlen);
}

bool fvp_check_subpath(const char *p)
{
	size_t n = 0;

	if (!p || !*p || strlen(p) > FVP_PATH_MAX)
		return false;
	for (const char *s = p;; s++) {
		if (*s == '/' || !*s) {
			if (!n || n > COMPONENT_MAX || (n == 1 && s[-1] == '.') ||
			    (n == 2 && s[-1] == '.' && s[-2] == '.'))
				return false;
			if (!*s)
				return true;
			n = 0;
			continue;
		}
		if (!name_char(*s))
			return false;
		n++;
	}
}

/* --- the class ------------------------------------------------------------------------ */

static int parse_mode(const char *s, mode_t *ret)
{
	unsigned int m = 0;
	size_t n = strlen(s);

	if (!n || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -EINVAL;
		m = m * 8 + (unsigned int)(s[i] - '0');
	}
	if (m > 07777)
		return -EINVAL;
	*ret = (mode_t)m;
	return 0;
}

static int parse_id(const char *s, uint32_t *ret)
{
	uint64_t v;

	/* (uid_t)-1 means "unchanged" to chown: never a real id */
	if (fv_parse_u64(s, &v) < 0 || v >= UINT32_MAX)
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

int fvp_pv_options(const struct fvp_class *c, const char *subpath, json_object **ret, char *err,
		   size_t errlen)
{
	struct fv_ctx cx;
	struct fv_opts o;
	json_object *opts = json_object_new_object();
	int r;

	if (!opts)
		return -ENOMEM;
	json_object_object_add(opts, "server", json_object_new_string(c->server ? c->server : ""));
	json_object_object_add(opts, "share", json_object_new_string(c->share ? c->share : ""));
	if (subpath)
		json_object_object_add(opts, "subPath", json_object_new_string(subpath));
	if (c->nfs_version)
		json_object_object_add(opts, "nfsVersion", json_object_new_string(c->nfs_version));
	if (c->mount_options)
		json_object_object_add(opts, "mountOptions",
				       json_object_new_string(c->mount_options));
	/* what kubelet adds for a readOnly flexVolume, so the driver checks it too */
	if (c->read_only)
		json_object_object_add(opts, "kubernetes.io/readwrite",
				       json_object_new_string("ro"));

	/* through the dispatcher's own option parser, then the driver's checks */
	memset(&cx, 0, sizeof(cx));
	r = fv_opts_parse(&cx, json_object_to_json_string_ext(opts, JSON_C_TO_STRING_PLAIN), &o);
	if (r == 0) {
		r = fv_nfs_check_options(&cx, &o);
		fv_opts_done(&o);
	}
	if (r < 0) {
		json_object_put(opts);
		if (r == -ENOMEM)
			return r;
		return fvp_fail(err, errlen, -EINVAL, "%s", cx.message[0] ? cx.message : "invalid nfs options");
	}
	json_object_object_del(opts, "kubernetes.io/readwrite");
	*ret = opts;
	return 0;
}

static const char *const known[] = {
	"server", "share", "pathPattern", "onDelete", "mode", "uid", "gid",
	"nfsVersion", "mountOptions", "readOnly", "adoptExisting", "allowUnscopedClaimValues",
};

/* "true" or "false" (absent: false).  Returns 0 or -EINVAL with a message. */
static int parse_bool(json_object *params, const char *key, bool *ret, char *err, size_t errlen)
{
	const char *v = str_at(params, key);

	*ret = false;
	if (!v || streq(v, "false"))
		return 0;
	if (streq(v, "true")) {
		*ret = true;
		return 0;
	}
	return fvp_fail(err, errlen, -EINVAL, "parameter '%s' must be true or false: '%s'", key, v);
}

/*
 * A label or annotation is the claim author's to choose: two authors in two
 * namespaces could pick values that make one path.  With the namespace as
 * the first directory, such paths stay inside the author's own namespace
 * (where a clash is then refused by the owner record).
 */
static bool claim_values_scoped(const char *pattern)
{
	static const char *const ns[] = { "${namespace}/", "${.PVC.namespace}/" };

	if (!strstr(pattern, "${.PVC.labels.") && !strstr(pattern, "${.PVC.annotations."))
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(ns); i++)
		if (!strncmp(pattern, ns[i], strlen(ns[i])))
			return true;
	return false;
}

int fvp_class_parse(json_object *sc, struct fvp_class *c, char *err, size_t errlen)
{
	json_object *params = NULL, *meta = NULL, *opts = NULL;
	char path[FVP_PATH_MAX + 1];
	const char *v;
	uint32_t id;
	int r;

	memset(c, 0, sizeof(*c));
	c->path_pattern = DEFAULT_PATTERN;
	c->mode = 0777;
	c->reclaim_policy = "Delete";
	if (json_object_object_get_ex(sc, "metadata", &meta))
		c->name = str_at(meta, "name");

	if (json_object_object_get_ex(sc, "parameters", &params) &&
	    !json_object_is_type(params, json_type_object) && !json_object_is_type(params, json_type_null))
		return fvp_fail(err, errlen, -EINVAL, "class parameters are not an object");
	if (params && json_object_is_type(params, json_type_object)) {
		json_object_object_foreach(params, key, val)
		{
			bool ok = false;

			for (size_t i = 0; i < ARRAY_SIZE(known); i++)
				ok = ok || streq(key, known[i]);
			if (!ok)
				return fvp_fail(err, errlen, -EINVAL,
					    "unknown parameter '%s' (known: server, share, pathPattern, "
					    "onDelete, mode, uid, gid, nfsVersion, mountOptions, readOnly, "
					    "adoptExisting, allowUnscopedClaimValues)",
					    key);
			if (!json_object_is_type(val, json_type_string))
				return fvp_fail(err, errlen, -EINVAL, "parameter '%s' is not a string", key);
		}
	} else {
		params = NULL;
	}

	c->server = str_at(params, "server");
	c->share = str_at(params, "share");
	if (!c->server || !*c->server)
		return fvp_fail(err, errlen, -EINVAL, "parameter 'server' is required");
	if (!c->share || !*c->share)
		return fvp_fail(err, errlen, -EINVAL, "parameter 'share' is required");
	if ((v = str_at(params, "pathPattern")) && *v)
		c->path_pattern = v;
	r = expand(c->path_pattern, NULL, NULL, path, sizeof(path), err, errlen);
	if (r < 0)
		return r;
	r = parse_bool(params, "allowUnscopedClaimValues", &c->allow_unscoped, err, errlen);
	if (r == 0)
		r = parse_bool(params, "adoptExisting", &c->adopt_existing, err, errlen);
	if (r < 0)
		return r;
	if (!c->allow_unscoped && !claim_values_scoped(c->path_pattern))
		return fvp_fail(err, errlen, -EINVAL,
				 "pathPattern '%s' uses claim labels or annotations but does not start "
				 "with the namespace ('${namespace}/...'): claims in two namespaces could "
				 "get one directory (allowUnscopedClaimValues: \"true\" accepts it)",
				 c->path_pattern);
	if ((v = str_at(params, "onDelete")) && fvp_on_delete_parse(v, &c->on_delete) < 0)
		return fvp_fail(err, errlen, -EINVAL,
			    "parameter 'onDelete' must be archive, delete or retain: '%s'", v);
	if ((v = str_at(params, "mode")) && parse_mode(v, &c->mode) < 0)
		return fvp_fail(err, errlen, -EINVAL,
			    "parameter 'mode' must be an octal mode from 0 to 7777: '%s'", v);
	if ((v = str_at(params, "uid"))) {
		if (parse_id(v, &id) < 0)
			return fvp_fail(err, errlen, -EINVAL,
				    "parameter 'uid' must be a number from 0 to 4294967294: '%s'", v);
		c->has_uid = true;
		c->uid = id;
	}
	if ((v = str_at(params, "gid"))) {
		if (parse_id(v, &id) < 0)
			return fvp_fail(err, errlen, -EINVAL,
				    "parameter 'gid' must be a number from 0 to 4294967294: '%s'", v);
		c->has_gid = true;
		c->gid = id;
	}
	if ((v = str_at(params, "readOnly"))) {
		if (streq(v, "true"))
			c->read_only = true;
		else if (!streq(v, "false"))
			return fvp_fail(err, errlen, -EINVAL,
				    "parameter 'readOnly' must be true or false: '%s'", v);
	}
	if ((v = str_at(params, "nfsVersion")) && *v)
		c->nfs_version = v;
	if ((v = str_at(params, "mountOptions")) && *v)
		c->mount_options = v;
	if ((v = str_at(sc, "reclaimPolicy"))) {
		if (!streq(v, "Delete") && !streq(v, "Retain"))
			return fvp_fail(err, errlen, -EINVAL,
				    "reclaimPolicy must be Delete or Retain: '%s'", v);
		c->reclaim_policy = v;
	}
	/* the nfs options without a subPath: the driver's checks, once per class */
	r = fvp_pv_options(c, NULL, &opts, err, errlen);
	json_object_put(opts);
	return r;
}
