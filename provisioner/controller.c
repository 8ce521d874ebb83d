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
 * Every watch end (timeout, 410 Gone, dropped connection) is followed by a
 * full re-list, so nothing missed while disconnected is lost.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "fv/util.h"
#include "controller.h"
#include "jsonutil.h"
#include "kube.h"

/*
 * On a claim from just before its asset is made until its PV exists: a
 * claim deleted meanwhile (even while this process is down) stays visible,
 * with a deletionTimestamp, until its asset is cleaned up.
 */
#define FINALIZER "flexvol/provisioning"

const struct fvp_backend *ctl_backend(const char *name)
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
static int get_class(struct prov *p, const char *name, json_object **ret,
		     const struct fvp_backend **ret_b)
{
	char path[400], err[512];
	json_object *sc = NULL;
	const struct fvp_backend *b;
	int st;

	*ret = NULL;
	if (!safe_name(name))
		return 0;
	snprintf(path, sizeof(path), "/apis/storage.k8s.io/v1/storageclasses/%s", name);
	st = kube_request(p->k, "GET", path, NULL, &sc, err, sizeof(err));
	if (st < 0) {
		log_info("cannot read StorageClass %s: %s", name, err);
		return st;
	}
	if (st == 404) {
		json_object_put(sc);
		return 0;
	}
	if (st != 200 || !sc) {
		log_info("cannot read StorageClass %s: HTTP %d %s", name, st,
			 kube_status_message(sc));
		json_object_put(sc);
		return -EIO;
	}
	b = ctl_backend(jstr(sc, "provisioner"));
	if (!b) {
		json_object_put(sc);
		return 0;
	}
	*ret = sc;
	if (ret_b)
		*ret_b = b;
	return 1;
}

static const char *claim_class(json_object *pvc)
{
	const char *c = jstr2(pvc, "spec", "storageClassName");

	return c && *c ? c : jstr(jget(jget(pvc, "metadata"), "annotations"), ANN_CLASS_BETA);
}

/* --- the claim's finalizer ------------------------------------------------------------------- */

static bool has_finalizer(json_object *pvc)
{
	return jarray_has(jget(jget(pvc, "metadata"), "finalizers"), FINALIZER);
}

/*
 * Add (@on) or remove our finalizer with an update of the whole claim: the
 * resourceVersion in it makes a concurrent change a 409, after which the
 * newer claim arrives by the watch and this is tried again.  Returns 0 with
 * the updated claim in *ret (may be NULL), 1 when the claim is gone, <0.
 */
static int set_finalizer(struct prov *p, json_object *pvc, bool on, json_object **ret)
{
	json_object *copy = NULL, *meta, *f, *nf, *reply = NULL;
	const char *ns = jstr2(pvc, "metadata", "namespace"), *name = jstr2(pvc, "metadata", "name");
	char path[600], err[512];
	int st;

	if (ret)
		*ret = NULL;
	if (!safe_name(ns) || !safe_name(name))
		return -EINVAL;
	if (json_object_deep_copy(pvc, &copy, NULL) < 0 || !copy)
		return -ENOMEM;
	meta = jget(copy, "metadata");
	f = jget(meta, "finalizers");
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
		    !streq(json_object_get_string(v), FINALIZER))
			json_object_array_add(nf, json_object_get(v));
	}
	if (on)
		json_object_array_add(nf, json_object_new_string(FINALIZER));
	json_object_object_add(meta, "finalizers", nf);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
	st = kube_request(p->k, "PUT", path, copy, &reply, err, sizeof(err));
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
		log_info("claim %s/%s: %s finalizer: %s", ns, name, on ? "adding the" : "removing the", err);
	else if (st != 409)
		log_info("claim %s/%s: %s finalizer: HTTP %d %s", ns, name,
			 on ? "adding the" : "removing the", st, kube_status_message(reply));
	json_object_put(reply);
	return st == 409 ? -EAGAIN : -EIO;
}

/* --- provisioning ------------------------------------------------------------------------- */

/*
 * PATCH @path with the merge patch @patch (taken).  Returns the HTTP status
 * or <0; logs what failed as @what.
 */
static int patch(struct prov *p, const char *path, json_object *patch, const char *what)
{
	json_object *reply = NULL;
	char err[512];
	int st;

	if (!patch)
		return -ENOMEM;
	st = kube_request(p->k, "PATCH", path, patch, &reply, err, sizeof(err));
	json_object_put(patch);
	if (st < 0)
		log_info("%s: %s", what, err);
	else if (st != 200)
		log_info("%s: HTTP %d %s", what, st, kube_status_message(reply));
	json_object_put(reply);
	return st;
}

