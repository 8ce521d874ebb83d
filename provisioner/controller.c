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
 * Storage calls go through fsop.c (a child with a deadline).
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
#include "fsop.h"
#include "jsonutil.h"
#include "kube.h"
#include "metrics.h"

/*
 * On a claim from just before its asset is made until its PV exists: a
 * claim deleted meanwhile (even while this process is down) stays visible,
 * with a deletionTimestamp, until its asset is cleaned up.
 */
#define FINALIZER "flexvol/provisioning"
/*
 * On our PVs with reclaim policy Delete (KEP-2644, the name every external
 * provisioner uses): a PV deleted while it is Released, even while this
 * process is down, stays until its asset is reclaimed.
 */
#define PV_FINALIZER "external-provisioner.volume.kubernetes.io/finalizer"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

static bool has_pv_finalizer(json_object *pv)
{
	return jarray_has(jget(jget(pv, "metadata"), "finalizers"), PV_FINALIZER);
}

/*
 * Add (@on) or remove finalizer @fin with an update of the whole object
 * (a claim, or a PV when it has no namespace): the resourceVersion in it
 * makes a concurrent change a 409, after which the newer object arrives by
 * the watch and this is tried again.  Returns 0 with the updated object in
 * *ret (may be NULL), 1 when the object is gone, <0.
 */
static int update_finalizer(struct prov *p, json_object *obj, const char *fin, bool on,
			    json_object **ret)
{
	json_object *copy = NULL, *meta, *f, *nf, *reply = NULL;
	const char *ns = jstr2(obj, "metadata", "namespace"), *name = jstr2(obj, "metadata", "name");
	char path[600], err[512];
	int st;

	if (ret)
		*ret = NULL;
	if ((ns && !safe_name(ns)) || !safe_name(name))
		return -EINVAL;
	if (json_object_deep_copy(obj, &copy, NULL) < 0 || !copy)
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
		    !streq(json_object_get_string(v), fin))
			json_object_array_add(nf, json_object_get(v));
	}
	if (on)
		json_object_array_add(nf, json_object_new_string(fin));
	json_object_object_add(meta, "finalizers", nf);
	if (ns)
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns,
			 name);
	else
		snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", name);
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
		log_info("%s %s%s%s: %s finalizer %s: %s", ns ? "claim" : "PV", ns ? ns : "",
			 ns ? "/" : "", name, on ? "adding the" : "removing the", fin, err);
	else if (st != 409)
		log_info("%s %s%s%s: %s finalizer %s: HTTP %d %s", ns ? "claim" : "PV", ns ? ns : "",
			 ns ? "/" : "", name, on ? "adding the" : "removing the", fin, st,
			 kube_status_message(reply));
	json_object_put(reply);
	return st == 409 ? -EAGAIN : -EIO;
}

