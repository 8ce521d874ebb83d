/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Provisioning: a pending claim of one of our classes gets its asset and
 * its PV; a claim deleted before its PV loses its unused asset.  The design
 * (restart safety, threads): controller.c.
 */
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
#include "store.h"

#define FINALIZER FVP_CLAIM_FINALIZER

static const char *claim_class(json_object *pvc)
{
	const char *c = fv_json_str_in(pvc, "spec", "storageClassName");

	return c && *c ? c : fv_json_str(fv_json_get(fv_json_get(pvc, "metadata"), "annotations"), FVP_ANN_CLASS_BETA);
}

/* --- the claim's finalizer ------------------------------------------------------------------- */

static bool has_finalizer(json_object *pvc)
{
	return fv_json_array_has(fv_json_get(fv_json_get(pvc, "metadata"), "finalizers"), FINALIZER);
}

static int set_finalizer(struct fvp_prov *p, json_object *pvc, bool on, json_object **ret)
{
	return fvp_finalizer_set(p->k, pvc, FINALIZER, on, ret);
}

/* --- provisioning ------------------------------------------------------------------------- */

/*
 * Hand a WaitForFirstConsumer claim back to the scheduler: without the
 * selected-node annotation it picks a node again (what the library's
 * rescheduleProvisioning does when provisioning on the selected node failed
 * in a way another node may not).
 */
static void reschedule(struct fvp_prov *p, json_object *pvc)
{
	const char *ns = fv_json_str_in(pvc, "metadata", "namespace"), *name = fv_json_str_in(pvc, "metadata", "name");
	char path[FVP_API_PATH_MAX], what[FVP_CTL_WHAT_MAX];

	if (!fv_kube_name_ok(ns) || !fv_kube_name_ok(name))
		return;
	fvp_api_path(path, sizeof(path), FVP_API_PVC, ns, name, NULL);
	snprintf(what, sizeof(what), "claim %s/%s: removing %s", ns, name, FVP_ANN_SELECTED_NODE);
	if (fvp_ctl_patch(p, path, fvp_ctl_merge_patch("metadata", "annotations", FVP_ANN_SELECTED_NODE, NULL), what) == 200)
		fvp_log_info("claim %s/%s: handed back to the scheduler", ns, name);
}

/* The PV for @pvc; takes over @vol's flexVolume and nodeAffinity. */
static json_object *build_pv(const struct fvp_backend *b, const char *pv_name, json_object *pvc,
			     json_object *sc, struct fvp_volume *vol)
{
	json_object *meta = fv_json_get(pvc, "metadata"), *spec = fv_json_get(pvc, "spec");
	json_object *m, *ann, *s, *cap, *ref;
	json_object *pv = fv_kube_object_new("v1", "PersistentVolume", NULL, pv_name, &m);
	const char *policy = fv_json_str(sc, "reclaimPolicy");

	if (!pv || !fv_json_new_all("oooo", &ann, &s, &cap, &ref)) {
		json_object_put(pv);
		return NULL;
	}
	fv_json_set_str(ann, FVP_ANN_PROVISIONED_BY, b->name);
	fv_json_set_str(ann, FVP_ANN_ON_DELETE, vol->on_delete);
	json_object_object_add(m, "annotations", ann);
	if (vol->labels)
		json_object_object_add(m, "labels", TAKE_PTR(vol->labels));
	if (!policy || streq(policy, "Delete")) {
		json_object *fin = json_object_new_array();

		if (fin) {
			json_object_array_add(fin, json_object_new_string(FVP_PV_FINALIZER));
			json_object_object_add(m, "finalizers", fin);
		}
	}

	fv_json_set_str(cap, "storage", vol->capacity[0] ? vol->capacity :
			     fv_json_str(fv_json_get(fv_json_get(spec, "resources"), "requests"), "storage"));
	json_object_object_add(s, "capacity", cap);
	json_object_object_add(s, "accessModes", json_object_get(fv_json_get(spec, "accessModes")));
	fv_json_set_str(s, "persistentVolumeReclaimPolicy", policy ? policy : "Delete");
	fv_json_set_str(s, "storageClassName", fv_json_str_in(sc, "metadata", "name"));
	fv_json_set_str(s, "volumeMode", "Filesystem");
	fv_json_set_str(ref, "apiVersion", "v1");
	fv_json_set_str(ref, "kind", "PersistentVolumeClaim");
	fv_json_set_str(ref, "namespace", fv_json_str(meta, "namespace"));
	fv_json_set_str(ref, "name", fv_json_str(meta, "name"));
	fv_json_set_str(ref, "uid", fv_json_str(meta, "uid"));
	fv_json_set_str(ref, "resourceVersion", fv_json_str(meta, "resourceVersion"));
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
static bool refused(struct fvp_prov *p, const struct fvp_backend *b, json_object *pvc,
		    json_object *sc)
{
	json_object *spec = fv_json_get(pvc, "spec"), *mo = fv_json_get(sc, "mountOptions"),
		    *ave = fv_json_get(sc, "allowVolumeExpansion"),
		    *src = fv_json_get(spec, "dataSourceRef") ?: fv_json_get(spec, "dataSource");
	const char *cls = fv_json_str_in(sc, "metadata", "name");

	if (src) {
		const char *kind = fv_json_str(src, "kind") ?: "?", *group = fv_json_str(src, "apiGroup");

		fvp_event(&p->ev, pvc, true, "ProvisioningFailed",
		      "the claim's data source (%s%s%s %s) is not supported: %s volumes are made "
		      "empty; cloning a claim or restoring a snapshot cannot be done",
		      group && *group ? group : "", group && *group ? "/" : "", kind,
		      fv_json_str(src, "name") ?: "?", b->name);
		return true;
	}
	if (fv_json_get(spec, "selector")) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed",
		      "the claim has a selector: claim Selector is not supported for dynamic "
		      "provisioning (it can only match existing PVs)");
		return true;
	}
	if (mo && json_object_is_type(mo, json_type_array) && json_object_array_length(mo)) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed",
		      "StorageClass '%s' has mountOptions %s: kubelet refuses mount options on "
		      "FlexVolume PVs (put NFS mount options in the class parameter mountOptions)",
		      cls, json_object_to_json_string_ext(mo, JSON_C_TO_STRING_PLAIN));
		return true;
	}
	if (ave && json_object_is_type(ave, json_type_boolean) && json_object_get_boolean(ave) &&
	    !b->can_expand) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed",
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
	json_object *ref = fv_json_get(fv_json_get(pvc, "spec"), "dataSourceRef");
	const char *group = fv_json_str(ref, "apiGroup");

	return ref && group && *group && !streq(group, "snapshot.storage.k8s.io");
}