/* {"a":{"b":{"c":v}}} with v a string, or null when @v is NULL */
static json_object *nest3(const char *a, const char *b, const char *c, const char *v)
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

/*
 * Hand a WaitForFirstConsumer claim back to the scheduler: without the
 * selected-node annotation it picks a node again (what the library's
 * rescheduleProvisioning does when provisioning on the selected node failed
 * in a way another node may not).
 */
static void reschedule(struct prov *p, json_object *pvc)
{
	const char *ns = jstr2(pvc, "metadata", "namespace"), *name = jstr2(pvc, "metadata", "name");
	char path[600], what[600];

	if (!safe_name(ns) || !safe_name(name))
		return;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
	snprintf(what, sizeof(what), "claim %s/%s: removing %s", ns, name, ANN_SELECTED_NODE);
	if (patch(p, path, nest3("metadata", "annotations", ANN_SELECTED_NODE, NULL), what) == 200)
		log_info("claim %s/%s: handed back to the scheduler", ns, name);
}

/* The PV for @pvc; takes over @vol's flexVolume and nodeAffinity. */
static json_object *build_pv(const struct fvp_backend *b, const char *pv_name, json_object *pvc,
			     json_object *sc, struct fvp_volume *vol)
{
	json_object *meta = jget(pvc, "metadata"), *spec = jget(pvc, "spec");
	json_object *pv = json_object_new_object(), *m = json_object_new_object(),
		    *ann = json_object_new_object(), *s = json_object_new_object(),
		    *cap = json_object_new_object(), *ref = json_object_new_object();
	const char *policy = jstr(sc, "reclaimPolicy");

	if (!pv || !m || !ann || !s || !cap || !ref) {
		json_object_put(pv);
		json_object_put(m);
		json_object_put(ann);
		json_object_put(s);
		json_object_put(cap);
		json_object_put(ref);
		return NULL;
	}
	jset(pv, "apiVersion", "v1");
	jset(pv, "kind", "PersistentVolume");
	jset(m, "name", pv_name);
	jset(ann, ANN_PROVISIONED_BY, b->name);
	jset(ann, ANN_ON_DELETE, vol->on_delete);
	json_object_object_add(m, "annotations", ann);
	if (vol->labels)
		json_object_object_add(m, "labels", TAKE_PTR(vol->labels));
	json_object_object_add(pv, "metadata", m);

	jset(cap, "storage", vol->capacity[0] ? vol->capacity :
			     jstr(jget(jget(spec, "resources"), "requests"), "storage"));
	json_object_object_add(s, "capacity", cap);
	json_object_object_add(s, "accessModes", json_object_get(jget(spec, "accessModes")));
	jset(s, "persistentVolumeReclaimPolicy", policy ? policy : "Delete");
	jset(s, "storageClassName", jstr2(sc, "metadata", "name"));
	jset(s, "volumeMode", "Filesystem");
	jset(ref, "apiVersion", "v1");
	jset(ref, "kind", "PersistentVolumeClaim");
	jset(ref, "namespace", jstr(meta, "namespace"));
	jset(ref, "name", jstr(meta, "name"));
	jset(ref, "uid", jstr(meta, "uid"));
	jset(ref, "resourceVersion", jstr(meta, "resourceVersion"));
	json_object_object_add(s, "claimRef", ref);
	json_object_object_add(s, "flexVolume", TAKE_PTR(vol->flex_volume));
	if (vol->node_affinity)
		json_object_object_add(s, "nodeAffinity", TAKE_PTR(vol->node_affinity));
	json_object_object_add(pv, "spec", s);
	return pv;
}