static int set_finalizer(struct prov *p, json_object *pvc, bool on, json_object **ret)
{
	return update_finalizer(p, pvc, FINALIZER, on, ret);
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
	if (!policy || streq(policy, "Delete")) {
		json_object *fin = json_object_new_array();

		if (fin) {
			json_object_array_add(fin, json_object_new_string(PV_FINALIZER));
			json_object_object_add(m, "finalizers", fin);
		}
	}
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

/*
 * What a claim or class asks for that no flexvol volume can give: refused
 * with an event before anything is made, as Kubernetes' own provisioners
 * refuse them.  True when refused.
 */
static bool refused(struct prov *p, const struct fvp_backend *b, json_object *pvc,
		    json_object *sc)
{
	json_object *spec = jget(pvc, "spec"), *mo = jget(sc, "mountOptions"),
		    *ave = jget(sc, "allowVolumeExpansion"),
		    *src = jget(spec, "dataSourceRef") ?: jget(spec, "dataSource");
	const char *cls = jstr2(sc, "metadata", "name");

	if (src) {
		const char *kind = jstr(src, "kind") ?: "?", *group = jstr(src, "apiGroup");

		event(&p->ev, pvc, true, "ProvisioningFailed",
		      "the claim's data source (%s%s%s %s) is not supported: %s volumes are made "
		      "empty; cloning a claim or restoring a snapshot cannot be done",
		      group && *group ? group : "", group && *group ? "/" : "", kind,
		      jstr(src, "name") ?: "?", b->name);
		return true;
	}
	if (jget(spec, "selector")) {
		event(&p->ev, pvc, true, "ProvisioningFailed",
		      "the claim has a selector: claim Selector is not supported for dynamic "
		      "provisioning (it can only match existing PVs)");
		return true;
	}
	if (mo && json_object_is_type(mo, json_type_array) && json_object_array_length(mo)) {
		event(&p->ev, pvc, true, "ProvisioningFailed",
		      "StorageClass '%s' has mountOptions %s: kubelet refuses mount options on "
		      "FlexVolume PVs (put NFS mount options in the class parameter mountOptions)",
		      cls, json_object_to_json_string_ext(mo, JSON_C_TO_STRING_PLAIN));
		return true;
	}
	if (ave && json_object_is_type(ave, json_type_boolean) && json_object_get_boolean(ave) &&
	    !b->can_expand) {
		event(&p->ev, pvc, true, "ProvisioningFailed",
		      "StorageClass '%s' sets allowVolumeExpansion: true, which %s cannot honour (a "
		      "resize would never finish); set it false", cls, b->name);
		return true;
	}
	return false;
}

/*
 * A claim whose dataSourceRef names something outside the core group and the
 * snapshot API belongs to a volume populator: left to it, as csi-prov does.
 */
static bool for_populator(json_object *pvc)
{
	json_object *ref = jget(jget(pvc, "spec"), "dataSourceRef");
	const char *group = jstr(ref, "apiGroup");

	return ref && group && *group && !streq(group, "snapshot.storage.k8s.io");
}

/*
 * Returns 0 when done (a PV exists, or the claim is left to another
 * instance), <0 when it should be tried again after the claim's backoff
 * (every refusal too: a class or claim fixed meanwhile is then picked up).
 */
static int provision(struct prov *p, const struct fvp_backend *b, json_object *pvc,
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
		return -EINVAL;
	}
	if (r > 0) {
		log_info("claim %s/%s: %s: left to another instance", ns, name, err);
		return 0;
	}
	if (refused(p, b, pvc, sc))
		return -EINVAL;
	vm = jstr(spec, "volumeMode");
	if (vm && !streq(vm, "Filesystem")) {
		event(&p->ev, pvc, true, "ProvisioningFailed",
		      "volumeMode %s is not supported: %s volumes are filesystems", vm, b->name);
		return -EINVAL;
	}
	size = jstr(jget(jget(spec, "resources"), "requests"), "storage");
	if (!size || !*size) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "the claim requests no storage size");
		return -EINVAL;
	}
	modes = jget(spec, "accessModes");
	if (!modes || !json_object_is_type(modes, json_type_array) ||
	    !json_object_array_length(modes)) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "the claim has no accessModes");
		return -EINVAL;
	}
	r = b->prepare(&p->site, sc, pvc, pv_name, &vol, err, sizeof(err));
	if (r == -ENOSPC && jstr(jget(meta, "annotations"), ANN_SELECTED_NODE)) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "%s; handing the claim back to the "
		      "scheduler", err);
		reschedule(p, pvc);
		return 0;
	}
	if (r < 0) {
		event(&p->ev, pvc, true, "ProvisioningFailed", "%s", err);
		return r;
	}
	if (!has_finalizer(pvc)) {
		r = set_finalizer(p, pvc, true, &updated);
		if (r != 0) {
			fvp_volume_done(&vol);
			/* 409: the newer claim comes by the watch; 404: gone */
			return r == 1 || r == -EAGAIN ? 0 : r;
		}
		pvc = updated;
	}
	r = fvp_backend_create(&p->site, b, sc, pvc, &vol, &made, err, sizeof(err));
	if (r < 0) {
		fvp_volume_done(&vol);
		event(&p->ev, pvc, true, "ProvisioningFailed", "%s", err);
		json_object_put(updated);
		return r;
	}
	if (made == FVP_MADE_ADOPTED)
		event(&p->ev, pvc, false, "AdoptedExistingVolume", "%s", err);
	pv = build_pv(b, pv_name, pvc, sc, &vol);
	fvp_volume_done(&vol);
	if (!pv) {
		log_info("claim %s/%s: out of memory", ns, name);
		json_object_put(updated);
		return -ENOMEM;
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
		log_info("claim %s/%s: creating PV %s failed: %s (retried after a backoff)", ns,
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
	return st == 201 || st == 200 || st == 409 ? 0 : st < 0 ? st : -EIO;
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
	/*
	 * Only what the controller-manager handed to us: it sets the annotation
	 * once no existing PV matched the claim (static PVs win), and so only
	 * once the claim is in its cache (a PV made earlier would be Released).
	 */
	if (!prov || !ctl_backend(prov))
		return 0;
	cls = claim_class(pvc);
	if (!cls || !*cls)
		return 0;
	r = get_class(p, cls, ret_sc, &b);
	if (r == 1 && !streq(prov, b->name)) {
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
static int remove_unused_asset(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *sc = NULL;
	const char *uid = jstr(meta, "uid");
	const struct fvp_backend *b;
	char pv_name[128], err[FVP_ERR_MAX];
	int r;

	if (!uid || !safe_name(uid) || strlen(uid) > 64)
		return 0;
	r = claim_is_ours(p, pvc, &sc, &b);
	if (r <= 0)
		return r;
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	r = pv_exists(p, pv_name);
	if (r == 0) {
		err[0] = '\0';
		r = fvp_backend_cleanup(&p->site, b, sc, pvc, pv_name, err, sizeof(err));
		if (r == 0)
			log_info("claim %s/%s deleted before its PV was made: %s",
				 jstr(meta, "namespace"), jstr(meta, "name"), err);
		else if (r < 0)
			log_info("claim %s/%s deleted: %s", jstr(meta, "namespace"),
				 jstr(meta, "name"), err);
	}
	json_object_put(sc);
	return r < 0 ? r : 0;
}

/*
 * A claim being deleted that still has our finalizer: it was deleted between
 * its asset and its PV (a crash, or a PV create that kept failing).  Its
 * asset goes if it is unused, then the finalizer, so the API can finish.
 */
static int claim_finish_deleted(struct prov *p, json_object *pvc)
{
	int r = remove_unused_asset(p, pvc);

	if (r < 0)
		return r;
	r = set_finalizer(p, pvc, false, NULL);
	if (r == 0)
		log_info("claim %s/%s deleted before its PV: finalizer removed",
			 jstr2(pvc, "metadata", "namespace"), jstr2(pvc, "metadata", "name"));
	return r == 1 || r == -EAGAIN ? 0 : r;
}

/* --- expansion ---------------------------------------------------------------------------- */

/*
 * A bound claim of one of our backends that grows online (b->can_expand) asks
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
/*
 * The claim's conditions with FileSystemResizePending, as Kubernetes'
 * MarkForFSResize sets them for the node's part of a resize: other
 * resize conditions replaced, the rest kept (a merge patch replaces the
 * whole list).  kubelet drops it when it has grown the filesystem.
 */
static json_object *resize_pending_conditions(json_object *old)
{
	static const char *const resize_types[] = { "Resizing", "FileSystemResizePending",
						    "ControllerResizeError", "NodeResizeError" };
	json_object *list = json_object_new_array(), *c = json_object_new_object();
	char now[32];

	for (size_t i = 0; old && json_object_is_type(old, json_type_array) &&
			   i < json_object_array_length(old);
	     i++) {
		json_object *o = json_object_array_get_idx(old, i);
		const char *type = jstr(o, "type");
		bool resize = false;

		for (size_t t = 0; type && t < ARRAY_SIZE(resize_types); t++)
			resize = resize || streq(type, resize_types[t]);
		if (!resize)
			json_object_array_add(list, json_object_get(o));
	}
	rfc3339(now, sizeof(now));
	jset(c, "type", "FileSystemResizePending");
	jset(c, "status", "True");
	jset(c, "lastTransitionTime", now);
	jset(c, "message", "Waiting for the node to grow the filesystem: kubelet does it while a pod "
			   "uses the volume, or when one next starts.");
	json_object_array_add(list, c);
	return list;
}

static int claim_resize(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *spec = jget(pvc, "spec"),
		    *status = jget(pvc, "status"), *pv = NULL, *sc = NULL, *reply = NULL;
	const char *ns = jstr(meta, "namespace"), *name = jstr(meta, "name"),
		   *volname = jstr(spec, "volumeName"), *cls;
	const struct fvp_backend *b;
	uint64_t req, pvcap, stcap;
	char path[600], what[700], want[32], err[512];
	int st, r = 0;

	if (!safe_name(ns) || !safe_name(name) || !safe_name(volname) ||
	    jquantity(jget(jget(spec, "resources"), "requests"), "storage", &req) < 0 ||
	    jquantity(jget(status, "capacity"), "storage", &stcap) < 0)
		return 0;
	/*
	 * Nothing asked beyond what the claim has (the API refuses a request below
	 * status.capacity): no GET of the PV for every bound claim at every event.
	 */
	if (req <= stcap)
		return 0;
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", volname);
	st = kube_request(p->k, "GET", path, NULL, &pv, err, sizeof(err));
	if (st != 200 || !pv) {
		r = st == 404 ? 0 : -EIO;
		goto out;
	}
	b = ctl_backend(jstr(jget(jget(pv, "metadata"), "annotations"), ANN_PROVISIONED_BY));
	if (!b || !b->can_expand || jquantity(jget(jget(pv, "spec"), "capacity"), "storage",
					      &pvcap) < 0)
		goto out;
	if (req > FVP_SIZE_MAX) {
		event(&p->ev, pvc, true, "VolumeResizeFailed",
		      "the claim asks for %s: more than a volume can hold (at most %llu MiB)",
		      jstr(jget(jget(spec, "resources"), "requests"), "storage"),
		      (unsigned long long)(FVP_SIZE_MAX >> 20));
		goto out;
	}
	req = (req + (1 << 20) - 1) >> 20 << 20;
	if (req < pvcap) {
		/* lowered again while an expansion is pending (allowed after a failed one) */
		event(&p->ev, pvc, true, "VolumeResizeFailed",
		      "shrinking is not supported: the claim asks for %llu MiB, volume %s has "
		      "%llu MiB (a filesystem does not shrink)",
		      (unsigned long long)(req >> 20), volname, (unsigned long long)(pvcap >> 20));
		goto out;
	}
	if (req > pvcap) {
		cls = jstr(jget(pv, "spec"), "storageClassName");
		r = cls ? get_class(p, cls, &sc, NULL) : 0;
		if (r != 1) {
			if (r == 0)
				event(&p->ev, pvc, true, "VolumeResizeFailed",
				      "StorageClass '%s' is gone: cannot check allowVolumeExpansion",
				      cls ? cls : "");
			goto out;
		}
		r = 0;
		if (!json_object_get_boolean(jget(sc, "allowVolumeExpansion"))) {
			event(&p->ev, pvc, true, "VolumeResizeFailed",
			      "StorageClass '%s' does not allow volume expansion", cls);
			goto out;
		}
		snprintf(want, sizeof(want), "%lluMi", (unsigned long long)(req >> 20));
		snprintf(what, sizeof(what), "claim %s/%s: raising the capacity of PV %s to %s", ns,
			 name, volname, want);
		if (patch(p, path, nest3("spec", "capacity", "storage", want), what) != 200) {
			r = -EIO;
			goto out;
		}
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
		json_object_object_add(jget(body, "status"), "conditions",
				       resize_pending_conditions(jget(status, "conditions")));
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s/status",
			 ns, name);
		snprintf(what, sizeof(what), "claim %s/%s: setting its resize status", ns, name);
		if (patch(p, path, body, what) != 200)
			r = -EIO;
		else
			event(&p->ev, pvc, false, "FileSystemResizeRequired",
			      "volume %s is now %s; kubelet grows its filesystem on the node",
			      volname, want);
	}
out:
	json_object_put(reply);
	json_object_put(sc);
	json_object_put(pv);
	return r;
}

int ctl_claim_changed(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *sc = NULL;
	const char *uid = jstr(meta, "uid"), *phase = jstr2(pvc, "status", "phase"),
		   *vol = jstr2(pvc, "spec", "volumeName");
	const struct fvp_backend *b = NULL;
	char pv_name[128];
	int r;

	if (!uid || strlen(uid) > 64 || !safe_name(uid))
		return 0;
	if (jget(meta, "deletionTimestamp"))
		return has_finalizer(pvc) ? claim_finish_deleted(p, pvc) : 0;
	if ((phase && !streq(phase, "Pending")) || (vol && *vol)) {
		if (has_finalizer(pvc) && set_finalizer(p, pvc, false, NULL) == 0)
			log_info("claim %s/%s is bound: finalizer removed", jstr(meta, "namespace"),
				 jstr(meta, "name"));
		if (phase && streq(phase, "Bound") && vol && *vol)
			return claim_resize(p, pvc);
		return 0;
	}
	r = claim_is_ours(p, pvc, &sc, &b);
	if (r <= 0) {
		/* no longer ours (its class is gone or changed): do not hold it */
		if (r == 0 && has_finalizer(pvc))
			(void)set_finalizer(p, pvc, false, NULL);
		return r;
	}
	if (for_populator(pvc)) {
		json_object_put(sc);
		return 0;
	}
	/* WaitForFirstConsumer: the scheduler picks the node first (the annotation says so) */
	if (jstr(sc, "volumeBindingMode") && streq(jstr(sc, "volumeBindingMode"), "WaitForFirstConsumer") &&
	    !jstr(jget(meta, "annotations"), ANN_SELECTED_NODE)) {
		json_object_put(sc);
		return 0;
	}
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	r = pv_exists(p, pv_name);
	if (r == 0) {
		double t0 = now_s();

		r = provision(p, b, pvc, sc, pv_name);
		fvp_metrics_observe(FVP_M_PROVISION, r == 0, now_s() - t0);
	} else if (r == 1) {
		r = has_finalizer(pvc) && set_finalizer(p, pvc, false, NULL) == -EIO ? -EIO : 0;
	}
	json_object_put(sc);
	return r;
}

int ctl_claim_deleted(struct prov *p, json_object *pvc)
{
	return remove_unused_asset(p, pvc);
}

/* --- reclaiming ----------------------------------------------------------------------------- */

/*
 * The onDelete for @pv: the one recorded on it at provisioning (a class
 * re-created since must not turn retain into delete); for a PV without the
 * record, its class's as it is now; NULL: the backend's default.
 */
static int pv_on_delete(struct prov *p, json_object *pv, char *buf, size_t len, const char **ret)
{
	json_object *sc = NULL;
	const char *od, *cls;
	int r;

	od = jstr(jget(jget(pv, "metadata"), "annotations"), ANN_ON_DELETE);
	*ret = NULL;
	if (od) {
		snprintf(buf, len, "%s", od);
		*ret = buf;
		return 0;
	}
	cls = jstr2(pv, "spec", "storageClassName");
	r = cls && *cls ? get_class(p, cls, &sc, NULL) : 0;
	if (r < 0)
		return r;
	od = jstr(jget(sc, "parameters"), "onDelete");
	if (od) {
		snprintf(buf, len, "%s", od);
		*ret = buf;
	}
	json_object_put(sc);
	return 0;
}

/* DELETE PV @name, only while it is the one with @uid (never one re-created meanwhile). */
static int delete_pv(struct prov *p, const char *name, const char *uid, json_object **ret)
{
	json_object *reply = NULL;
	char err[512], path[400];
	int st;

	*ret = NULL;
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", name);
	st = kube_delete_uid(p->k, path, uid, &reply, err, sizeof(err));
	if (st == 200 || st == 202) {
		log_info("PV %s deleted", name);
		*ret = reply;
		return 0;
	}
	if (st == 404) {
		log_info("PV %s was deleted already", name);
		json_object_put(reply);
		return 1;
	}
	if (st == 409) {
		/* the uid precondition failed: a new PV of that name is not ours to delete */
		log_info("PV %s: re-created meanwhile (uid differs): not deleted", name);
		json_object_put(reply);
		return 1;
	}
	if (st < 0)
		log_info("PV %s: delete failed: %s", name, err);
	else
		log_info("PV %s: delete failed: HTTP %d %s", name, st, kube_status_message(reply));
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
	json_object *t = jget(jget(jget(jget(pv, "spec"), "nodeAffinity"), "required"),
			      "nodeSelectorTerms"), *e, *v;

	t = t && json_object_is_type(t, json_type_array) ? json_object_array_get_idx(t, 0) : NULL;
	e = jget(t, "matchExpressions");
	e = e && json_object_is_type(e, json_type_array) ? json_object_array_get_idx(e, 0) : NULL;
	if (!jstr(e, "key") || !streq(jstr(e, "key"), "kubernetes.io/hostname"))
		return NULL;
	v = jget(e, "values");
	v = v && json_object_is_type(v, json_type_array) ? json_object_array_get_idx(v, 0) : NULL;
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/*
 * A released PV of a node-local backend: the agent on its node removes the
 * asset and the PV (agent.c); nothing for the controller to do, unless that
 * node is gone, when nobody can: a warning on the PV says so.  Returns 1
 * (nothing more for the controller to do) or -EIO.
 */
static int reclaim_on_node(struct prov *p, json_object *pv)
{
	const char *host = pv_hostname(pv), *name = jstr2(pv, "metadata", "name");
	json_object *list = NULL;
	char path[400], err[512];
	int st;

	if (!host || !safe_name(host)) {
		event(&p->ev, pv, true, "VolumeFailedDelete",
		      "the PV names no node (nodeAffinity on kubernetes.io/hostname): its asset is "
		      "not touched; delete the PV by hand");
		return 1;
	}
	snprintf(path, sizeof(path), "/api/v1/nodes?labelSelector=kubernetes.io%%2Fhostname%%3D%s",
		 host);
	st = kube_request(p->k, "GET", path, NULL, &list, err, sizeof(err));
	if (st != 200 || !list) {
		log_info("PV %s: cannot list nodes: %s", name, st < 0 ? err : kube_status_message(list));
		json_object_put(list);
		return -EIO;
	}
	if (jget(list, "items") && json_object_is_type(jget(list, "items"), json_type_array) &&
	    json_object_array_length(jget(list, "items")) == 0)
		event(&p->ev, pv, true, "VolumeFailedDelete",
		      "node %s is gone: the node agent that removes this volume's data cannot run; "
		      "delete the PV by hand (and its image, should the node come back)", host);
	else
		log_info("PV %s released: the node agent on %s removes it", name, host);
	json_object_put(list);
	return 1;
}

/* Apply the PV's onDelete to its asset.  0 done, >0 not ours to touch, <0 failed (event). */
static int reclaim_asset(struct prov *p, const struct fvp_backend *b, json_object *pv)
{
	const char *name = jstr2(pv, "metadata", "name"), *od;
	char err[FVP_ERR_MAX], done[FVP_PATH_MAX + 200] = "", odbuf[32];
	int r;

	if (b->node_local)
		return reclaim_on_node(p, pv);
	r = pv_on_delete(p, pv, odbuf, sizeof(odbuf), &od);
	if (r < 0)
		return r; /* the class could not be read: retried */
	r = fvp_backend_reclaim(&p->site, b, pv, od, done, sizeof(done), err, sizeof(err));
	if (r > 0) {
		log_info("PV %s: %s", name, err);
		return r;
	}
	if (r < 0) {
		event(&p->ev, pv, true, "VolumeFailedDelete", "%s; the PV is kept, retried after a "
		      "backoff", err);
		return r;
	}
	log_info("PV %s released: %s", name, done);
	return 0;
}

int ctl_pv_changed(struct prov *p, json_object *pv)
{
	json_object *meta = jget(pv, "metadata"), *spec = jget(pv, "spec"), *reply = NULL;
	const char *name = jstr(meta, "name"), *uid = jstr(meta, "uid"),
		   *phase = jstr2(pv, "status", "phase"),
		   *policy = jstr(spec, "persistentVolumeReclaimPolicy");
	const struct fvp_backend *b = ctl_backend(jstr(jget(meta, "annotations"), ANN_PROVISIONED_BY));
	bool deleting = jget(meta, "deletionTimestamp") != NULL, fin = has_pv_finalizer(pv);
	bool finished = false; /* this call ended the PV (metrics: one success per reclaim) */
	double t0;
	int r;

	if (!b || !safe_name(name) || !uid)
		return 0;
	if (deleting && !fin)
		return 0; /* reclaimed, or never ours to hold */
	if (p->record_owners && b->record_owner) {
		char err[FVP_ERR_MAX];

		r = fvp_backend_record_owner(&p->site, b, pv, err, sizeof(err));
		if (r > 0)
			log_info("PV %s: %s", name, err);
		else if (r < 0)
			event(&p->ev, pv, true, "OwnerRecordFailed", "%s", err);
	}
	if (!policy || !streq(policy, "Delete")) {
		/* Retain (a policy changed after provisioning): nothing to hold the PV for */
		if (fin && update_finalizer(p, pv, PV_FINALIZER, false, NULL) == 0)
			log_info("PV %s: policy %s, finalizer removed", name, policy ? policy : "?");
		return 0;
	}
	if (!phase || !streq(phase, "Released")) {
		/* a PV of an older version, or one whose finalizer was removed: protect it */
		if (!deleting && !fin && update_finalizer(p, pv, PV_FINALIZER, true, NULL) == 0)
			log_info("PV %s: finalizer %s added", name, PV_FINALIZER);
		return 0;
	}
	t0 = now_s();
	r = reclaim_asset(p, b, pv);
	if (r != 0) {
		if (r < 0)
			fvp_metrics_observe(FVP_M_DELETE, false, now_s() - t0);
		return r < 0 ? r : 0;
	}
	if (!deleting) {
		r = delete_pv(p, name, uid, &reply);
		if (r < 0)
			event(&p->ev, pv, true, "VolumeFailedDelete",
			      "the asset is reclaimed, deleting the PV failed; retried after a backoff");
		finished = r == 0 && !fin;
		if (r != 0 || !fin)
			goto out; /* failed (retried), gone already, or nothing holds it */
		/* the reply is the PV, now with a deletionTimestamp: the freshest copy */
		if (reply && streq(jstr2(reply, "metadata", "uid") ?: "", uid) &&
		    has_pv_finalizer(reply))
			pv = reply;
	}
	/* the asset is gone: let the API finish the deletion (a 409 comes back by the watch) */
	r = update_finalizer(p, pv, PV_FINALIZER, false, NULL);
	if (r == 0)
		log_info("PV %s: finalizer removed", name);
	finished = r == 0;
	r = r == -EIO ? -EIO : 0;
out:
	if (r < 0 || finished)
		fvp_metrics_observe(FVP_M_DELETE, r >= 0, now_s() - t0);
	json_object_put(reply);
	return r < 0 ? r : 0;
}

/*
 * A PV of ours went away without us (its finalizer removed by someone else,
 * or a PV from before the finalizer) while it was Released with policy
 * Delete: its asset is reclaimed all the same, under the same ownership
 * rules; nothing is left to do in the API.
 */
int ctl_pv_deleted(struct prov *p, json_object *pv)
{
	const struct fvp_backend *b =
		ctl_backend(jstr(jget(jget(pv, "metadata"), "annotations"), ANN_PROVISIONED_BY));
	const char *phase = jstr2(pv, "status", "phase"),
		   *policy = jstr2(pv, "spec", "persistentVolumeReclaimPolicy");

	if (!b || !phase || !streq(phase, "Released") || !policy || !streq(policy, "Delete"))
		return 0;
	return reclaim_asset(p, b, pv) < 0 ? -EIO : 0;
}
