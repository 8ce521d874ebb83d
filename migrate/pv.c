/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-migrate: the PV it creates, and who reclaims the volume after a move (migrate.h).
 *
 * The side that reclaims a moved volume (a PV set to Delete, its claim gone) is the one its
 * annotation pv.kubernetes.io/provisioned-by names, and no other.  A PV that flexvol-provisioner
 * made is handed to the CSI driver's external-provisioner when that side can reclaim it: a loop
 * image is owned by the PV's name, which is the CSI volume ID (flexvol-csi's DeleteVolume
 * removes it, on the node the PV's topology term names); an nfs directory is owned by its
 * claim's uid in its owner record, which flexvol-csi's DeleteVolume does not take (it finds a
 * directory by the volume ID, directly on the share, and its record must name that ID): with
 * --root (the share mounted where migrate runs) the record is rewritten to name the directory,
 * which becomes the volume ID; without it the PV stays flexvol-provisioner's, which reclaims it
 * in either form.  A rollback gives everything back: the saved PV as it was, the record naming
 * the claim again.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fv/macro.h"
#include "fv/ownerdir.h"
#include "fv/util.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "migrate.h"

#define MIGRATE_PREFIX "flexvol/"
#define PROTECTION "kubernetes.io/pv-protection"
/* flexvol-provisioner's finalizer on a PV of policy Delete, and external-provisioner's */
#define PROVISIONER_FINALIZER "external-provisioner.volume.kubernetes.io/finalizer"
/* external-attacher's on a PV it attached: this prefix and its driver's name, sanitized */
#define ATTACHER_FINALIZER "external-attacher/"
#define PROVISIONED_BY "pv.kubernetes.io/provisioned-by"
#define HOSTNAME_KEY "kubernetes.io/hostname"

const char *mig_flex_driver(json_object *pv)
{
	return fv_json_str_in(fv_json_obj(pv, "spec"), "flexVolume", "driver");
}

const char *mig_csi_driver(json_object *pv)
{
	return fv_json_str_in(fv_json_obj(pv, "spec"), "csi", "driver");
}

int mig_csi_name(struct mig *m, const char *flexdrv, char *buf, size_t len)
{
	const char *d;

	if (!flexdrv || strncmp(flexdrv, MIGRATE_PREFIX, strlen(MIGRATE_PREFIX)))
		return mig_fail(m, -EINVAL, "PV '%s' is not a volume of a flexvol driver (driver '%s')",
			    m->pv, flexdrv ? flexdrv : "");
	d = flexdrv + strlen(MIGRATE_PREFIX);
	if (!streq(d, "loop") && !streq(d, "nfs") && !streq(d, "iscsi"))
		return mig_fail(m, -EINVAL, "PV '%s': no CSI driver for '%s'", m->pv, flexdrv);
	if (m->csi_name)
		snprintf(buf, len, "%s", m->csi_name);
	else
		snprintf(buf, len, "%s.csi.flexvol", d);
	return 0;
}

/* Copy member @key of @from into @to (deep), if present. */
static void copy_member(json_object *to, json_object *from, const char *key)
{
	json_object *v = fv_json_get(from, key), *c = NULL;

	if (v && json_object_deep_copy(v, &c, NULL) == 0)
		json_object_object_add(to, key, c);
}

const char *mig_provisioned_by(json_object *pv)
{
	return fv_json_str(fv_json_obj(fv_json_obj(pv, "metadata"), "annotations"), PROVISIONED_BY);
}

const char *mig_nfs_dir(json_object *saved)
{
	const char *by = mig_provisioned_by(saved), *drv = mig_flex_driver(saved);

	if (!by || !streq(by, "flexvol/nfs") || !drv || !streq(drv, "flexvol/nfs"))
		return NULL;
	return fv_json_str(fv_json_obj(fv_json_obj(fv_json_obj(saved, "spec"), "flexVolume"), "options"),
			"subPath");
}

/*
 * Can @s be the volume ID of a directory of flexvol-csi's nfs Controller service, which finds
 * its directory by the ID, directly below the share, and keeps it in the owner record's claim
 * (csi/controller-nfs.c: one path component of PV-name characters, fitting the record)?
 */