static void provision(struct prov *p, const struct fvp_backend *b, json_object *pvc,
		      json_object *sc, const char *pv_name)
{
	json_object *spec = jget(pvc, "spec"), *meta = jget(pvc, "metadata"), *pv = NULL,
		    *reply = NULL, *modes, *updated = NULL;
	const char *ns = jstr(meta, "namespace"), *name = jstr(meta, "name"), *size, *vm;
	char err[FVP_ERR_MAX];
	struct fvp_volume vol = { 0 };
	enum fvp_made made;
	int r, st;

	r = b->class_check(&p->site, sc, err, sizeof(err));
	if (r < 0) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "StorageClass '%s': %s",
		      jstr2(sc, "metadata", "name"), err);
		return;
	}
	if (r > 0) {
		log_info("claim %s/%s: %s: left to another instance", ns, name, err);
		return;
	}
	vm = jstr(spec, "volumeMode");
	if (vm && !streq(vm, "Filesystem")) {
		event(&p->ev, pvc, true, "ProvisioningFailed",
		      "volumeMode %s is not supported: %s volumes are filesystems", vm, b->name);
		return;
	}
	size = jstr(jget(jget(spec, "resources"), "requests"), "storage");
	if (!size || !*size) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "the claim requests no storage size");
		return;
	}
	modes = jget(spec, "accessModes");
	if (!modes || !json_object_is_type(modes, json_type_array) ||
	    !json_object_array_length(modes)) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "the claim has no accessModes");
		return;
	}
	r = b->prepare(&p->site, sc, pvc, pv_name, &vol, err, sizeof(err));
	if (r == -ENOSPC && jstr(jget(meta, "annotations"), ANN_SELECTED_NODE)) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "%s; handing the claim back to the "
		      "scheduler", err);
		reschedule(p, pvc);
		return;
	}
	if (r < 0) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "%s", err);
		return;
	}
	if (!has_finalizer(pvc)) {
		r = set_finalizer(p, pvc, true, &updated);
		if (r != 0) {
			fvp_volume_done(&vol);
			return; /* 409: the newer claim comes by the watch; 404: gone */
		}
		pvc = updated;
	}
	r = b->create(&p->site, sc, pvc, &vol, &made, err, sizeof(err));
	if (r < 0) {
		fvp_volume_done(&vol);
		event(&p->ev, pvc, true, "ProvisioningFailed", "%s", err);
		json_object_put(updated);
		return;
	}
	pv = build_pv(b, pv_name, pvc, sc, &vol);
	fvp_volume_done(&vol);
	if (!pv) {
		log_info("claim %s/%s: out of memory", ns, name);
		json_object_put(updated);
		return;
	}
	st = kube_request(p->k, "POST", "/api/v1/persistentvolumes", pv, &reply, err, sizeof(err));
	if (st == 201 || st == 200) {
		event(&p->ev, pvc, false, "ProvisioningSucceeded",
		      "Successfully provisioned volume %s: %s", pv_name, vol.where);
	} else if (st == 409) {
		/* another replica, or an earlier run of this one, was first: one PV all the same */
		log_info("claim %s/%s: PV %s exists already (created by another replica or before a "
			 "restart)", ns, name, pv_name);
	} else if (st < 0) {
		log_info("claim %s/%s: creating PV %s failed: %s (retried at the next re-list)", ns,
			 name, pv_name, err);
	} else {
		event(&p->ev, pvc, true, "ProvisioningFailed", "creating PV %s failed: HTTP %d %s",
		      pv_name, st, kube_status_message(reply));
	}
	/* the PV carries the claim's lifecycle from here (the binder also clears it, below) */
	if (st == 201 || st == 200 || st == 409)
		(void)set_finalizer(p, pvc, false, NULL);
	json_object_put(reply);
	json_object_put(pv);
	json_object_put(updated);
}

/* 1 when PV @name exists, 0 when not, <0 on an API error. */
static int pv_exists(struct prov *p, const char *name)
{
	char path[400], err[512];
	int st;

	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", name);
	st = kube_request(p->k, "GET", path, NULL, NULL, err, sizeof(err));
	if (st < 0)
		log_info("GET PV %s: %s", name, err);
	return st == 200 ? 1 : st == 404 ? 0 : st < 0 ? st : -EIO;
}

/*
 * Which class serves @pvc: 1 with *ret_sc and *ret_b when it is one of our
 * backends', 0 when not, <0 on an API error.
 */
static int claim_is_ours(struct prov *p, json_object *pvc, json_object **ret_sc,
			 const struct fvp_backend **ret_b)
{
	json_object *ann = jget(jget(pvc, "metadata"), "annotations");
	const char *prov = jstr(ann, ANN_SP), *cls;
	const struct fvp_backend *b = NULL;
	int r;

	*ret_sc = NULL;
	if (!prov)
		prov = jstr(ann, ANN_SP_BETA);
	if (prov && !ctl_backend(prov))
		return 0;
	cls = claim_class(pvc);
	if (!cls || !*cls)
		return 0;
	r = get_class(p, cls, ret_sc, &b);
	if (r == 1 && prov && !streq(prov, b->name)) {
		json_object_put(*ret_sc);
		*ret_sc = NULL;
		return 0;
	}
	if (r == 1)
		*ret_b = b;
	return r;
}

