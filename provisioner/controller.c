/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The controller: see controller.h.
 *
 * A pending claim of a class whose provisioner is one of our backends gets
 * the backend's asset and one PV "pvc-<claim uid>".  A Released PV of ours
 * with reclaim policy Delete gets the class's onDelete (archive, delete,
 * retain) from its backend and is then deleted.
 *
 * Restart safety comes from determinism, not from local state: the PV name is
 * a function of the claim, the asset a function of the claim and the class,
 * making an asset that exists is success, and a PV create that finds the PV
 * (409, another replica or an earlier life of this process) is success.
 * Listing, watching and the workers that call these handlers: runner.c.
 * The handlers run on several worker threads at once, never two for one
 * object; what they share (the API client, the event cache) is thread-safe.
 * Storage calls go through childcall.c (a child with a deadline).
 *
 * One file per flow: provision.c (claims), resize.c (a bound claim that
 * grows), reclaim.c (released and deleted PVs); this file holds what they
 * share (controller.h), api.c the request paths.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fv/macro.h"
#include "api.h"
#include "controller.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "store.h"

double fvp_ctl_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const struct fvp_backend *fvp_ctl_backend(const char *name)
{
	for (size_t i = 0; name && fvp_backends[i]; i++)
		if (streq(fvp_backends[i]->name, name) && fvp_backend_enabled(fvp_backends[i]))
			return fvp_backends[i];
	return NULL;
}

/* --- the class -------------------------------------------------------------------------- */

/*
 * GET the StorageClass @name.  Returns 1 with *ret and *ret_b when it exists
 * and names one of our backends, 0 when it is absent or someone else's, <0 on
 * an API error.
 */
int fvp_ctl_get_class(struct fvp_prov *p, const char *name, json_object **ret,
		      const struct fvp_backend **ret_b)
{
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	json_object *sc = NULL;
	const struct fvp_backend *b;
	int st;

	*ret = NULL;
	if (!fv_kube_name_ok(name))
		return 0;
	/* the class watch's copy: only classes of our backends are kept */
	st = fvp_store_class(p->store, name, &sc);
	if (st == 0 || st == -ENOMEM)
		return st;
	if (st == 1)
		goto found;
	fvp_api_path(path, sizeof(path), FVP_API_CLASS, NULL, name, NULL);
	st = fv_kube_request(p->k, "GET", path, NULL, &sc, err, sizeof(err));
	if (st < 0) {
		fvp_log_warning("cannot read StorageClass %s: %s", name, err);
		return st;
	}
	if (st == 404) {
		json_object_put(sc);
		return 0;
	}
	if (st != 200 || !sc) {
		fvp_log_warning("cannot read StorageClass %s: HTTP %d %s", name, st,
			 fv_kube_status_message(sc));
		json_object_put(sc);
		return -EIO;
	}
found:
	b = fvp_ctl_backend(fv_json_str(sc, "provisioner"));
	if (!b) {
		json_object_put(sc);
		return 0;
	}
	*ret = sc;
	if (ret_b)
		*ret_b = b;
	return 1;
}

/* --- writing objects ------------------------------------------------------------------- */