static bool nfs_volume_id_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n < sizeof(((struct fv_owner *)0)->claim) && !streq(s, ".") &&
	       !streq(s, "..") &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

bool mig_nfs_handover(struct mig *m, json_object *saved)
{
	return m->rootfd >= 0 && mig_nfs_dir(saved);
}

/*
 * The owner record of @saved's directory moved from @from to @to (@check: only whether it
 * can be).  The directory's name is the CSI volume ID; its claim's uid the provisioner's
 * owner.  A record naming @to already is done (a run again).
 */
int mig_move_record(struct mig *m, json_object *saved, bool to_csi, bool check)
{
	const char *dir = mig_nfs_dir(saved),
		   *uid = fv_json_str_in(fv_json_obj(saved, "spec"), "claimRef", "uid") ?: "";
	const char *from = to_csi ? uid : dir, *to = to_csi ? dir : uid;
	struct fv_owner o, other;
	int r;

	if (!nfs_volume_id_ok(dir))
		return mig_fail(m, -EINVAL, "PV %s: its directory '%s' cannot be a volume of the CSI driver, "
			    "which takes one directly on the share, of at most %zu letters, digits, "
			    "'.', '_' and '-': run without --root to keep it flexvol-provisioner's to "
			    "reclaim", m->pv, dir, sizeof(o.claim) - 1);
	if (check) {
		r = fv_ownerdir_owner(m->rootfd, dir, &o);
		if (r == -ENOENT)
			return mig_fail(m, -ENOENT, "PV %s: directory '%s' in '%s' has no owner record (is "
				    "that the share? PVs from before owner records: "
				    "flexvol-provisioner --record-owners)", m->pv, dir, m->root);
		if (r < 0)
			return mig_fail(m, r, "PV %s: the owner record of '%s' in '%s': %s", m->pv, dir,
				    m->root, r == -EBADMSG ? "not one of ours" : strerror(-r));
		if (!streq(o.claim, from) && !streq(o.claim, to))
			return mig_fail(m, -EPERM, "PV %s: directory '%s' is owned by %s, neither its claim "
				    "(%s) nor the CSI volume: not touched", m->pv, dir, o.claim, uid);
		return 0;
	}
	r = fv_ownerdir_transfer(m->rootfd, dir, from, to, &other);
	if (r < 0)
		return mig_fail(m, r, "PV %s: the owner record of '%s' not moved to %s: %s", m->pv, dir, to,
			    r == -FV_OWNERDIR_E_OWNED ? "owned by another" :
			    r == -FV_OWNERDIR_E_UNOWNED ? "no record" : strerror(-r));
	if (r > 0)
		printf("directory %s: its owner record now names %s (%s)\n", dir, to,
		       to_csi ? "the CSI volume: its CSI driver reclaims it" :
				"its claim: flexvol-provisioner reclaims it");
	return 0;
}

/*
 * A loop PV pinned to its node by kubernetes.io/hostname gets one more node selector term, on
 * the CSI driver's topology key (topology.<driver>/node, the node's name: what flexvol-csi
 * reports and kubelet labels the node with).  external-provisioner runs on every node
 * (distributed provisioning) and deletes only a PV its own node's topology reaches (its
 * VolumeIsAccessible); the scheduler takes either term, and both name the one node.
 */
