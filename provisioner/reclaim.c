/* SPDX-License-Identifier: Apache-2.0 */
/* Reclaiming: a Released PV of ours with policy Delete, and one deleted without us. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fv/macro.h"
#include "api.h"
#include "childcall.h"
#include "controller.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "metrics.h"

/* An onDelete value (archive, delete, retain): a longer one, cut, is still refused. */
#define ON_DELETE_MAX 32

static bool has_pv_finalizer(json_object *pv)
{
	return fv_json_array_has(fv_json_get(fv_json_get(pv, "metadata"), "finalizers"), FVP_PV_FINALIZER);
}

/*
 * The onDelete for @pv: the one recorded on it at provisioning (a class
 * re-created since must not turn retain into delete); for a PV without the
 * record, its class's as it is now; NULL: the backend's default.
 */
static int pv_on_delete(struct fvp_prov *p, json_object *pv, char *buf, size_t len, const char **ret)
{
	json_object *sc = NULL;
	const char *od, *cls;
	int r;

	od = fv_json_str(fv_json_get(fv_json_get(pv, "metadata"), "annotations"), FVP_ANN_ON_DELETE);
	*ret = NULL;
	if (od) {
		snprintf(buf, len, "%s", od);
		*ret = buf;
		return 0;
	}
	cls = fv_json_str_in(pv, "spec", "storageClassName");
	r = cls && *cls ? fvp_ctl_get_class(p, cls, &sc, NULL) : 0;
	if (r < 0)
		return r;
	od = fv_json_str(fv_json_get(sc, "parameters"), "onDelete");
	if (od) {
		snprintf(buf, len, "%s", od);
		*ret = buf;
	}
	json_object_put(sc);
	return 0;
}

/* DELETE PV @name, only while it is the one with @uid (never one re-created meanwhile). */
static int delete_pv(struct fvp_prov *p, const char *name, const char *uid, json_object **ret)
{
	json_object *reply = NULL;
	char err[FV_KUBE_ERR_MAX], path[FVP_API_PATH_MAX];
	int st;

	*ret = NULL;
	fvp_api_path(path, sizeof(path), FVP_API_PV, NULL, name, NULL);
	st = fv_kube_delete_uid(p->k, path, uid, &reply, err, sizeof(err));
	if (st == 200 || st == 202) {
		fvp_log_info("PV %s deleted", name);
		*ret = reply;
		return 0;
	}
	if (st == 404) {
		fvp_log_info("PV %s was deleted already", name);
		json_object_put(reply);
		return 1;
	}
	if (st == 409) {
		/* the uid precondition failed: a new PV of that name is not ours to delete */
		fvp_log_warning("PV %s: re-created meanwhile (uid differs): not deleted", name);
		json_object_put(reply);
		return 1;
	}
	if (st < 0)
		fvp_log_warning("PV %s: delete failed: %s", name, err);
	else
		fvp_log_warning("PV %s: delete failed: HTTP %d %s", name, st, fv_kube_status_message(reply));
	json_object_put(reply);
	return st < 0 ? st : -EIO;
}

/*
 * The hostname a PV is pinned to (nodeAffinity
 * required.nodeSelectorTerms[0].matchExpressions[0] on kubernetes.io/hostname,
 * as a node-local backend writes it), or NULL.
 */