/*
 * A claim is gone.  If it never got its PV (deleted while provisioning
 * failed, or between the asset and the PV create), its asset is removed when
 * nothing was written to it: nothing is left behind, and no data is touched.
 */
static void remove_unused_asset(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *sc = NULL;
	const char *uid = jstr(meta, "uid");
	const struct fvp_backend *b;
	char pv_name[128], err[FVP_ERR_MAX];
	int r;

	if (!uid || !safe_name(uid) || strlen(uid) > 64 || claim_is_ours(p, pvc, &sc, &b) <= 0)
		return;
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	if (pv_exists(p, pv_name) == 0) {
		err[0] = '\0';
		r = b->cleanup(&p->site, sc, pvc, pv_name, err, sizeof(err));
		if (r == 0)
			log_info("claim %s/%s deleted before its PV was made: %s",
				 jstr(meta, "namespace"), jstr(meta, "name"), err);
		else if (r < 0)
			log_info("claim %s/%s deleted: %s", jstr(meta, "namespace"),
				 jstr(meta, "name"), err);
	}
	json_object_put(sc);
}

/*
 * A claim being deleted that still has our finalizer: it was deleted between
 * its asset and its PV (a crash, or a PV create that kept failing).  Its
 * asset goes if it is unused, then the finalizer, so the API can finish.
 */
static void claim_finish_deleted(struct prov *p, json_object *pvc)
{
	remove_unused_asset(p, pvc);
	if (set_finalizer(p, pvc, false, NULL) == 0)
		log_info("claim %s/%s deleted before its PV: finalizer removed",
			 jstr2(pvc, "metadata", "namespace"), jstr2(pvc, "metadata", "name"));
}

/* --- expansion ---------------------------------------------------------------------------- */

static int quantity(const char *s, uint64_t *ret)
{
	return s && *s ? fv_parse_quantity(s, ret) : -EINVAL;
}

/*
 * A bound claim of one of our backends that grows online (b->expand) asks
 * for more than its PV has.  Kubernetes' expand controller never loads
 * FlexVolume plugins (kubernetes/kubernetes#126881), so this plays the
 * external resizer's part: the PV's capacity is raised (in whole MiB, as
 * provisioned), then the claim's status says the node has to finish
 * (allocatedResources, allocatedResourceStatuses NodeResizePending); kubelet
 * then calls the driver's expandfs on the node, with the pod running, and
 * records the new capacity in the claim's status.  Each step is idempotent
 * and checked against the objects as they are: a crash between the two
 * patches is finished at the next event or re-list.  A smaller request is
 * refused with an event (a filesystem does not shrink).
 */