static int add_topology_term(struct mig *m, json_object *spec, const char *drv)
{
	json_object *terms = fv_json_get(fv_json_obj(fv_json_obj(spec, "nodeAffinity"), "required"),
				      "nodeSelectorTerms");
	_cleanup_json_ json_object *nodes = NULL;
	json_object *names, *expr, *term, *exprs;
	char key[192];
	int r;

	if (!terms || !json_object_is_type(terms, json_type_array))
		return 0;
	names = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(terms); i++) {
		json_object *ex = fv_json_get(json_object_array_get_idx(terms, i), "matchExpressions");

		for (size_t j = 0; ex && json_object_is_type(ex, json_type_array) &&
				   j < json_object_array_length(ex); j++) {
			json_object *e = json_object_array_get_idx(ex, j), *vals = fv_json_get(e, "values");

			if (!fv_json_str(e, "key") || !streq(fv_json_str(e, "key"), HOSTNAME_KEY) ||
			    !fv_json_str(e, "operator") || !streq(fv_json_str(e, "operator"), "In"))
				continue;
			for (size_t k = 0; vals && json_object_is_type(vals, json_type_array) &&
					   k < json_object_array_length(vals); k++) {
				const char *host = json_object_get_string(json_object_array_get_idx(vals, k));
				const char *name = host;

				if (!nodes) {
					r = mig_get(m, "/api/v1/nodes", &nodes);
					if (r) {
						json_object_put(names);
						return r < 0 ? r : mig_fail(m, -EIO, "GET /api/v1/nodes: not found");
					}
				}
				/* the node of that hostname label; none (gone): kubelet's default name */
				for (size_t n = 0; n < json_object_array_length(fv_json_get(nodes, "items")); n++) {
					json_object *md = fv_json_obj(json_object_array_get_idx(
						fv_json_get(nodes, "items"), n), "metadata");
					const char *h = fv_json_str(fv_json_obj(md, "labels"), HOSTNAME_KEY);

					if (h && host && streq(h, host) && fv_json_str(md, "name"))
						name = fv_json_str(md, "name");
				}
				if (name && !fv_json_array_has(names, name))
					json_object_array_add(names, json_object_new_string(name));
			}
		}
	}
	if (!json_object_array_length(names)) {
		json_object_put(names);
		return 0;
	}
	snprintf(key, sizeof(key), "topology.%s/node", drv);
	expr = json_object_new_object();
	fv_json_set_str(expr, "key", key);
	fv_json_set_str(expr, "operator", "In");
	json_object_object_add(expr, "values", names);
	exprs = json_object_new_array();
	json_object_array_add(exprs, expr);
	term = json_object_new_object();
	json_object_object_add(term, "matchExpressions", exprs);
	json_object_array_add(terms, term);
	return 0;
}

/*
 * The PV to create from the saved FlexVolume PV @saved: as it was (@to_csi false: its spec,
 * its reclaim policy, its finalizers) or as a CSI PV of the same backing (volumeHandle = the
 * PV's name, which the FlexVolume drivers name the volume by, or the directory handed over;
 * volumeAttributes = the driver options; Retain; a PV of flexvol-provisioner annotated as its
 * CSI driver's when handed over).  Bound to @claim by its uid either way.  NULL: failed
 * (m->err).
 */