static const char *pv_hostname(json_object *pv)
{
	json_object *t = fv_json_get(fv_json_get(fv_json_get(fv_json_get(pv, "spec"), "nodeAffinity"), "required"),
			      "nodeSelectorTerms"), *e, *v;

	t = t && json_object_is_type(t, json_type_array) ? json_object_array_get_idx(t, 0) : NULL;
	e = fv_json_get(t, "matchExpressions");
	e = e && json_object_is_type(e, json_type_array) ? json_object_array_get_idx(e, 0) : NULL;
	if (!fv_json_str(e, "key") || !streq(fv_json_str(e, "key"), "kubernetes.io/hostname"))
		return NULL;
	v = fv_json_get(e, "values");
	v = v && json_object_is_type(v, json_type_array) ? json_object_array_get_idx(v, 0) : NULL;
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/*
 * A released PV of a node-local backend: the agent on its node removes the
 * asset and the PV (agent.c); nothing for the controller to do, unless that
 * node is gone, when nobody can: a warning on the PV says so.  Returns 1
 * (nothing more for the controller to do) or -EIO.
 */
static int reclaim_on_node(struct fvp_prov *p, json_object *pv)
{
	const char *host = pv_hostname(pv), *name = fv_json_str_in(pv, "metadata", "name");
	json_object *list = NULL;
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	int st;

	if (!host || !fv_kube_name_ok(host)) {
		fvp_event(&p->ev, pv, true, "VolumeFailedDelete",
		      "the PV names no node (nodeAffinity on kubernetes.io/hostname): its asset is "
		      "not touched; delete the PV by hand");
		return 1;
	}
	fvp_api_select(path, sizeof(path), FVP_API_NODE, "kubernetes.io/hostname", host);
	st = fv_kube_request(p->k, "GET", path, NULL, &list, err, sizeof(err));
	if (st != 200 || !list) {
		fvp_log_warning("PV %s: cannot list nodes: %s", name, st < 0 ? err : fv_kube_status_message(list));
		json_object_put(list);
		return -EIO;
	}
	if (fv_json_get(list, "items") && json_object_is_type(fv_json_get(list, "items"), json_type_array) &&
	    json_object_array_length(fv_json_get(list, "items")) == 0)
		fvp_event(&p->ev, pv, true, "VolumeFailedDelete",
		      "node %s is gone: the node agent that removes this volume's data cannot run; "
		      "delete the PV by hand (and its image, should the node come back)", host);
	else
		fvp_log_info("PV %s released: the node agent on %s removes it", name, host);
	json_object_put(list);
	return 1;
}

/* Apply the PV's onDelete to its asset.  0 done, >0 not ours to touch, <0 failed (event). */
static int reclaim_asset(struct fvp_prov *p, const struct fvp_backend *b, json_object *pv)
{
	const char *name = fv_json_str_in(pv, "metadata", "name"), *od;
	char err[FVP_ERR_MAX], done[FVP_DONE_MAX] = "", odbuf[ON_DELETE_MAX];
	int r;

	if (b->node_local)
		return reclaim_on_node(p, pv);
	r = pv_on_delete(p, pv, odbuf, sizeof(odbuf), &od);
	if (r < 0)
		return r; /* the class could not be read: retried */
	r = fvp_backend_reclaim(&p->site, b, pv, od, done, sizeof(done), err, sizeof(err));
	if (r > 0) {
		fvp_log_info("PV %s: %s", name, err);
		return r;
	}
	if (r < 0) {
		fvp_event(&p->ev, pv, true, "VolumeFailedDelete", "%s; the PV is kept, retried after a "
		      "backoff", err);
		return r;
	}
	fvp_log_info("PV %s released: %s", name, done);
	return 0;
}

int fvp_ctl_pv_changed(struct fvp_prov *p, json_object *pv)
{
	json_object *meta = fv_json_get(pv, "metadata"), *spec = fv_json_get(pv, "spec"), *reply = NULL;
	const char *name = fv_json_str(meta, "name"), *uid = fv_json_str(meta, "uid"),
		   *phase = fv_json_str_in(pv, "status", "phase"),
		   *policy = fv_json_str(spec, "persistentVolumeReclaimPolicy"),
		   *cls = fv_json_str(spec, "storageClassName"); /* the metrics' label */
	const struct fvp_backend *b = fvp_ctl_backend(fv_json_str(fv_json_get(meta, "annotations"), FVP_ANN_PROVISIONED_BY));
	bool deleting = fv_json_get(meta, "deletionTimestamp") != NULL, fin = has_pv_finalizer(pv);
	bool finished = false; /* this call ended the PV (metrics: one success per reclaim) */
	double t0;
	int r;

	if (!b || !fv_kube_name_ok(name) || !uid)
		return 0;
	if (deleting && !fin)
		return 0; /* reclaimed, or never ours to hold */
	if (p->record_owners && b->record_owner) {
		char err[FVP_ERR_MAX];

		r = fvp_backend_record_owner(&p->site, b, pv, err, sizeof(err));
		if (r > 0)
			fvp_log_info("PV %s: %s", name, err);
		else if (r < 0)
			fvp_event(&p->ev, pv, true, "OwnerRecordFailed", "%s", err);
	}
	if (!policy || !streq(policy, "Delete")) {
		/* Retain (a policy changed after provisioning): nothing to hold the PV for */
		if (fin && fvp_finalizer_set(p->k, pv, FVP_PV_FINALIZER, false, NULL) == 0)
			fvp_log_info("PV %s: policy %s, finalizer removed", name, policy ? policy : "?");
		return 0;
	}
	if (!phase || !streq(phase, "Released")) {
		/* a PV of an older version, or one whose finalizer was removed: protect it */
		if (!deleting && !fin && fvp_finalizer_set(p->k, pv, FVP_PV_FINALIZER, true, NULL) == 0)
			fvp_log_info("PV %s: finalizer %s added", name, FVP_PV_FINALIZER);
		return 0;
	}
	t0 = fvp_ctl_now_s();
	r = reclaim_asset(p, b, pv);
	if (r != 0) {
		if (r < 0)
			fvp_metrics_observe(FVP_M_DELETE, b->name, cls, false, fvp_ctl_now_s() - t0);
		return r < 0 ? r : 0;
	}
	if (!deleting) {
		r = delete_pv(p, name, uid, &reply);
		if (r < 0)
			fvp_event(&p->ev, pv, true, "VolumeFailedDelete",
			      "the asset is reclaimed, deleting the PV failed; retried after a backoff");
		finished = r == 0 && !fin;
		if (r != 0 || !fin)
			goto out; /* failed (retried), gone already, or nothing holds it */
		/* the reply is the PV, now with a deletionTimestamp: the freshest copy */
		if (reply && streq(fv_json_str_in(reply, "metadata", "uid") ?: "", uid) &&
		    has_pv_finalizer(reply))
			pv = reply;
	}
	/* the asset is gone: let the API finish the deletion (a 409 comes back by the watch) */
	r = fvp_finalizer_set(p->k, pv, FVP_PV_FINALIZER, false, NULL);
	if (r == 0)
		fvp_log_info("PV %s: finalizer removed", name);
	finished = r == 0;
	r = r == -EIO ? -EIO : 0;
out:
	if (r < 0 || finished)
		fvp_metrics_observe(FVP_M_DELETE, b->name, cls, r >= 0, fvp_ctl_now_s() - t0);
	json_object_put(reply);
	return r < 0 ? r : 0;
}

/*
 * A PV of ours went away without us (its finalizer removed by someone else,
 * or a PV from before the finalizer) while it was Released with policy
 * Delete: its asset is reclaimed all the same, under the same ownership
 * rules; nothing is left to do in the API.
 */
int fvp_ctl_pv_deleted(struct fvp_prov *p, json_object *pv)
{
	const struct fvp_backend *b =
		fvp_ctl_backend(fv_json_str(fv_json_get(fv_json_get(pv, "metadata"), "annotations"), FVP_ANN_PROVISIONED_BY));
	const char *phase = fv_json_str_in(pv, "status", "phase"),
		   *policy = fv_json_str_in(pv, "spec", "persistentVolumeReclaimPolicy");

	if (!b || !phase || !streq(phase, "Released") || !policy || !streq(policy, "Delete"))
		return 0;
	return reclaim_asset(p, b, pv) < 0 ? -EIO : 0;
}
