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
#include <string.h>
#include <time.h>

#include "fv/macro.h"
#include "api.h"
#include "controller.h"
#include "jsonutil.h"
#include "kube.h"

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
	char path[FVP_API_PATH_MAX], err[FVP_KUBE_ERR_MAX];
	json_object *sc = NULL;
	const struct fvp_backend *b;
	int st;

	*ret = NULL;
	if (!fvp_safe_name(name))
		return 0;
	fvp_api_path(path, sizeof(path), FVP_API_CLASS, NULL, name, NULL);
	st = fvp_kube_request(p->k, "GET", path, NULL, &sc, err, sizeof(err));
	if (st < 0) {
		fvp_log_info("cannot read StorageClass %s: %s", name, err);
		return st;
	}
	if (st == 404) {
		json_object_put(sc);
		return 0;
	}
	if (st != 200 || !sc) {
		fvp_log_info("cannot read StorageClass %s: HTTP %d %s", name, st,
			 fvp_kube_status_message(sc));
		json_object_put(sc);
		return -EIO;
	}
	b = fvp_ctl_backend(fvp_jstr(sc, "provisioner"));
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

/*
 * Add (@on) or remove finalizer @fin with an update of the whole object
 * (a claim, or a PV when it has no namespace): the resourceVersion in it
 * makes a concurrent change a 409, after which the newer object arrives by
 * the watch and this is tried again.  Returns 0 with the updated object in
 * *ret (may be NULL), 1 when the object is gone, <0.
 */
int fvp_ctl_update_finalizer(struct fvp_prov *p, json_object *obj, const char *fin, bool on,
			     json_object **ret)
{
	json_object *copy = NULL, *meta, *f, *nf, *reply = NULL;
	const char *ns = fvp_jstr2(obj, "metadata", "namespace"), *name = fvp_jstr2(obj, "metadata", "name");
	char path[FVP_API_PATH_MAX], err[FVP_KUBE_ERR_MAX];
	int st;

	if (ret)
		*ret = NULL;
	if ((ns && !fvp_safe_name(ns)) || !fvp_safe_name(name))
		return -EINVAL;
	if (json_object_deep_copy(obj, &copy, NULL) < 0 || !copy)
		return -ENOMEM;
	meta = fvp_jget(copy, "metadata");
	f = fvp_jget(meta, "finalizers");
	nf = json_object_new_array();
	if (!nf) {
		json_object_put(copy);
		return -ENOMEM;
	}
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
	st = fvp_kube_request(p->k, "PUT", path, copy, &reply, err, sizeof(err));
	json_object_put(copy);
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
		fvp_log_info("%s %s%s%s: %s finalizer %s: %s", ns ? "claim" : "PV", ns ? ns : "",
			 ns ? "/" : "", name, on ? "adding the" : "removing the", fin, err);
	else if (st != 409)
		fvp_log_info("%s %s%s%s: %s finalizer %s: HTTP %d %s", ns ? "claim" : "PV", ns ? ns : "",
			 ns ? "/" : "", name, on ? "adding the" : "removing the", fin, st,
			 fvp_kube_status_message(reply));
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
	char err[FVP_KUBE_ERR_MAX];
	int st;

	if (!patch)
		return -ENOMEM;
	st = fvp_kube_request(p->k, "PATCH", path, patch, &reply, err, sizeof(err));
	json_object_put(patch);
	if (st < 0)
		fvp_log_info("%s: %s", what, err);
	else if (st != 200)
		fvp_log_info("%s: HTTP %d %s", what, st, fvp_kube_status_message(reply));
	json_object_put(reply);
	return st;
}

/* {"a":{"b":{"c":v}}} with v a string, or null when @v is NULL */
json_object *fvp_ctl_nest3(const char *a, const char *b, const char *c, const char *v)
{
	json_object *o = json_object_new_object(), *o1 = json_object_new_object(),
		    *o2 = json_object_new_object();

	if (!o || !o1 || !o2) {
		json_object_put(o);
		json_object_put(o1);
		json_object_put(o2);
		return NULL;
	}
	json_object_object_add(o2, c, v ? json_object_new_string(v) : NULL);
	json_object_object_add(o1, b, o2);
	json_object_object_add(o, a, o1);
	return o;
}
