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

#define ANN_PROVISIONED_BY "pv.kubernetes.io/provisioned-by"
#define ANN_ON_DELETE "flexvol/on-delete"
#define ANN_SP "volume.kubernetes.io/storage-provisioner"
#define ANN_SP_BETA "volume.beta.kubernetes.io/storage-provisioner"
#define ANN_CLASS_BETA "volume.beta.kubernetes.io/storage-class"
#define ANN_SELECTED_NODE "volume.kubernetes.io/selected-node"

#define QUEUE_MAX 4096

struct kube;

struct pending {
	bool is_pv;
	char type[16];
	json_object *obj;
};

struct prov {
	struct kube *k;
	struct fvp_site site;
	unsigned int resync; /* watch timeoutSeconds */
	bool record_owners;  /* --record-owners: write missing owner records of our PVs */
	struct fvp_events ev;
	struct pending queue[QUEUE_MAX];
	size_t nqueue;
	bool expired; /* a watch said 410 Gone */
};

/* The backend serving provisioner @name, or NULL. */
const struct fvp_backend *ctl_backend(const char *name);

/* One claim or PV as the API has it now (from a list or a watch event). */
void ctl_claim_changed(struct prov *p, json_object *pvc);
void ctl_claim_deleted(struct prov *p, json_object *pvc);
void ctl_pv_changed(struct prov *p, json_object *pv);
void ctl_pv_deleted(struct prov *p, json_object *pv);

/* List and watch until *stopping. */
int ctl_run(struct prov *p, volatile int *stopping);

#endif
