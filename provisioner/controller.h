/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The controller: lists, then watches PersistentVolumeClaims and
 * PersistentVolumes, and hands each to the backend whose provisioner name its
 * class (claim) or provisioned-by annotation (PV) carries.  Nothing here
 * knows what an asset is (backend.h).
 */
#ifndef FVP_CONTROLLER_H
#define FVP_CONTROLLER_H

#include <json-c/json.h>
#include <stdbool.h>
#include <time.h>

#include "backend.h"
#include "events.h"

#define FVP_ANN_PROVISIONED_BY "pv.kubernetes.io/provisioned-by"
#define FVP_ANN_ON_DELETE "flexvol/on-delete"
#define FVP_ANN_SP "volume.kubernetes.io/storage-provisioner"
#define FVP_ANN_SP_BETA "volume.beta.kubernetes.io/storage-provisioner"
#define FVP_ANN_CLASS_BETA "volume.beta.kubernetes.io/storage-class"
#define FVP_ANN_SELECTED_NODE "volume.kubernetes.io/selected-node"
/*
 * On a claim from just before its asset is made until its PV exists (taken
 * off at the claim's next turn on a worker once it does): a claim deleted
 * meanwhile (even while this process is down) stays visible, with a
 * deletionTimestamp, until its asset is cleaned up.
 */
#define FVP_CLAIM_FINALIZER "flexvol/provisioning"

/* Our PV's name: "pvc-" and the claim's uid (at most 64 bytes, checked). */
#define FVP_PV_NAME_MAX 128
/* A log line's subject: a claim, a PV and a quantity, names of up to 253 bytes. */
#define FVP_CTL_WHAT_MAX 800

struct fv_kube;
struct fvp_queue;

struct fvp_prov {
	struct fv_kube *k;
	struct fvp_site site;
	bool record_owners;  /* --record-owners: write missing owner records of our PVs */
	struct fvp_events ev;
	/* the runtime (runner.c): its command-line settings */
	unsigned int resync;	   /* s: every known object queued again (from memory, no list) */
	unsigned int watch_s;	   /* s: a watch's timeoutSeconds (it is then resumed) */
	unsigned int workers;	   /* worker threads */
	unsigned int retry_base_ms, retry_max_ms; /* per-object backoff */
	struct fvp_queue *queue;
	struct fvp_store *store;   /* the watches' PVs and classes (runner.c); NULL: ask the API */
	volatile int healthy_at;   /* monotonic s of the last watch-loop round (/healthz) */
	volatile int synced;	   /* the first list is done (/readyz) */
	bool leader_elect;	   /* false: every replica works (the gauge says leader) */
};

/* The backend serving provisioner @name, or NULL. */
const struct fvp_backend *fvp_ctl_backend(const char *name);

/*
 * One claim or PV as the API has it now (from a list or a watch event),
 * called by a worker (runner.c).  0: done; <0: try again after the object's
 * backoff; >0: try again after that many seconds.
 */
int fvp_ctl_claim_changed(struct fvp_prov *p, json_object *pvc);
int fvp_ctl_claim_deleted(struct fvp_prov *p, json_object *pvc);
int fvp_ctl_pv_changed(struct fvp_prov *p, json_object *pv);
int fvp_ctl_pv_deleted(struct fvp_prov *p, json_object *pv);

/*
 * fvp_ctl_trim() - what the handlers need of a claim or (@is_pv) a PV, as a
 * new object in *ret: its name, namespace, uid, resourceVersion,
 * deletionTimestamp, finalizers, labels and annotations, its spec and its
 * status (never managedFields and the rest of its metadata).  Returns 1;
 * 0 with *ret NULL when no handler acts on the object as it is, nor on its
 * deletion: a claim without our finalizer and with nothing to grow that is
 * handed to another provisioner, not handed over at all, or ours and past
 * Pending while its PV exists (p->store); a PV not provisioned by us, or ours
 * and Bound with its finalizer.  Such an object is neither kept nor queued (its next change
 * comes by the watch).  -ENOMEM.
 */
int fvp_ctl_trim(const struct fvp_prov *p, bool is_pv, json_object *obj, json_object **ret);

/* StorageClass @sc without its metadata but name, uid and resourceVersion; NULL: out of memory. */
json_object *fvp_ctl_trim_class(json_object *sc);

/*
 * Shared by the flows (provision.c, resize.c, reclaim.c), in controller.c
 * unless named otherwise.
 */

/* Monotonic seconds (the metrics' durations). */
double fvp_ctl_now_s(void);

/*
 * GET the StorageClass @name.  Returns 1 with *ret and *ret_b when it exists
 * and names one of our backends, 0 when it is absent or someone else's, <0 on
 * an API error.
 */
int fvp_ctl_get_class(struct fvp_prov *p, const char *name, json_object **ret,
		      const struct fvp_backend **ret_b);

/*
 * fvp_finalizer_set() - add (@on) or remove finalizer @fin of @obj (a claim, or a PV when it
 * has no namespace), as an update of the object read: a merge patch of its finalizers with its
 * resourceVersion as precondition.  The one way the controller's flows and the node agent
 * change a finalizer.  Returns 0 with the updated object in *ret (may be NULL), 1 when the
 * object is gone, -EAGAIN on a conflict (the newer object comes by the watch, or the agent's
 * next pass), <0.
 */
int fvp_finalizer_set(struct fv_kube *k, json_object *obj, const char *fin, bool on,
		      json_object **ret);

/* PATCH @path with the merge patch @patch (taken): the HTTP status or <0; logs as @what. */
int fvp_ctl_patch(struct fvp_prov *p, const char *path, json_object *patch, const char *what);

/*
 * fvp_ctl_merge_patch() - the merge patch setting member @a.@b.@c of an object to the string
 * @v ({"a":{"b":{"c":v}}}), or removing it when @v is NULL (null); NULL when out of memory.
 */
json_object *fvp_ctl_merge_patch(const char *a, const char *b, const char *c, const char *v);

/* A bound claim asking for more than its PV has (resize.c): as fvp_ctl_claim_changed(). */
int fvp_ctl_claim_resize(struct fvp_prov *p, json_object *pvc);

struct fvp_gauges;

/* The queue's and the lease's gauges for metrics.c (runner.c). */
void fvp_ctl_gauges(void *p, struct fvp_gauges *g);

/* List, watch and work until *stopping (runner.c). */
int fvp_ctl_run(struct fvp_prov *p, volatile int *stopping);

#endif
