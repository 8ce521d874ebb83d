/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-migrate's steps: move one bound FlexVolume PV of a flexvol driver to the CSI driver
 * of the same backing (flexvol-csi), keeping its claim and its data, and back
 * (docs/migration.md).
 *
 * A PV's volume source cannot be changed, so the PV is deleted and created again under the same
 * name, bound to the same claim (claimRef with the claim's uid): the claim is Lost between the
 * two. Every step is decided from what the API server holds and the saved copy of the FlexVolume
 * PV (written before anything changes), so a run killed anywhere is finished by running it
 * again:
 *
 *   PV is the FlexVolume one, bound   -> refuse if in use; save; Retain; [hand the directory
 *                                        over]; delete; create the CSI PV
 *   PV being deleted                  -> drop the finalizers of ours; wait until gone
 *   PV gone, saved copy present       -> create the CSI PV from the saved copy
 *   PV is the CSI one                 -> wait until it and the claim are Bound: done
 *
 * --rollback runs the same steps the other way: the FlexVolume PV is created again from the
 * saved copy (its own reclaim policy, annotations and finalizers), bound to the claim.
 *
 * Who reclaims a moved volume, and what the new PV says so with: pv.c.  Nothing here
 * waits on a component that may not run: the finalizers our components put on a PV are removed
 * here once nothing uses the volume.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "fv/ownerdir.h"
#include "fv/util.h"
#include "fv/kube.h"
#include "fv/kubejson.h"
#include "migrate.h"

#define PV_PATH MIG_PV_PATH
/* the claim's annotation: "csi" or "flexvolume", the side its PV is on after a run */
#define MIGRATED_TO "flexvol/migrated-to"

int mig_fail(struct mig *m, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->err, sizeof(m->err), fmt, ap);
	va_end(ap);
	return r;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int mig_get(struct mig *m, const char *path, json_object **ret)
{
	json_object *o = NULL;
	int r = fv_kube_request(m->k, "GET", path, NULL, &o, m->err, sizeof(m->err));

	if (r < 0)
		return r;
	if (r == 404) {
		mig_jput(&o);
		return 1;
	}
	if (r != 200 || !o) {
		mig_fail(m, -EIO, "GET %s: HTTP %d: %s", path, r, fv_kube_status_message(o));
		mig_jput(&o);
		return -EIO;
	}
	*ret = o;
	return 0;
}

/* @method @path @body expecting a 2xx; @body is consumed. */
static int send(struct mig *m, const char *method, const char *path, json_object *body)
{
	_cleanup_json_ json_object *o = NULL;
	int r = fv_kube_request(m->k, method, path, body, &o, m->err, sizeof(m->err));

	if (body)
		json_object_put(body);
	if (r < 0)
		return r;
	if (r < 200 || r > 299)
		return mig_fail(m, r == 409 ? -EEXIST : r == 404 ? -ENOENT : -EIO, "%s %s: HTTP %d: %s",
			    method, path, r, fv_kube_status_message(o));
	return 0;
}

/* Is the last component of @s (after its last '/' or '^') the PV's name? */
static bool names_pv(const char *s, const char *pv)
{
	const char *a = strrchr(s, '/'), *b = strrchr(s, '^');
	const char *t = a > b ? a : b;

	return t && streq(t + 1, pv);
}

/*
 * Refuse while anything may still write to the volume or hold it: a pod of the claim that has
 * not ended, a node whose kubelet still lists it in use or attached (it has not unmounted it
 * yet), a VolumeAttachment of it.
 */
static int check_idle(struct mig *m, const char *ns, const char *claim)
{
	_cleanup_json_ json_object *pods = NULL, *nodes = NULL, *vas = NULL;
	char path[512];
	size_t i, j;
	int r;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
	r = mig_get(m, path, &pods);
	if (r)
		return r < 0 ? r : mig_fail(m, -EIO, "GET %s: not found", path);
	for (i = 0; i < json_object_array_length(fv_json_get(pods, "items")); i++) {
		json_object *p = json_object_array_get_idx(fv_json_get(pods, "items"), i);
		json_object *vols = fv_json_get(fv_json_obj(p, "spec"), "volumes");
		const char *ph = fv_json_str_in(p, "status", "phase");

		if (ph && (streq(ph, "Succeeded") || streq(ph, "Failed")))
			continue;
		for (j = 0; vols && j < json_object_array_length(vols); j++) {
			const char *c = fv_json_str_in(json_object_array_get_idx(vols, j),
						  "persistentVolumeClaim", "claimName");

			if (c && streq(c, claim))
				return mig_fail(m, -EBUSY, "claim %s/%s is used by pod %s (phase %s): stop "
					    "it first", ns, claim, fv_json_str_in(p, "metadata", "name"),
					    ph ? ph : "unknown");
		}
	}
	r = mig_get(m, "/api/v1/nodes", &nodes);
	if (r)
		return r < 0 ? r : mig_fail(m, -EIO, "GET /api/v1/nodes: not found");
	for (i = 0; i < json_object_array_length(fv_json_get(nodes, "items")); i++) {
		json_object *n = json_object_array_get_idx(fv_json_get(nodes, "items"), i);
		json_object *st = fv_json_obj(n, "status");
		json_object *use = fv_json_get(st, "volumesInUse"), *att = fv_json_get(st, "volumesAttached");

		for (j = 0; use && j < json_object_array_length(use); j++) {
			const char *v = json_object_get_string(json_object_array_get_idx(use, j));

			if (v && names_pv(v, m->pv))
				return mig_fail(m, -EBUSY, "node %s still has volume %s in use (%s): wait "
					    "until its kubelet has unmounted it",
					    fv_json_str_in(n, "metadata", "name"), m->pv, v);
		}
		for (j = 0; att && j < json_object_array_length(att); j++) {
			const char *v = fv_json_str(json_object_array_get_idx(att, j), "name");

			if (v && names_pv(v, m->pv))
				return mig_fail(m, -EBUSY, "volume %s is still attached to node %s (%s): wait "
					    "for the detach", m->pv, fv_json_str_in(n, "metadata", "name"), v);
		}
	}
	r = mig_get(m, "/apis/storage.k8s.io/v1/volumeattachments", &vas);
	if (r < 0)
		return r;
	for (i = 0; !r && i < json_object_array_length(fv_json_get(vas, "items")); i++) {
		json_object *va = json_object_array_get_idx(fv_json_get(vas, "items"), i);
		const char *s = fv_json_str_in(fv_json_obj(va, "spec"), "source", "persistentVolumeName");

		if (s && streq(s, m->pv))
			return mig_fail(m, -EBUSY, "VolumeAttachment %s still attaches %s: wait for the "
				    "detach", fv_json_str_in(va, "metadata", "name"), m->pv);
	}
	return 0;
}

/* The claim @pv is bound to, checked against the claim itself: 0 and *ret, <0 otherwise. */
static int bound_claim(struct mig *m, json_object *pv, json_object **ret)
{
	json_object *ref = fv_json_obj(fv_json_obj(pv, "spec"), "claimRef");
	const char *ns = fv_json_str(ref, "namespace"), *name = fv_json_str(ref, "name"),
		   *uid = fv_json_str(ref, "uid");
	_cleanup_json_ json_object *c = NULL;
	char path[600];
	int r;

	if (!ns || !name || !uid || !fv_kube_name_ok(ns) || !fv_kube_name_ok(name))
		return mig_fail(m, -EINVAL, "PV %s is not bound to a claim", m->pv);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
	r = mig_get(m, path, &c);
	if (r)
		return r < 0 ? r : mig_fail(m, -ENOENT, "claim %s/%s of PV %s does not exist", ns, name,
					 m->pv);
	if (!fv_json_str_in(c, "metadata", "uid") || !streq(fv_json_str_in(c, "metadata", "uid"), uid) ||
	    !fv_json_str_in(c, "spec", "volumeName") || !streq(fv_json_str_in(c, "spec", "volumeName"), m->pv))
		return mig_fail(m, -EINVAL, "claim %s/%s is not the one PV %s is bound to (uid or "
			    "volumeName differ)", ns, name, m->pv);
	*ret = TAKE_PTR(c);
	return 0;
}

/* Write @o to @path: temp file, fsync, rename (a crash leaves the old file or the new one). */
static int write_saved(struct mig *m, const char *path, json_object *o)
{
	_cleanup_free_ char *tmp = NULL;
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
	size_t n = strlen(s);
	int fd;

	if (asprintf(&tmp, "%s.tmp", path) < 0)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return mig_fail(m, -errno, "cannot write '%s': %s", tmp, strerror(errno));
	if (write(fd, s, n) != (ssize_t)n || write(fd, "\n", 1) != 1 || fsync(fd) < 0) {
		int e = errno ? errno : EIO;

		close(fd);
		unlink(tmp);
		return mig_fail(m, -e, "cannot write '%s': %s", tmp, strerror(e));
	}
	close(fd);
	if (rename(tmp, path) < 0)
		return mig_fail(m, -errno, "cannot rename '%s': %s", tmp, strerror(errno));
	return 0;
}

/* The saved copy, or NULL (absent: *exists false). */
static int read_saved(struct mig *m, json_object **ret)
{
	json_object *o;

	if (access(m->save, F_OK) < 0) {
		*ret = NULL;
		return 0;
	}
	o = json_object_from_file(m->save);
	if (!o || !json_object_is_type(o, json_type_object) ||
	    !fv_json_str_in(o, "metadata", "name") || !streq(fv_json_str_in(o, "metadata", "name"), m->pv) ||
	    !mig_flex_driver(o)) {
		mig_jput(&o);
		return mig_fail(m, -EINVAL, "'%s' is not a saved FlexVolume PV named %s", m->save, m->pv);
	}
	*ret = o;
	return 0;
}

/* Wait until @fn says done (>0) or fails (<0), at most m->timeout_s. */
static int wait_until(struct mig *m, const char *what, int (*fn)(struct mig *, void *), void *ud)
{
	double end = now_s() + m->timeout_s;
	int r;

	for (;;) {
		r = fn(m, ud);
		if (r)
			return r < 0 ? r : 0;
		if (now_s() > end)
			return mig_fail(m, -ETIMEDOUT, "%s not seen within %u s", what, m->timeout_s);
		usleep(250 * 1000);
	}
}

static int pv_gone_named(struct mig *m, void *ud)
{
	json_object *o = NULL;
	char path[512];
	int r;

	(void)ud;
	snprintf(path, sizeof(path), PV_PATH "%s", m->pv);
	r = mig_get(m, path, &o);
	mig_jput(&o);
	return r; /* 1 = 404: gone */
}

/* PV and claim both Bound (to each other: the claim's uid in the PV's claimRef). */
static int both_bound(struct mig *m, void *ud)
{
	json_object *claim = ud;
	_cleanup_json_ json_object *pv = NULL, *c = NULL;
	char path[600];
	int r;

	snprintf(path, sizeof(path), PV_PATH "%s", m->pv);
	r = mig_get(m, path, &pv);
	if (r)
		return r < 0 ? r : 0;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s",
		 fv_json_str_in(claim, "metadata", "namespace"), fv_json_str_in(claim, "metadata", "name"));
	r = mig_get(m, path, &c);
	if (r)
		return r < 0 ? r : mig_fail(m, -ENOENT, "the claim was deleted");
	return fv_json_str_in(pv, "status", "phase") && streq(fv_json_str_in(pv, "status", "phase"), "Bound") &&
	       fv_json_str_in(c, "status", "phase") && streq(fv_json_str_in(c, "status", "phase"), "Bound");
}