static void claim_resize(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *spec = jget(pvc, "spec"),
		    *status = jget(pvc, "status"), *pv = NULL, *sc = NULL, *reply = NULL;
	const char *ns = jstr(meta, "namespace"), *name = jstr(meta, "name"),
		   *volname = jstr(spec, "volumeName"), *cls;
	const struct fvp_backend *b;
	uint64_t req, pvcap, stcap;
	char path[600], what[700], want[32], err[512];
	int st;

	if (!safe_name(ns) || !safe_name(name) || !safe_name(volname) ||
	    quantity(jstr(jget(jget(spec, "resources"), "requests"), "storage"), &req) < 0 ||
	    quantity(jstr(jget(status, "capacity"), "storage"), &stcap) < 0)
		return;
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", volname);
	st = kube_request(p->k, "GET", path, NULL, &pv, err, sizeof(err));
	if (st != 200 || !pv)
		goto out;
	b = ctl_backend(jstr(jget(jget(pv, "metadata"), "annotations"), ANN_PROVISIONED_BY));
	if (!b || !b->expand || quantity(jstr(jget(jget(pv, "spec"), "capacity"), "storage"),
					 &pvcap) < 0)
		goto out;
	req = (req + (1 << 20) - 1) >> 20 << 20;
	if (req < pvcap && req < stcap) {
		event(&p->ev, pvc, true, "VolumeResizeFailed",
		      "shrinking is not supported: the claim asks for %llu MiB, volume %s has "
		      "%llu MiB (a filesystem does not shrink)",
		      (unsigned long long)(req >> 20), volname, (unsigned long long)(pvcap >> 20));
		goto out;
	}
	if (req > pvcap) {
		cls = jstr(jget(pv, "spec"), "storageClassName");
		if (!cls || get_class(p, cls, &sc, NULL) != 1)
			goto out;
		if (!json_object_get_boolean(jget(sc, "allowVolumeExpansion"))) {
			event(&p->ev, pvc, true, "VolumeResizeFailed",
			      "StorageClass '%s' does not allow volume expansion", cls);
			goto out;
		}
		snprintf(want, sizeof(want), "%lluMi", (unsigned long long)(req >> 20));
		snprintf(what, sizeof(what), "claim %s/%s: raising the capacity of PV %s to %s", ns,
			 name, volname, want);
		if (patch(p, path, nest3("spec", "capacity", "storage", want), what) != 200)
			goto out;
		log_info("%s: done", what);
		pvcap = req;
	}
	if (pvcap > stcap && !jstr(jget(status, "allocatedResourceStatuses"), "storage")) {
		json_object *body, *ars = json_object_new_object();

		snprintf(want, sizeof(want), "%lluMi", (unsigned long long)(pvcap >> 20));
		body = nest3("status", "allocatedResources", "storage", want);
		if (!body || !ars) {
			json_object_put(body);
			json_object_put(ars);
			goto out;
		}
		jset(ars, "storage", "NodeResizePending");
		json_object_object_add(jget(body, "status"), "allocatedResourceStatuses", ars);
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s/status",
			 ns, name);
		snprintf(what, sizeof(what), "claim %s/%s: setting its resize status", ns, name);
		if (patch(p, path, body, what) == 200)
			event(&p->ev, pvc, false, "FileSystemResizeRequired",
			      "volume %s is now %s; kubelet grows its filesystem on the node",
			      volname, want);
	}
out:
	json_object_put(reply);
	json_object_put(sc);
	json_object_put(pv);
}

void ctl_claim_changed(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *sc = NULL;
	const char *uid = jstr(meta, "uid"), *phase = jstr2(pvc, "status", "phase"),
		   *vol = jstr2(pvc, "spec", "volumeName");
	const struct fvp_backend *b = NULL;
	char pv_name[128];
	int r;

	if (!uid || strlen(uid) > 64 || !safe_name(uid))
		return;
	if (jget(meta, "deletionTimestamp")) {
		if (has_finalizer(pvc))
			claim_finish_deleted(p, pvc);
		return;
	}
	if ((phase && !streq(phase, "Pending")) || (vol && *vol)) {
		if (has_finalizer(pvc) && set_finalizer(p, pvc, false, NULL) == 0)
			log_info("claim %s/%s is bound: finalizer removed", jstr(meta, "namespace"),
				 jstr(meta, "name"));
		if (phase && streq(phase, "Bound") && vol && *vol)
			claim_resize(p, pvc);
		return;
	}
	r = claim_is_ours(p, pvc, &sc, &b);
	if (r <= 0) {
		/* no longer ours (its class is gone or changed): do not hold it */
		if (r == 0 && has_finalizer(pvc))
			(void)set_finalizer(p, pvc, false, NULL);
		return;
	}
	/* WaitForFirstConsumer: the scheduler picks the node first (the annotation says so) */
	if (jstr(sc, "volumeBindingMode") && streq(jstr(sc, "volumeBindingMode"), "WaitForFirstConsumer") &&
	    !jstr(jget(meta, "annotations"), ANN_SELECTED_NODE)) {
		json_object_put(sc);
		return;
	}
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	r = pv_exists(p, pv_name);
	if (r == 0)
		provision(p, b, pvc, sc, pv_name);
	else if (r == 1 && has_finalizer(pvc))
		(void)set_finalizer(p, pvc, false, NULL);
	json_object_put(sc);
}

void ctl_claim_deleted(struct prov *p, json_object *pvc)
{
	remove_unused_asset(p, pvc);
}

/* --- reclaiming ----------------------------------------------------------------------------- */

