/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-migrate: a bound FlexVolume PV of a flexvol driver to the CSI driver of the same
 * backing and back, keeping the claim and the data (docs/migration.md).  main.c reads the
 * command line, steps.c runs the steps against the API server, pv.c says what the new PV is
 * and who reclaims it.
 */
#ifndef MIG_MIGRATE_H
#define MIG_MIGRATE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "fv/macro.h"
#include "fv/kube.h"

#define MIG_PV_PATH "/api/v1/persistentvolumes/"

/* --- cluster.c: the API server, found as kubectl finds it --------------------------------- */

/* kubectl's part: the program, and its --kubeconfig and --context (or NULL) */
struct mig_kubectl {
	const char *kubectl;
	const char *kubeconfig;
	const char *context;
};

struct mig_cluster {
	pid_t proxy;		/* kubectl proxy, or 0 */
	char dir[256];		/* its directory (0700), or "" */
	char sock[280];		/* its socket in dir */
	char *incluster;	/* the server's URL made from the pod's environment, or NULL */
};

/*
 * mig_cluster_open() - complete @cfg: --server as given, else the pod's service account in a
 * pod, else kubectl proxy on a socket of ours for kubectl's configuration (@kc).  0, or <0 with
 * a message in m->err.  mig_cluster_close() ends and removes what it started.
 */
struct mig;
int mig_cluster_open(struct mig_cluster *c, struct fv_kube_config *cfg, const struct mig_kubectl *kc,
		     struct mig *m);
void mig_cluster_close(struct mig_cluster *c);

/* One run of the command. */
struct mig {
	struct fv_kube *k;
	const char *pv;		/* the PV's name */
	const char *save;	/* the saved copy of the FlexVolume PV */
	const char *csi_name;	/* or NULL: <driver>.csi.flexvol */
	const char *root;	/* or NULL: the nfs share, mounted here (--root) */
	int rootfd;		/* its descriptor, or -1 */
	bool rollback;
	unsigned int timeout_s;
	char err[FV_KUBE_ERR_MAX];
};

static inline void mig_jput(json_object **o)
{
	if (*o)
		json_object_put(*o);
}
#define _cleanup_json_ _cleanup_(mig_jput)

/*
 * mig_run() - one run for m->pv: its steps printed on stdout.  0: done (or nothing to do);
 * -EBUSY: refused, the volume is in use (run it again once it is not); <0 otherwise, the
 * message in m->err.
 */
int mig_run(struct mig *m);

/*
 * mig_plan() - what mig_run() would do for m->pv, one line on stdout, with every check it makes
 * before changing anything (the volume idle among them); nothing is changed.  0: it can run (or
 * has nothing to do); -EBUSY: in use; <0 otherwise (m->err).
 */
int mig_plan(struct mig *m);

/* The message of a failure into m->err; returns @r. */
int mig_fail(struct mig *m, int r, const char *fmt, ...) _printf_(3, 4);

/* GET @path: 0 and *ret, 1 for 404, <0 otherwise (message in m->err). */
int mig_get(struct mig *m, const char *path, json_object **ret);

/* --- pv.c ------------------------------------------------------------------------------- */

/* The driver of @pv's spec.flexVolume, spec.csi; NULL when it has none. */
const char *mig_flex_driver(json_object *pv);
const char *mig_csi_driver(json_object *pv);

/* The CSI driver name of the flexvol driver of @flexdrv ("flexvol/loop" -> "loop.csi.flexvol"). */
int mig_csi_name(struct mig *m, const char *flexdrv, char *buf, size_t len);

/* @pv's pv.kubernetes.io/provisioned-by: the side that reclaims it, or NULL. */
const char *mig_provisioned_by(json_object *pv);

/* The directory flexvol-provisioner made on an nfs share for the claim of @saved, or NULL. */
const char *mig_nfs_dir(json_object *saved);

/* Is the nfs directory of @saved handed over (or given back): --root and a directory of ours? */
bool mig_nfs_handover(struct mig *m, json_object *saved);

/*
 * mig_move_record() - the owner record of @saved's directory made to name the CSI volume
 * (@to_csi) or the claim again (@check: only whether it can be).  0, or <0 (m->err).
 */
int mig_move_record(struct mig *m, json_object *saved, bool to_csi, bool check);

/* The PV to create from the saved FlexVolume PV @saved, bound to @claim; NULL: m->err. */
json_object *mig_new_pv(struct mig *m, json_object *saved, json_object *claim,
			    bool to_csi);

/* Is @f a finalizer of ours on a PV of CSI driver @csidrv (NULL: a FlexVolume PV)? */
bool mig_our_finalizer(const char *f, const char *csidrv);

/* The finalizers of @pv joined by ", " into @buf. */
const char *mig_finalizers(json_object *pv, char *buf, size_t len);

#endif