/*
 * Returns 0 when done (a PV exists, or the claim is left to another
 * instance), <0 when it should be tried again after the claim's backoff
 * (every refusal too: a class or claim fixed meanwhile is then picked up).
 */
static int provision(struct fvp_prov *p, const struct fvp_backend *b, json_object *pvc,
		     json_object *sc, const char *pv_name)
{
	json_object *spec = fv_json_get(pvc, "spec"), *meta = fv_json_get(pvc, "metadata"), *pv = NULL,
		    *reply = NULL, *modes, *updated = NULL;
	const char *ns = fv_json_str(meta, "namespace"), *name = fv_json_str(meta, "name"), *size, *vm;
	char err[FVP_ERR_MAX], path[FVP_API_PATH_MAX];
	struct fvp_volume vol = { 0 };
	enum fvp_made made;
	int r, st;

	r = b->class_check(&p->site, sc, err, sizeof(err));
	if (r > 0) {
		/* Normal: another instance (one Deployment per share) may well serve it */
		fvp_event(&p->ev, pvc, false, "ProvisioningSkipped",
			  "%s: left to the %s instance started with --share for that share", err,
			  FVP_COMPONENT);
		return 0;
	}
	/* work starts here: every refusal below comes after this event, as the library's */
	fvp_event(&p->ev, pvc, false, "Provisioning", "%s is provisioning a volume for claim \"%s/%s\"",
		  b->name, ns, name);
	if (r < 0) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "StorageClass '%s': %s",
		      fv_json_str_in(sc, "metadata", "name"), err);
		return -EINVAL;
	}
	if (refused(p, b, pvc, sc))
		return -EINVAL;
	vm = fv_json_str(spec, "volumeMode");
	if (vm && !streq(vm, "Filesystem")) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed",
		      "volumeMode %s is not supported: %s volumes are filesystems", vm, b->name);
		return -EINVAL;
	}
	size = fv_json_str(fv_json_get(fv_json_get(spec, "resources"), "requests"), "storage");
	if (!size || !*size) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "the claim requests no storage size");
		return -EINVAL;
	}
	modes = fv_json_get(spec, "accessModes");
	if (!modes || !json_object_is_type(modes, json_type_array) ||
	    !json_object_array_length(modes)) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "the claim has no accessModes");
		return -EINVAL;
	}
	r = b->prepare(&p->site, sc, pvc, pv_name, &vol, err, sizeof(err));
	if (r == -ENOSPC && fv_json_str(fv_json_get(meta, "annotations"), FVP_ANN_SELECTED_NODE)) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "%s; handing the claim back to the "
		      "scheduler", err);
		reschedule(p, pvc);
		return 0;
	}
	if (r < 0) {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "%s", err);
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
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "%s", err);
		json_object_put(updated);
		return r;
	}
	if (made == FVP_MADE_ADOPTED)
		fvp_event(&p->ev, pvc, false, "AdoptedExistingVolume", "%s", err);
	pv = build_pv(b, pv_name, pvc, sc, &vol);
	fvp_volume_done(&vol);
	if (!pv) {
		fvp_log_error("claim %s/%s: out of memory", ns, name);
		json_object_put(updated);
		return -ENOMEM;
	}
	st = fv_kube_request(p->k, "POST", fvp_api_path(path, sizeof(path), FVP_API_PV, NULL, NULL, NULL),
			  pv, &reply, err, sizeof(err));
	/* known at once: the claim's next event must not make it again before the watch says so */
	if (st == 201 || st == 200 || st == 409)
		fvp_store_pv_set(p->store, pv_name, true);
	if (st == 201 || st == 200) {
		fvp_event(&p->ev, pvc, false, "ProvisioningSucceeded",
		      "Successfully provisioned volume %s: %s", pv_name, vol.where);
	} else if (st == 409) {
		/* another replica, or an earlier run of this one, was first: one PV all the same */
		fvp_log_info("claim %s/%s: PV %s exists already (created by another replica or before a "
			 "restart)", ns, name, pv_name);
	} else if (st < 0) {
		fvp_log_warning("claim %s/%s: creating PV %s failed: %s (retried after a backoff)", ns,
			 name, pv_name, err);
	} else {
		fvp_event(&p->ev, pvc, true, "ProvisioningFailed", "creating PV %s failed: HTTP %d %s",
		      pv_name, st, fv_kube_status_message(reply));
	}
	/*
	 * The PV carries the claim's lifecycle from here.  Its finalizer comes off
	 * at the claim's next turn (fvp_ctl_claim_changed(): pending with its PV, or
	 * bound), which the watch brings (our own patch above, the binder's
	 * updates, at the latest the resync): behind the claims still waiting for
	 * their PVs, not before them.
	 */
	json_object_put(reply);
	json_object_put(pv);
	json_object_put(updated);
	return st == 201 || st == 200 || st == 409 ? 0 : st < 0 ? st : -EIO;
}