void ctl_pv_changed(struct prov *p, json_object *pv)
{
	json_object *meta = jget(pv, "metadata"), *spec = jget(pv, "spec"), *ann, *sc = NULL,
		    *body, *pre, *reply = NULL;
	const char *name = jstr(meta, "name"), *uid = jstr(meta, "uid"), *od = NULL, *cls;
	const struct fvp_backend *b;
	char err[FVP_ERR_MAX], path[400], done[FVP_PATH_MAX + 200] = "";
	int r, st;

	ann = jget(meta, "annotations");
	b = ctl_backend(jstr(ann, ANN_PROVISIONED_BY));
	if (!b)
		return;
	if (!jstr2(pv, "status", "phase") || !streq(jstr2(pv, "status", "phase"), "Released") ||
	    !jstr(spec, "persistentVolumeReclaimPolicy") ||
	    !streq(jstr(spec, "persistentVolumeReclaimPolicy"), "Delete") || !safe_name(name))
		return;

	/* onDelete: the class's as it is now; the one recorded at provisioning if it is gone */
	cls = jstr(spec, "storageClassName");
	r = cls && *cls ? get_class(p, cls, &sc, NULL) : 0;
	if (r < 0)
		return; /* retried at the next re-list */
	if (r == 1)
		od = jstr(jget(sc, "parameters"), "onDelete");
	if (!od)
		od = jstr(ann, ANN_ON_DELETE);
	r = b->reclaim(&p->site, pv, od, done, sizeof(done), err, sizeof(err));
	json_object_put(sc);
	if (r == 2) {
		event(&p->ev, pv, true, "VolumeFailedDelete", "%s", err);
		return;
	}
	if (r > 0) {
		log_info("PV %s: %s", name, err);
		return;
	}
	if (r < 0) {
		log_info("PV %s: %s; PV kept, retried at the next re-list", name, err);
		return;
	}
	log_info("PV %s released: %s", name, done);

	/* the uid precondition: never delete a PV re-created under the same name meanwhile */
	body = json_object_new_object();
	pre = json_object_new_object();
	if (!body || !pre) {
		json_object_put(body);
		json_object_put(pre);
		return;
	}
	jset(body, "apiVersion", "v1");
	jset(body, "kind", "DeleteOptions");
	jset(pre, "uid", uid);
	json_object_object_add(body, "preconditions", pre);
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", name);
	st = kube_request(p->k, "DELETE", path, body, &reply, err, sizeof(err));
	if (st == 200 || st == 202)
		log_info("PV %s deleted", name);
	else if (st == 404)
		log_info("PV %s was deleted already", name);
	else if (st < 0)
		log_info("PV %s: delete failed: %s", name, err);
	else
		log_info("PV %s: delete failed: HTTP %d %s", name, st, kube_status_message(reply));
	json_object_put(reply);
	json_object_put(body);
}

/* --- list and watch -------------------------------------------------------------------------- */

/*
 * List @base in pages, handing every item to the claim or PV handler.  The
 * list's resourceVersion goes to @rv.  Returns 0, -ESTALE when the continue
 * token expired (410), <0.
 */