/*
 * Delete the PV (only the incarnation @uid), let it go despite the finalizers of ours (a
 * component stopped never drops its own), wait until gone.
 */
static int remove_pv(struct mig *m, json_object *pv)
{
	_cleanup_json_ json_object *o = NULL;
	json_object *fin = fv_json_get(fv_json_obj(pv, "metadata"), "finalizers"), *keep, *patch, *pm;
	const char *drv = mig_csi_driver(pv);
	char path[512], left[512];
	size_t i;
	int r;

	snprintf(path, sizeof(path), PV_PATH "%s", m->pv);
	if (!fv_json_str_in(pv, "metadata", "deletionTimestamp")) {
		r = fv_kube_delete_uid(m->k, path, fv_json_str_in(pv, "metadata", "uid"), &o, m->err,
					sizeof(m->err));
		if (r < 0)
			return r;
		if (r != 200 && r != 202 && r != 404)
			return mig_fail(m, -EIO, "DELETE %s: HTTP %d: %s", path, r,
				    fv_kube_status_message(o));
		printf("deleted the PV %s (its claim is Lost until the new PV is bound)\n", m->pv);
	}
	keep = json_object_new_array();
	for (i = 0; fin && i < json_object_array_length(fin); i++) {
		const char *f = json_object_get_string(json_object_array_get_idx(fin, i));

		if (f && !mig_our_finalizer(f, drv))
			json_object_array_add(keep, json_object_new_string(f));
	}
	if (fin && json_object_array_length(keep) != json_object_array_length(fin)) {
		patch = json_object_new_object();
		pm = json_object_new_object();
		json_object_object_add(pm, "finalizers", keep);
		fv_json_set_str(pm, "uid", fv_json_str_in(pv, "metadata", "uid"));
		json_object_object_add(patch, "metadata", pm);
		r = send(m, "PATCH", path, patch);
		if (r < 0 && r != -ENOENT)
			return r;
	} else {
		json_object_put(keep);
	}
	r = wait_until(m, "the deletion of the PV", pv_gone_named, NULL);
	if (r == -ETIMEDOUT) {
		_cleanup_json_ json_object *now = NULL;

		if (mig_get(m, path, &now) == 0 && *mig_finalizers(now, left, sizeof(left)))
			return mig_fail(m, r, "the PV %s is not gone within %u s: its finalizers %s are not "
				    "ours to remove; whoever put them there must", m->pv, m->timeout_s,
				    left);
		return mig_fail(m, r, "the deletion of the PV not seen within %u s", m->timeout_s);
	}
	return r;
}