/* 1 when PV @name exists (as the PV watch has it, or the API without one), 0 when not, <0. */
static int pv_exists(struct fvp_prov *p, const char *name)
{
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	int st = fvp_store_pv_exists(p->store, name);

	if (st != -ENOENT)
		return st;
	fvp_api_path(path, sizeof(path), FVP_API_PV, NULL, name, NULL);
	st = fv_kube_request(p->k, "GET", path, NULL, NULL, err, sizeof(err));
	if (st < 0)
		fvp_log_warning("GET PV %s: %s", name, err);
	return st == 200 ? 1 : st == 404 ? 0 : st < 0 ? st : -EIO;
}

/*
 * Which class serves @pvc: 1 with *ret_sc and *ret_b when it is one of our
 * backends', 0 when not, <0 on an API error.  When the controller-manager
 * handed the claim to one of our backends but its class does not serve it
 * (gone, or naming another provisioner), @why (may be NULL) says so; else
 * it is left empty.
 */
static int claim_is_ours(struct fvp_prov *p, json_object *pvc, json_object **ret_sc,
			 const struct fvp_backend **ret_b, char *why, size_t whylen)
{
	json_object *ann = fv_json_get(fv_json_get(pvc, "metadata"), "annotations");
	const char *prov = fv_json_str(ann, FVP_ANN_SP), *cls;
	const struct fvp_backend *b = NULL;
	int r;

	*ret_sc = NULL;
	if (why)
		why[0] = '\0';
	if (!prov)
		prov = fv_json_str(ann, FVP_ANN_SP_BETA);
	/*
	 * Only what the controller-manager handed to us: it sets the annotation
	 * once no existing PV matched the claim (static PVs win), and so only
	 * once the claim is in its cache (a PV made earlier would be Released).
	 */
	if (!prov || !fvp_ctl_backend(prov))
		return 0;
	cls = claim_class(pvc);
	if (!cls || !*cls) {
		if (why)
			snprintf(why, whylen, "the claim was handed to %s but names no StorageClass", prov);
		return 0;
	}
	r = fvp_ctl_get_class(p, cls, ret_sc, &b);
	if (r == 0 && why)
		snprintf(why, whylen, "the claim was handed to %s, but StorageClass '%s' does not "
			 "exist (deleted?) or names another provisioner: nothing is provisioned until "
			 "it names %s again", prov, cls, prov);
	if (r == 1 && !streq(prov, b->name)) {
		if (why)
			snprintf(why, whylen, "the claim was handed to %s, but StorageClass '%s' names "
				 "%s", prov, cls, b->name);
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
static int remove_unused_asset(struct fvp_prov *p, json_object *pvc)
{
	json_object *meta = fv_json_get(pvc, "metadata"), *sc = NULL;
	const char *uid = fv_json_str(meta, "uid");
	const struct fvp_backend *b;
	char pv_name[FVP_PV_NAME_MAX], err[FVP_ERR_MAX];
	int r;

	if (!uid || !fv_kube_name_ok(uid) || strlen(uid) > 64)
		return 0;
	r = claim_is_ours(p, pvc, &sc, &b, NULL, 0);
	if (r <= 0)
		return r;
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	r = pv_exists(p, pv_name);
	if (r == 0) {
		err[0] = '\0';
		r = fvp_backend_cleanup(&p->site, b, sc, pvc, pv_name, err, sizeof(err));
		if (r == 0)
			fvp_log_info("claim %s/%s deleted before its PV was made: %s",
				 fv_json_str(meta, "namespace"), fv_json_str(meta, "name"), err);
		else if (r < 0)
			fvp_log_warning("claim %s/%s deleted: %s", fv_json_str(meta, "namespace"),
				 fv_json_str(meta, "name"), err);
	}
	json_object_put(sc);
	return r < 0 ? r : 0;
}

/*
 * A claim being deleted that still has our finalizer: it was deleted between
 * its asset and its PV (a crash, or a PV create that kept failing).  Its
 * asset goes if it is unused, then the finalizer, so the API can finish.
 */
static int claim_finish_deleted(struct fvp_prov *p, json_object *pvc)
{
	int r = remove_unused_asset(p, pvc);

	if (r < 0)
		return r;
	r = set_finalizer(p, pvc, false, NULL);
	if (r == 0)
		fvp_log_info("claim %s/%s deleted before its PV: finalizer removed",
			 fv_json_str_in(pvc, "metadata", "namespace"), fv_json_str_in(pvc, "metadata", "name"));
	return r == 1 || r == -EAGAIN ? 0 : r;
}

int fvp_ctl_claim_changed(struct fvp_prov *p, json_object *pvc)
{
	json_object *meta = fv_json_get(pvc, "metadata"), *sc = NULL;
	const char *uid = fv_json_str(meta, "uid"), *phase = fv_json_str_in(pvc, "status", "phase"),
		   *vol = fv_json_str_in(pvc, "spec", "volumeName");
	const struct fvp_backend *b = NULL;
	char pv_name[FVP_PV_NAME_MAX], why[FVP_ERR_MAX];
	int r;

	if (!uid || strlen(uid) > 64 || !fv_kube_name_ok(uid))
		return 0;
	if (fv_json_get(meta, "deletionTimestamp"))
		return has_finalizer(pvc) ? claim_finish_deleted(p, pvc) : 0;
	if ((phase && !streq(phase, "Pending")) || (vol && *vol)) {
		if (has_finalizer(pvc) && set_finalizer(p, pvc, false, NULL) == 0)
			fvp_log_info("claim %s/%s is bound: finalizer removed", fv_json_str(meta, "namespace"),
				 fv_json_str(meta, "name"));
		if (phase && streq(phase, "Bound") && vol && *vol)
			return fvp_ctl_claim_resize(p, pvc);
		return 0;
	}
	r = claim_is_ours(p, pvc, &sc, &b, why, sizeof(why));
	if (r <= 0) {
		/* handed to us, and no class of ours: kubectl describe says why it stays Pending */
		if (r == 0 && why[0])
			fvp_event(&p->ev, pvc, true, "ProvisioningSkipped", "%s", why);
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
	if (fv_json_str(sc, "volumeBindingMode") && streq(fv_json_str(sc, "volumeBindingMode"), "WaitForFirstConsumer") &&
	    !fv_json_str(fv_json_get(meta, "annotations"), FVP_ANN_SELECTED_NODE)) {
		json_object_put(sc);
		return 0;
	}
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	r = pv_exists(p, pv_name);
	if (r == 0) {
		double t0 = fvp_ctl_now_s();

		r = provision(p, b, pvc, sc, pv_name);
		fvp_metrics_observe(FVP_M_PROVISION, b->name, fv_json_str_in(sc, "metadata", "name"), r == 0,
				    fvp_ctl_now_s() - t0);
	} else if (r == 1) {
		r = has_finalizer(pvc) && set_finalizer(p, pvc, false, NULL) == -EIO ? -EIO : 0;
	}
	json_object_put(sc);
	return r;
}

int fvp_ctl_claim_deleted(struct fvp_prov *p, json_object *pvc)
{
	return remove_unused_asset(p, pvc);
}
