/* SPDX-License-Identifier: Apache-2.0 */
/* Expansion: a bound claim that asks for more than its PV has. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fv/macro.h"
#include "api.h"
#include "controller.h"
#include "fv/kubejson.h"
#include "fv/kube.h"

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
	char now[FVP_TIME_MAX];

	for (size_t i = 0; old && json_object_is_type(old, json_type_array) &&
			   i < json_object_array_length(old);
	     i++) {
		json_object *o = json_object_array_get_idx(old, i);
		const char *type = fv_json_str(o, "type");
		bool resize = false;

		for (size_t t = 0; type && t < ARRAY_SIZE(resize_types); t++)
			resize = resize || streq(type, resize_types[t]);
		if (!resize)
			json_object_array_add(list, json_object_get(o));
	}
	fv_time_rfc3339(now, sizeof(now));
	fv_json_set_str(c, "type", "FileSystemResizePending");
	fv_json_set_str(c, "status", "True");
	fv_json_set_str(c, "lastTransitionTime", now);
	fv_json_set_str(c, "message", "Waiting for the node to grow the filesystem: kubelet does it while a pod "
			   "uses the volume, or when one next starts.");
	json_object_array_add(list, c);
	return list;
}

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
int fvp_ctl_claim_resize(struct fvp_prov *p, json_object *pvc)
{
	json_object *meta = fv_json_get(pvc, "metadata"), *spec = fv_json_get(pvc, "spec"),
		    *status = fv_json_get(pvc, "status"), *pv = NULL, *sc = NULL;
	const char *ns = fv_json_str(meta, "namespace"), *name = fv_json_str(meta, "name"),
		   *volname = fv_json_str(spec, "volumeName"), *cls;
	const struct fvp_backend *b;
	uint64_t req, pvcap, stcap;
	char path[FVP_API_PATH_MAX], what[FVP_CTL_WHAT_MAX], want[FVP_QUANTITY_MAX], err[FV_KUBE_ERR_MAX];
	int st, r = 0;

	if (!fv_kube_name_ok(ns) || !fv_kube_name_ok(name) || !fv_kube_name_ok(volname) ||
	    fv_json_quantity(fv_json_get(fv_json_get(spec, "resources"), "requests"), "storage", &req) < 0 ||
	    fv_json_quantity(fv_json_get(status, "capacity"), "storage", &stcap) < 0)
		return 0;
	/*
	 * Nothing asked beyond what the claim has (the API refuses a request below
	 * status.capacity): no GET of the PV for every bound claim at every event.
	 */
	if (req <= stcap)
		return 0;
	fvp_api_path(path, sizeof(path), FVP_API_PV, NULL, volname, NULL);
	st = fv_kube_request(p->k, "GET", path, NULL, &pv, err, sizeof(err));
	if (st != 200 || !pv) {
		r = st == 404 ? 0 : -EIO;
		goto out;
	}
	b = fvp_ctl_backend(fv_json_str(fv_json_get(fv_json_get(pv, "metadata"), "annotations"), FVP_ANN_PROVISIONED_BY));
	if (!b || !b->can_expand || fv_json_quantity(fv_json_get(fv_json_get(pv, "spec"), "capacity"), "storage",
					      &pvcap) < 0)
		goto out;
	if (req > FVP_SIZE_MAX) {
		fvp_event(&p->ev, pvc, true, "VolumeResizeFailed",
		      "the claim asks for %s: more than a volume can hold (at most %llu MiB)",
		      fv_json_str(fv_json_get(fv_json_get(spec, "resources"), "requests"), "storage"),
		      (unsigned long long)(FVP_SIZE_MAX >> 20));
		goto out;
	}
	req = (req + (1 << 20) - 1) >> 20 << 20;
	if (req < pvcap) {
		/* lowered again while an expansion is pending (allowed after a failed one) */
		fvp_event(&p->ev, pvc, true, "VolumeResizeFailed",
		      "shrinking is not supported: the claim asks for %llu MiB, volume %s has "
		      "%llu MiB (a filesystem does not shrink)",
		      (unsigned long long)(req >> 20), volname, (unsigned long long)(pvcap >> 20));
		goto out;
	}
	if (req > pvcap) {
		cls = fv_json_str(fv_json_get(pv, "spec"), "storageClassName");
		r = cls ? fvp_ctl_get_class(p, cls, &sc, NULL) : 0;
		if (r != 1) {
			if (r == 0)
				fvp_event(&p->ev, pvc, true, "VolumeResizeFailed",
				      "StorageClass '%s' is gone: cannot check allowVolumeExpansion",
				      cls ? cls : "");
			goto out;
		}
		r = 0;
		if (!json_object_get_boolean(fv_json_get(sc, "allowVolumeExpansion"))) {
			fvp_event(&p->ev, pvc, true, "VolumeResizeFailed",
			      "StorageClass '%s' does not allow volume expansion", cls);
			goto out;
		}
		snprintf(want, sizeof(want), "%lluMi", (unsigned long long)(req >> 20));
		snprintf(what, sizeof(what), "claim %s/%s: raising the capacity of PV %s to %s", ns,
			 name, volname, want);
		if (fvp_ctl_patch(p, path, fvp_ctl_merge_patch("spec", "capacity", "storage", want), what) != 200) {
			r = -EIO;
			goto out;
		}
		fvp_log_info("%s: done", what);
		pvcap = req;
	}
	if (pvcap > stcap && !fv_json_str(fv_json_get(status, "allocatedResourceStatuses"), "storage")) {
		json_object *body, *ars = json_object_new_object();

		snprintf(want, sizeof(want), "%lluMi", (unsigned long long)(pvcap >> 20));
		body = fvp_ctl_merge_patch("status", "allocatedResources", "storage", want);
		if (!body || !ars) {
			json_object_put(body);
			json_object_put(ars);
			goto out;
		}
		fv_json_set_str(ars, "storage", "NodeResizePending");
		json_object_object_add(fv_json_get(body, "status"), "allocatedResourceStatuses", ars);
		json_object_object_add(fv_json_get(body, "status"), "conditions",
				       resize_pending_conditions(fv_json_get(status, "conditions")));
		fvp_api_path(path, sizeof(path), FVP_API_PVC, ns, name, "status");
		snprintf(what, sizeof(what), "claim %s/%s: setting its resize status", ns, name);
		if (fvp_ctl_patch(p, path, body, what) != 200)
			r = -EIO;
		else
			fvp_event(&p->ev, pvc, false, "FileSystemResizeRequired",
			      "volume %s is now %s; kubelet grows its filesystem on the node",
			      volname, want);
	}
out:
	json_object_put(sc);
	json_object_put(pv);
	return r;
}
