/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A provisioner backend: what one provisioner name ("flexvol/nfs") makes and
 * removes.  The controller (controller.c) owns everything Kubernetes: which
 * claims and PVs to act on, the claim's finalizer, the PV object, events and
 * reclaim policy.  A backend owns its class parameters and its assets (a
 * directory on a share, an image on a node).  It never changes an API
 * object; it may read some (the loop backend reads the selected node and the
 * capacity its node agent publishes) through site->k.
 *
 * The controller calls, for one claim:
 *   class_check  -> prepare (no side effects) -> [finalizer] -> create -> [PV POST]
 * for a claim deleted before its PV existed:  cleanup
 * for a released PV of this backend:          reclaim
 * for a bound claim asking for more (expand):  the controller raises the PV's
 *                                               capacity and sets the claim's
 *                                               resize status (kubelet grows it)
 *
 * Every function returns 0 or a negative errno with a message for a human in
 * @err (the controller turns it into an event or a log line).  All of them
 * must be idempotent: the controller calls them again after a crash, a
 * conflict or a re-list, and two replicas may call them at once.
 */
#ifndef FVP_BACKEND_H
#define FVP_BACKEND_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "params.h"

/* What this process was given on its command line, for the backends. */
struct fv_kube;

struct fvp_site {
	int rootfd;	   /* --root (O_PATH): the share, mounted into the pod; -1 without nfs */
	const char *share; /* --share SERVER:PATH, or NULL: every class */
	struct fv_kube *k;	   /* the API, for reads only */
	const char *capacity_ns; /* --capacity-namespace: where node agents publish */
	const char *root;  /* --root as given: opened again by a deadline child (childcall.c) */
	unsigned int fs_timeout_s; /* deadline of one create/cleanup/reclaim; 0: in-process */
};

/* One volume as prepare() plans it. */
struct fvp_volume {
	json_object *flex_volume;	/* the PV's spec.flexVolume (owned; fvp_volume_done) */
	json_object *node_affinity;	/* the PV's spec.nodeAffinity, or NULL (owned) */
	json_object *labels;		/* the PV's metadata.labels, or NULL (owned) */
	char capacity[32];		/* the PV's capacity, or "": the claim's request */
	const char *on_delete;		/* recorded on the PV (flexvol/on-delete); static */
	char asset[FVP_PATH_MAX + 1];	/* what create() makes, in the backend's terms */
	char where[FVP_PATH_MAX + 320]; /* where it lives, for the success event */
};

/* What create() found. */
enum fvp_made {
	FVP_MADE_NEW,	  /* made now */
	FVP_MADE_BEFORE,  /* made for this very claim before (a retry, a restart) */
	FVP_MADE_ADOPTED, /* existed without an owner; the class allowed adopting it */
};

struct fvp_backend {
	const char *name; /* the StorageClass provisioner and the PV's provisioned-by */
	bool can_expand;  /* honours a class's allowVolumeExpansion: true (grows online: the
			   * controller plays the resizer, the driver's expandfs grows it) */
	bool node_local;  /* its assets live on the PV's node, reclaimed there by the node agent */

	/*
	 * Is StorageClass @sc valid, and does this instance serve it?  0: yes;
	 * 1: valid, served by another instance (why in @err, logged); -EINVAL.
	 */
	int (*class_check)(const struct fvp_site *s, json_object *sc, char *err, size_t errlen);

	/*
	 * Plan the volume of claim @pvc (PV @pv_name) in *vol.  No side effects.
	 * -ENOSPC: not on the node the scheduler selected (no room, not in the
	 * class's topology, the node is gone): the controller says so in an
	 * event and hands the claim back to the scheduler.
	 */
	int (*prepare)(const struct fvp_site *s, json_object *sc, json_object *pvc,
		       const char *pv_name, struct fvp_volume *vol, char *err, size_t errlen);

	/*
	 * Make the asset prepare() planned.  *made says what was found; with
	 * FVP_MADE_ADOPTED, @err says what was adopted (for an event).  Never
	 * takes over an asset another claim owns, or one without an owner
	 * record unless the class allows adopting it.
	 */
	int (*create)(const struct fvp_site *s, json_object *sc, json_object *pvc,
		      const struct fvp_volume *vol, enum fvp_made *made, char *err, size_t errlen);

	/*
	 * Claim @pvc went away before its PV existed: remove what create() may
	 * have made, if nothing was written into it.  0: removed or absent; 1:
	 * kept (why in @err); <0.
	 */
	int (*cleanup)(const struct fvp_site *s, json_object *sc, json_object *pvc,
		       const char *pv_name, char *err, size_t errlen);

	/*
	 * PV @pv (provisioned by this backend) is reclaimed: apply @on_delete
	 * (the class parameter's words: archive, delete, retain; NULL: the
	 * backend's default) to its asset, only if the asset's owner record
	 * names the PV's claim.  0: done (what was done in @done); 1: not this
	 * instance's to touch (why in @err); <0: failed or refused, the PV is
	 * kept and this is retried.
	 * Not called for a node_local backend.
	 */
	int (*reclaim)(const struct fvp_site *s, json_object *pv, const char *on_delete, char *done,
		       size_t donelen, char *err, size_t errlen);

	/*
	 * --record-owners (a migration): PV @pv of this backend may predate
	 * owner records; record its claim as the owner of its asset when the
	 * asset has none.  1: recorded now (what in @err); 0: nothing to do;
	 * <0: refused or failed (why in @err).
	 */
	int (*record_owner)(const struct fvp_site *s, json_object *pv, char *err, size_t errlen);
};

void fvp_volume_done(struct fvp_volume *vol);

/*
 * fvp_pv_driver_options() - the driver options of @pv, a PV annotated as ours: its flexVolume's
 * options when that is of @driver, or the volumeAttributes of a CSI PV (one `migrate` moved
 * to CSI and left ours to reclaim: they are the same options); NULL otherwise.
 */
json_object *fvp_pv_driver_options(json_object *pv, const char *driver);

/* The backends this binary has (backend-*.c), NULL-terminated. */
extern const struct fvp_backend *const fvp_backends[];

/*
 * Serve only the backends named in @list ("flexvol/nfs,flexvol/loop"); all
 * of them until this is called.  Returns 0, or -EINVAL naming the unknown one.
 */
int fvp_backends_select(const char *list, char *err, size_t errlen);

/* Is @b served by this process? */
bool fvp_backend_enabled(const struct fvp_backend *b);

#endif