static int list_all(struct prov *p, const char *base, bool is_pv, char *rv, size_t rvlen)
{
	_cleanup_free_ char *cont = NULL;
	char err[512];

	for (;;) {
		_cleanup_free_ char *path = NULL;
		json_object *list = NULL, *items;
		const char *c;
		int st;

		if (asprintf(&path, "%s?limit=500%s%s", base, cont ? "&continue=" : "",
			     cont ? cont : "") < 0)
			return -ENOMEM;
		st = kube_request(p->k, "GET", path, NULL, &list, err, sizeof(err));
		if (st < 0) {
			log_info("list %s: %s", base, err);
			return st;
		}
		if (st != 200 || !list) {
			log_info("list %s: HTTP %d %s", base, st, kube_status_message(list));
			json_object_put(list);
			return st == 410 ? -ESTALE : -EIO;
		}
		items = jget(list, "items");
		for (size_t i = 0; items && json_object_is_type(items, json_type_array) &&
				   i < json_object_array_length(items);
		     i++) {
			json_object *o = json_object_array_get_idx(items, i);

			if (is_pv)
				ctl_pv_changed(p, o);
			else
				ctl_claim_changed(p, o);
		}
		snprintf(rv, rvlen, "%s", jstr2(list, "metadata", "resourceVersion") ?: "");
		c = jstr2(list, "metadata", "continue");
		free(cont);
		cont = c && *c ? strdup(c) : NULL;
		json_object_put(list);
		if (!cont)
			return 0;
		/* a continue token is base64url: safe in a query, but check */
		if (strspn(cont, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=") !=
		    strlen(cont))
			return -EIO;
	}
}

static int on_event(struct prov *p, bool is_pv, const char *type, json_object *obj)
{
	if (streq(type, "ERROR")) {
		/* {"kind":"Status","code":410,"reason":"Expired",...}: the resourceVersion is gone */
		json_object *code = jget(obj, "code");

		log_info("%s watch: %s (%d %s): re-listing", is_pv ? "PV" : "claim",
			 kube_status_message(obj), code ? json_object_get_int(code) : 0,
			 jstr(obj, "reason") ?: "");
		p->expired = true;
		return -1;
	}
	if (streq(type, "BOOKMARK"))
		return 0;
	if (p->nqueue >= QUEUE_MAX)
		return -1; /* far behind: a re-list catches up */
	p->queue[p->nqueue].is_pv = is_pv;
	snprintf(p->queue[p->nqueue].type, sizeof(p->queue[p->nqueue].type), "%s", type);
	p->queue[p->nqueue].obj = json_object_get(obj);
	p->nqueue++;
	return 0;
}

static int on_pvc_event(void *ud, const char *type, json_object *obj)
{
	return on_event(ud, false, type, obj);
}

static int on_pv_event(void *ud, const char *type, json_object *obj)
{
	return on_event(ud, true, type, obj);
}

static volatile int *stop_flag;

static int drain(void *ud)
{
	struct prov *p = ud;

	for (size_t i = 0; i < p->nqueue; i++) {
		struct pending *e = &p->queue[i];

		if (!*stop_flag) {
			if (e->is_pv && !streq(e->type, "DELETED"))
				ctl_pv_changed(p, e->obj);
			else if (!e->is_pv && streq(e->type, "DELETED"))
				ctl_claim_deleted(p, e->obj);
			else if (!e->is_pv)
				ctl_claim_changed(p, e->obj);
		}
		json_object_put(e->obj);
		e->obj = NULL;
	}
	p->nqueue = 0;
	return 0;
}

static void pause_s(unsigned int s)
{
	for (unsigned int i = 0; i < s * 10 && !*stop_flag; i++)
		usleep(100000);
}

int ctl_run(struct prov *p, volatile int *stopping)
{
	unsigned int backoff = 1;

	stop_flag = stopping;
	p->ev.k = p->k;
	while (!*stopping) {
		char rv_pv[64], rv_pvc[64], err[512], path[256];
		time_t t0;
		int r;

		/* PVs first: releasing frees nothing a claim waits for, but it is cheap and complete */
		r = list_all(p, "/api/v1/persistentvolumes", true, rv_pv, sizeof(rv_pv));
		if (r == 0)
			r = list_all(p, "/api/v1/persistentvolumeclaims", false, rv_pvc, sizeof(rv_pvc));
		if (r < 0) {
			log_info("re-list failed; next try in %u s", backoff);
			pause_s(backoff);
			backoff = backoff >= 30 ? 60 : backoff * 2;
			continue;
		}
		snprintf(path, sizeof(path),
			 "/api/v1/persistentvolumeclaims?watch=1&allowWatchBookmarks=true"
			 "&resourceVersion=%s&timeoutSeconds=%u", rv_pvc, p->resync);
		r = kube_watch_add(p->k, path, on_pvc_event, p, p->resync, NULL);
		snprintf(path, sizeof(path),
			 "/api/v1/persistentvolumes?watch=1&allowWatchBookmarks=true"
			 "&resourceVersion=%s&timeoutSeconds=%u", rv_pv, p->resync);
		if (r == 0)
			r = kube_watch_add(p->k, path, on_pv_event, p, p->resync, NULL);
		if (r < 0) {
			log_info("cannot start watches: %s", strerror(-r));
			pause_s(backoff);
			continue;
		}
		p->expired = false;
		t0 = time(NULL);
		r = kube_watch_run(p->k, stopping, drain, p, err, sizeof(err));
		drain(p);
		if (*stopping)
			break;
		if (p->expired || r == -ESTALE)
			log_info("watch expired (410 Gone): re-listing");
		else
			log_info("watch ended (%s): re-listing", err[0] ? err : "stopped");
		/* a server that ends watches at once must not make this a busy loop */
		if (r < 0 || time(NULL) - t0 < 2) {
			pause_s(backoff);
			backoff = backoff >= 30 ? 60 : backoff * 2;
		} else {
			backoff = 1;
		}
	}
	return 0;
}