json_object *mig_new_pv(struct mig *m, json_object *saved, json_object *claim, bool to_csi)
{
	json_object *pv = json_object_new_object(), *md = json_object_new_object();
	json_object *spec = NULL, *ref = json_object_new_object(), *ann;
	json_object *flex = fv_json_obj(fv_json_obj(saved, "spec"), "flexVolume");
	const char *by = mig_provisioned_by(saved);
	char drv[128];

	json_object_deep_copy(fv_json_obj(saved, "spec"), &spec, NULL);
	json_object_object_add(pv, "spec", spec);
	fv_json_set_str(pv, "apiVersion", "v1");
	fv_json_set_str(pv, "kind", "PersistentVolume");
	fv_json_set_str(md, "name", m->pv);
	copy_member(md, fv_json_obj(saved, "metadata"), "labels");
	copy_member(md, fv_json_obj(saved, "metadata"), "annotations");
	if (!to_csi)
		copy_member(md, fv_json_obj(saved, "metadata"), "finalizers");
	/* the binding below is ours, not the controller's: it must not undo it */
	ann = fv_json_obj(md, "annotations");
	if (ann)
		json_object_object_del(ann, "pv.kubernetes.io/bound-by-controller");
	json_object_object_add(pv, "metadata", md);
	fv_json_set_str(ref, "apiVersion", "v1");
	fv_json_set_str(ref, "kind", "PersistentVolumeClaim");
	fv_json_set_str(ref, "namespace", fv_json_str_in(claim, "metadata", "namespace"));
	fv_json_set_str(ref, "name", fv_json_str_in(claim, "metadata", "name"));
	fv_json_set_str(ref, "uid", fv_json_str_in(claim, "metadata", "uid"));
	json_object_object_add(spec, "claimRef", ref);
	if (to_csi) {
		json_object *csi = json_object_new_object(), *attrs = NULL, *secret;
		bool nfs = mig_nfs_handover(m, saved),
		     loop = streq(fv_json_str(flex, "driver") ?: "", MIGRATE_PREFIX "loop");

		mig_csi_name(m, fv_json_str(flex, "driver"), drv, sizeof(drv));
		fv_json_set_str(csi, "driver", drv);
		fv_json_set_str(csi, "volumeHandle", nfs ? mig_nfs_dir(saved) : m->pv);
		fv_json_set_str(csi, "fsType", fv_json_str(flex, "fsType"));
		if (fv_json_get(flex, "readOnly"))
			json_object_object_add(csi, "readOnly",
					       json_object_new_boolean(
						       json_object_get_boolean(fv_json_get(flex, "readOnly"))));
		if (fv_json_get(flex, "options") &&
		    json_object_deep_copy(fv_json_get(flex, "options"), &attrs, NULL) == 0)
			json_object_object_add(csi, "volumeAttributes", attrs);
		/* a FlexVolume secret reaches the node's mount: CSI's stage secret */
		secret = fv_json_obj(flex, "secretRef");
		if (secret) {
			json_object *s = json_object_new_object();

			fv_json_set_str(s, "name", fv_json_str(secret, "name"));
			fv_json_set_str(s, "namespace", fv_json_str(secret, "namespace") ?
				 fv_json_str(secret, "namespace") : fv_json_str_in(claim, "metadata", "namespace"));
			json_object_object_add(csi, "nodeStageSecretRef", s);
		}
		json_object_object_del(spec, "flexVolume");
		json_object_object_add(spec, "csi", csi);
		json_object_object_add(spec, "persistentVolumeReclaimPolicy",
				       json_object_new_string("Retain"));
		/* flexvol-provisioner's PV, handed over: its CSI driver reclaims it now */
		if (ann && by && ((loop && streq(by, MIGRATE_PREFIX "loop")) || nfs))
			fv_json_set_str(ann, PROVISIONED_BY, drv);
		if (loop && add_topology_term(m, spec, drv) < 0) {
			json_object_put(pv);
			return NULL;
		}
	}
	return pv;
}

/* external-attacher's finalizer for CSI driver @drv (its GetFinalizerName). */
static void attacher_finalizer(const char *drv, char *buf, size_t len)
{
	size_t n;

	snprintf(buf, len, ATTACHER_FINALIZER "%s", drv);
	for (char *c = buf + strlen(ATTACHER_FINALIZER); *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		      *c == '-'))
			*c = '-';
	n = strlen(buf);
	if (n && buf[n - 1] == '-' && n + 1 < len)
		snprintf(buf + n, len - n, "X");
}

/*
 * Is @f a finalizer one of our components puts on a PV of CSI driver @csidrv (NULL: a
 * FlexVolume PV)?  pv-protection (the API's, while a claim is bound), the provisioner's
 * (flexvol-provisioner's and external-provisioner's: one name) and external-attacher's.  Each
 * holds the PV for work that is done once nothing uses the volume (check_idle) and its
 * reclaim policy is Retain: no component needs to run for the PV to go.
 */
bool mig_our_finalizer(const char *f, const char *csidrv)
{
	char att[192];

	if (streq(f, PROTECTION) || streq(f, PROVISIONER_FINALIZER))
		return true;
	if (!csidrv)
		return false;
	attacher_finalizer(csidrv, att, sizeof(att));
	return streq(f, att);
}

const char *mig_finalizers(json_object *pv, char *buf, size_t len)
{
	json_object *fin = fv_json_get(fv_json_obj(pv, "metadata"), "finalizers");
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; fin && i < json_object_array_length(fin) && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "",
				      json_object_get_string(json_object_array_get_idx(fin, i)) ?: "");
	return buf;
}
