/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service, per driver (docs/design.md, "CSI").
 *
 * controller.c serves the Controller calls and NodeExpandVolume for the
 * driver the endpoint runs, through that driver's table below
 * (controller-loop.c, controller-nfs.c, controller-attach.c for iscsi); a
 * driver without a table, or not set up to serve it, has no Controller
 * service, and its calls are UNIMPLEMENTED.  Every handler answers its call
 * itself; controller.c has checked that the service is served and that the
 * table has the handler (else UNIMPLEMENTED), and, for
 * ValidateVolumeCapabilities, does the rest around @exists.  create, remove
 * and capacity come together (the CREATE_DELETE_VOLUME and GET_CAPACITY
 * capabilities), as do expand and node_expand (EXPAND_VOLUME), and publish
 * and unpublish (PUBLISH_UNPUBLISH_VOLUME).
 */
#ifndef FV_CSI_CONTROLLER_H
#define FV_CSI_CONTROLLER_H

#include <stdbool.h>

#include "csi.h"

struct fv_ctx;

typedef void csi_handler(struct grpc_call *call, const ProtobufCMessage *req);

struct csi_controller {
	const char *driver;   /* the flexvol driver's name */
	bool (*serves)(void); /* set up to serve here (its flags given) */
	csi_handler *create;  /* CreateVolume */
	csi_handler *remove;  /* DeleteVolume */
	/* Is there a volume @id: 0, or <0 (answered, NOT_FOUND when there is none). */
	int (*exists)(struct grpc_call *call, struct fv_ctx *cx, const char *id);
	csi_handler *capacity;	  /* GetCapacity */
	csi_handler *expand;	  /* ControllerExpandVolume, or NULL: volumes have no size */
	csi_handler *node_expand; /* NodeExpandVolume, with @expand */
	csi_handler *publish;	  /* ControllerPublishVolume, or NULL: nothing to attach */
	csi_handler *unpublish;	  /* ControllerUnpublishVolume, with @publish */
};

extern const struct csi_controller csi_controller_loop, csi_controller_nfs, csi_controller_iscsi;

/*
 * The ID of the volume CreateVolume names @name: the name itself when @ok
 * takes it (the external-provisioner's "pvc-<uid>"), else "pvc-" and a
 * hash of it, which @ok must take: the same name always gives the same ID
 * (a retried CreateVolume finds its volume).
 */
void csi_volume_id_of(const char *name, bool (*ok)(const char *id), char *id, size_t len);

/* Check CreateVolume's name and capabilities, and refuse a content source: 0 or <0 (answered). */
int csi_create_checks(struct grpc_call *call, const Csi__V1__CreateVolumeRequest *q);

/* Is @key one of the sidecars' own parameters ("csi.storage.k8s.io/...")? */
bool csi_sidecar_param(const char *key);

#endif