/*
 * The PV exists: every check before anything changes (its kind, its claim, the saved copy, the
 * volume idle, the directory's hand-over possible).  Returns 0 (to be moved), 1 (it is already
 * on the side asked for), <0 (refused: m->err; -EBUSY while in use).  *@claim is set on 0 and 1.
 */
static int check_pv(struct mig *m, json_object *pv, json_object **saved, json_object **claim)
{
	bool is_flex = mig_flex_driver(pv) != NULL, is_csi = mig_csi_driver(pv) != NULL;
	bool deleting = fv_json_str_in(pv, "metadata", "deletionTimestamp") != NULL;
	json_object *src;
	char drv[128];
	int r;

	if (!is_flex && !is_csi)
		return mig_fail(m, -EINVAL, "PV %s is neither a FlexVolume nor a CSI PV", m->pv);
	r = bound_claim(m, pv, claim);
	if (r < 0)
		return r;
	if ((m->rollback ? is_flex : is_csi) && !deleting)
		return 1;
	if (m->rollback && !*saved)
		return mig_fail(m, -ENOENT, "no saved FlexVolume PV in '%s' to roll back to", m->save);
	if (is_csi && *saved && !mig_csi_name(m, mig_flex_driver(*saved), drv, sizeof(drv)) &&
	    !streq(mig_csi_driver(pv), drv))
		return mig_fail(m, -EINVAL, "PV %s is of CSI driver %s, not %s", m->pv, mig_csi_driver(pv), drv);
	if (is_flex) {
		r = mig_csi_name(m, mig_flex_driver(pv), drv, sizeof(drv));
		if (r < 0)
			return r;
		if (*saved && !streq(fv_json_str_in(*saved, "metadata", "uid") ?: "",
				     fv_json_str_in(pv, "metadata", "uid") ?: ""))
			return mig_fail(m, -EEXIST, "'%s' holds another PV %s (uid %s): move it away first",
				    m->save, m->pv, fv_json_str_in(*saved, "metadata", "uid"));
	}
	if (!deleting) {
		r = check_idle(m, fv_json_str_in(*claim, "metadata", "namespace"),
			       fv_json_str_in(*claim, "metadata", "name"));
		if (r < 0)
			return r;
	}
	/* the FlexVolume PV as it is saved (or will be): the directory to hand over or give back */
	src = *saved ?: pv;
	if (is_csi && m->rootfd < 0 && mig_nfs_dir(src) && mig_provisioned_by(pv) &&
	    streq(mig_provisioned_by(pv), mig_csi_driver(pv)))
		return mig_fail(m, -EINVAL, "PV %s: its directory was handed to %s: give --root (the share, "
			    "mounted here) to give it back to flexvol-provisioner", m->pv, mig_csi_driver(pv));
	if (mig_nfs_handover(m, src))
		return mig_move_record(m, src, !m->rollback, true);
	return 0;
}