int fvp_finalizer_set(struct fv_kube *k, json_object *obj, const char *fin, bool on,
		      json_object **ret)
{
	json_object *patch, *meta, *f, *nf, *reply = NULL;
	const char *ns = fv_json_str_in(obj, "metadata", "namespace"), *name = fv_json_str_in(obj, "metadata", "name");
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	int st;

	if (ret)
		*ret = NULL;
	if ((ns && !fv_kube_name_ok(ns)) || !fv_kube_name_ok(name))
		return -EINVAL;
	/*
	 * A merge patch of the finalizers alone, with the resourceVersion read as
	 * its precondition: what an update of the whole object did (a concurrent
	 * change is a 409), without sending the object back, which the caches
	 * hold trimmed (fvp_ctl_trim()).
	 */
	f = fv_json_get(fv_json_get(obj, "metadata"), "finalizers");
	if (!fv_json_new_all("ooa", &patch, &meta, &nf))
		return -ENOMEM;
	json_object_object_add(patch, "metadata", meta);
	fv_json_set_str(meta, "resourceVersion", fv_json_str_in(obj, "metadata", "resourceVersion"));
	for (size_t i = 0; f && json_object_is_type(f, json_type_array) &&
			   i < json_object_array_length(f);
	     i++) {
		json_object *v = json_object_array_get_idx(f, i);

		if (!json_object_is_type(v, json_type_string) ||
		    !streq(json_object_get_string(v), fin))
			json_object_array_add(nf, json_object_get(v));
	}
	if (on)
		json_object_array_add(nf, json_object_new_string(fin));
	json_object_object_add(meta, "finalizers", nf);
	fvp_api_path(path, sizeof(path), ns ? FVP_API_PVC : FVP_API_PV, ns, name, NULL);
	st = fv_kube_request(k, "PATCH", path, patch, &reply, err, sizeof(err));
	json_object_put(patch);
	if (st == 200) {
		if (ret)
			*ret = reply;
		else
			json_object_put(reply);
		return 0;
	}
	if (st == 404) {
		json_object_put(reply);
		return 1;
	}
	if (st < 0)
		fvp_log_warning("%s %s%s%s: %s finalizer %s: %s", ns ? "claim" : "PV", ns ? ns : "",
			 ns ? "/" : "", name, on ? "adding the" : "removing the", fin, err);
	else if (st != 409)
		fvp_log_warning("%s %s%s%s: %s finalizer %s: HTTP %d %s", ns ? "claim" : "PV", ns ? ns : "",
			 ns ? "/" : "", name, on ? "adding the" : "removing the", fin, st,
			 fv_kube_status_message(reply));
	json_object_put(reply);
	return st == 409 ? -EAGAIN : -EIO;
}

/*
 * PATCH @path with the merge patch @patch (taken).  Returns the HTTP status
 * or <0; logs what failed as @what.
 */
int fvp_ctl_patch(struct fvp_prov *p, const char *path, json_object *patch, const char *what)
{
	json_object *reply = NULL;
	char err[FV_KUBE_ERR_MAX];
	int st;

	if (!patch)
		return -ENOMEM;
	st = fv_kube_request(p->k, "PATCH", path, patch, &reply, err, sizeof(err));
	json_object_put(patch);
	if (st < 0)
		fvp_log_warning("%s: %s", what, err);
	else if (st != 200)
		fvp_log_warning("%s: HTTP %d %s", what, st, fv_kube_status_message(reply));
	json_object_put(reply);
	return st;
}

json_object *fvp_ctl_merge_patch(const char *a, const char *b, const char *c, const char *v)
{
	json_object *o, *o1, *o2;

	if (!fv_json_new_all("ooo", &o, &o1, &o2))
		return NULL;
	json_object_object_add(o2, c, v ? json_object_new_string(v) : NULL);
	json_object_object_add(o1, b, o2);
	json_object_object_add(o, a, o1);
	return o;
}

/* --- what the caches keep ----------------------------------------------------------------- */

/* Member @key of @from, shared into @to (nothing when absent).  0 or -ENOMEM. */
static int keep(json_object *to, json_object *from, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(from, key, &v))
		return 0;
	return json_object_object_add(to, key, json_object_get(v)) < 0 ? -ENOMEM : 0;
}

static json_object *trim_meta(json_object *meta, const char *const *keys)
{
	json_object *m = json_object_new_object();

	for (size_t i = 0; m && keys[i]; i++)
		if (keep(m, meta, keys[i]) < 0) {
			json_object_put(m);
			return NULL;
		}
	return m;
}