/*
 * The PV exists: check it and its claim (check_pv()), and take it down (save, Retain, the
 * directory handed over or given back, delete).  Returns 0 (go on: create the new PV), 1 (it
 * is already the target PV, bound: done), <0.
 */
static int take_down(struct mig *m, json_object *pv, json_object **saved, json_object **claim)
{
	bool is_flex = mig_flex_driver(pv) != NULL;
	bool deleting = fv_json_str_in(pv, "metadata", "deletionTimestamp") != NULL;
	json_object *src;
	char path[512];
	int r;

	r = check_pv(m, pv, saved, claim);
	if (r < 0)
		return r;
	if (r == 1) {
		r = wait_until(m, "the PV and its claim Bound", both_bound, *claim);
		if (r < 0)
			return r;
		printf("PV %s is %s and bound to %s/%s: nothing to do\n", m->pv,
		       is_flex ? "a FlexVolume PV" : "a CSI PV", fv_json_str_in(*claim, "metadata", "namespace"),
		       fv_json_str_in(*claim, "metadata", "name"));
		return 1;
	}
	src = *saved ?: pv;
	if (is_flex && !*saved) {
		r = write_saved(m, m->save, pv);
		if (r < 0)
			return r;
		*saved = json_object_get(pv);
		printf("saved the FlexVolume PV %s in %s\n", m->pv, m->save);
	}
	snprintf(path, sizeof(path), PV_PATH "%s", m->pv);
	if (!deleting && !streq(fv_json_str(fv_json_obj(pv, "spec"), "persistentVolumeReclaimPolicy") ?: "",
				"Retain")) {
		json_object *p = json_object_new_object(), *sp = json_object_new_object();

		fv_json_set_str(sp, "persistentVolumeReclaimPolicy", "Retain");
		json_object_object_add(p, "spec", sp);
		r = send(m, "PATCH", path, p);
		if (r < 0)
			return r;
		printf("set the reclaim policy of PV %s to Retain\n", m->pv);
	}
	/* before the PV goes: a run stopped after it finds the record moved, as the new PV says */
	if (mig_nfs_handover(m, src)) {
		r = mig_move_record(m, src, !m->rollback, false);
		if (r < 0)
			return r;
	}
	return remove_pv(m, pv);
}