/* Is claim @pvc inert: nothing any handler does with it, changed or deleted (fvp_ctl_trim())? */
static bool claim_inert(const struct fvp_prov *p, json_object *pvc)
{
	json_object *meta = fv_json_get(pvc, "metadata"), *ann = fv_json_get(meta, "annotations"),
		    *spec = fv_json_get(pvc, "spec");
	const char *prov = fv_json_str(ann, FVP_ANN_SP) ?: fv_json_str(ann, FVP_ANN_SP_BETA),
		   *vol = fv_json_str(spec, "volumeName"), *phase = fv_json_str_in(pvc, "status", "phase"),
		   *uid = fv_json_str(meta, "uid");
	bool pending = (!phase || streq(phase, "Pending")) && !(vol && *vol);
	char pv_name[FVP_PV_NAME_MAX];
	uint64_t req, cap;

	if (fv_json_array_has(fv_json_get(meta, "finalizers"), FVP_CLAIM_FINALIZER))
		return false;
	/* bound, asking for more than it has: the resize flow looks at its PV */
	if (vol && *vol &&
	    fv_json_quantity(fv_json_get(fv_json_get(spec, "resources"), "requests"), "storage", &req) == 0 &&
	    fv_json_quantity(fv_json_get(fv_json_get(pvc, "status"), "capacity"), "storage", &cap) == 0 &&
	    req > cap)
		return false;
	if (!prov || !fvp_ctl_backend(prov))
		return true;
	/*
	 * Ours: a pending claim is provisioned; one past that is left alone, and
	 * its deletion too, as long as its PV exists (without it, the deletion
	 * removes an unused asset).
	 */
	if (pending || !uid ||
	    (size_t)snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid) >= sizeof(pv_name))
		return false;
	return fvp_store_pv_exists(p->store, pv_name) == 1;
}

/* Is PV @pv inert (fvp_ctl_trim())?  What fvp_ctl_pv_changed() and _deleted() act on, negated. */
static bool pv_inert(const struct fvp_prov *p, json_object *pv)
{
	json_object *meta = fv_json_get(pv, "metadata");
	const char *phase = fv_json_str_in(pv, "status", "phase"),
		   *policy = fv_json_str_in(pv, "spec", "persistentVolumeReclaimPolicy");
	bool del = policy && streq(policy, "Delete"),
	     fin = fv_json_array_has(fv_json_get(meta, "finalizers"), FVP_PV_FINALIZER),
	     deleting = fv_json_get(meta, "deletionTimestamp") != NULL;

	if (!fvp_ctl_backend(fv_json_str(fv_json_get(meta, "annotations"), FVP_ANN_PROVISIONED_BY)))
		return true;
	if (p->record_owners || (del && phase && streq(phase, "Released")))
		return false;
	if (deleting && !fin)
		return true;
	/* Retain keeps no finalizer; Delete, not Released, keeps one */
	return del ? deleting || fin : !fin;
}

int fvp_ctl_trim(const struct fvp_prov *p, bool is_pv, json_object *obj, json_object **ret)
{
	static const char *const meta_keys[] = { "name", "namespace", "uid", "resourceVersion",
						 "deletionTimestamp", "finalizers", "labels",
						 "annotations", NULL };
	json_object *t, *m;

	*ret = NULL;
	if (is_pv ? pv_inert(p, obj) : claim_inert(p, obj))
		return 0;
	t = json_object_new_object();
	m = trim_meta(fv_json_get(obj, "metadata"), meta_keys);
	if (!t || !m || json_object_object_add(t, "metadata", m) < 0) {
		json_object_put(t);
		json_object_put(m);
		return -ENOMEM;
	}
	if (keep(t, obj, "apiVersion") < 0 || keep(t, obj, "kind") < 0 || keep(t, obj, "spec") < 0 ||
	    keep(t, obj, "status") < 0) {
		json_object_put(t);
		return -ENOMEM;
	}
	*ret = t;
	return 1;
}

json_object *fvp_ctl_trim_class(json_object *sc)
{
	static const char *const meta_keys[] = { "name", "uid", "resourceVersion", NULL };
	json_object *t, *m;

	if (!json_object_is_type(sc, json_type_object))
		return NULL;
	t = json_object_new_object();
	m = trim_meta(fv_json_get(sc, "metadata"), meta_keys);
	if (!t || !m || json_object_object_add(t, "metadata", m) < 0) {
		json_object_put(t);
		json_object_put(m);
		return NULL;
	}
	json_object_object_foreach(sc, key, val) {
		if (!streq(key, "metadata") &&
		    json_object_object_add(t, key, json_object_get(val)) < 0) {
			json_object_put(t);
			return NULL;
		}
	}
	return t;
}