/* The PV is gone (a run stopped between the deletion and the creation): its claim, from the copy. */
static int claim_of_saved(struct mig *m, json_object *saved, json_object **claim)
{
	json_object *ref = fv_json_obj(fv_json_obj(saved, "spec"), "claimRef");
	const char *ns = fv_json_str(ref, "namespace"), *name = fv_json_str(ref, "name");
	char path[600];
	int r;

	if (!ns || !fv_kube_name_ok(ns) || !name || !fv_kube_name_ok(name))
		return mig_fail(m, -EINVAL, "the saved PV in '%s' has no claim", m->save);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
	r = mig_get(m, path, claim);
	if (r)
		return r < 0 ? r : mig_fail(m, -ENOENT, "the claim %s/%s of PV %s is gone", ns, name, m->pv);
	return 0;
}

/*
 * The PV binder binds a Lost claim again when it next syncs it: at once on a change of the
 * claim, else at its periodic resync (kube-controller-manager --pvclaimbinder-sync-period, 15 s
 * by default). An annotation saying where the volume went is that change. Not fatal: without it
 * the claim is Bound at the resync.
 */
static void nudge_claim(struct mig *m, json_object *claim)
{
	json_object *p = json_object_new_object(), *md = json_object_new_object(),
		    *ann = json_object_new_object();
	char path[600];

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s",
		 fv_json_str_in(claim, "metadata", "namespace"), fv_json_str_in(claim, "metadata", "name"));
	fv_json_set_str(ann, MIGRATED_TO, m->rollback ? "flexvolume" : "csi");
	json_object_object_add(md, "annotations", ann);
	json_object_object_add(p, "metadata", md);
	if (send(m, "PATCH", path, p) < 0) {
		printf("could not annotate the claim (%s): it is bound at the binder's next resync\n",
		       m->err);
		m->err[0] = '\0';
	}
}

/* The saved copy (or NULL) and the PV (or NULL); one of them at least, else -ENOENT. */
static int load(struct mig *m, json_object **saved, json_object **pv)
{
	char path[512];
	int r;

	r = read_saved(m, saved);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), PV_PATH "%s", m->pv);
	r = mig_get(m, path, pv);
	if (r < 0)
		return r;
	if (!*pv && !*saved)
		return mig_fail(m, -ENOENT, "PV %s does not exist and '%s' holds no saved copy", m->pv,
				m->save);
	return 0;
}

int mig_run(struct mig *m)
{
	_cleanup_json_ json_object *pv = NULL, *saved = NULL, *claim = NULL;
	json_object *body;
	double t0 = now_s();
	int r;

	r = load(m, &saved, &pv);
	if (r < 0)
		return r;
	r = pv ? take_down(m, pv, &saved, &claim) : claim_of_saved(m, saved, &claim);
	if (r)
		return r < 0 ? r : 0;
	body = mig_new_pv(m, saved, claim, !m->rollback);
	if (!body)
		return -EIO;
	r = send(m, "POST", "/api/v1/persistentvolumes", body);
	if (r < 0)
		return r;
	printf("created PV %s as a %s PV bound to claim %s/%s (uid %s)\n", m->pv,
	       m->rollback ? "FlexVolume" : "CSI", fv_json_str_in(claim, "metadata", "namespace"),
	       fv_json_str_in(claim, "metadata", "name"), fv_json_str_in(claim, "metadata", "uid"));
	nudge_claim(m, claim);
	r = wait_until(m, "the PV and its claim Bound", both_bound, claim);
	if (r == 0)
		printf("PV %s and claim %s/%s are Bound (%.1f s)\n", m->pv,
		       fv_json_str_in(claim, "metadata", "namespace"), fv_json_str_in(claim, "metadata", "name"),
		       now_s() - t0);
	return r;
}

int mig_plan(struct mig *m)
{
	_cleanup_json_ json_object *pv = NULL, *saved = NULL, *claim = NULL;
	const char *to = m->rollback ? "FlexVolume" : "CSI";
	int r;

	r = load(m, &saved, &pv);
	if (r < 0)
		return r;
	if (!pv) {
		r = claim_of_saved(m, saved, &claim);
		if (r < 0)
			return r;
		printf("PV %s: gone (an interrupted run): create it as a %s PV from '%s', bound to "
		       "claim %s/%s\n", m->pv, to, m->save, fv_json_str_in(claim, "metadata", "namespace"),
		       fv_json_str_in(claim, "metadata", "name"));
		return 0;
	}
	r = check_pv(m, pv, &saved, &claim);
	if (r < 0)
		return r;
	if (r == 1)
		printf("PV %s: already a %s PV, claim %s/%s: nothing to do\n", m->pv, to,
		       fv_json_str_in(claim, "metadata", "namespace"), fv_json_str_in(claim, "metadata", "name"));
	else
		printf("PV %s (%s, claim %s/%s): %s '%s', Retain, delete it, create it as a %s PV%s\n", m->pv,
		       mig_flex_driver(pv) ?: mig_csi_driver(pv), fv_json_str_in(claim, "metadata", "namespace"),
		       fv_json_str_in(claim, "metadata", "name"), saved ? "its copy in" : "save it to",
		       m->save, to, mig_nfs_handover(m, saved ?: pv) ? ", its directory handed over" : "");
	return 0;
}
