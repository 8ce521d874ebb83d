/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service, per driver (docs/design.md, "CSI").
 *
 * controller.c serves the Controller calls for the driver the endpoint runs,
 * through that driver's table below (controller-loop.c, controller-nfs.c,
 * controller-iscsi.c); a driver without a table, or not set up to serve it
 * (serves()), has no Controller service, and its calls are UNIMPLEMENTED.
 * The profile (csi.h) declares what the table has; controller.c checks each
 * call against it, then the handler answers the call itself.  create,
 * remove and capacity come together (CREATE_DELETE_VOLUME and
 * GET_CAPACITY), and publish and unpublish (PUBLISH_UNPUBLISH_VOLUME);
 * expand (EXPAND_VOLUME) goes with the op layer's expandfs on the node
 * (NodeExpandVolume, node.c).
 */
#ifndef FV_CSI_CONTROLLER_H
#define FV_CSI_CONTROLLER_H

#include <stdbool.h>
#include <stdint.h>

#include "csi.h"

typedef void csi_handler(struct grpc_call *call, const ProtobufCMessage *req);

struct csi_controller {
	const char *driver; /* the flexvol driver's name */
	/* Is it set up to serve here (nfs: --root and --share given)?  NULL: always. */
	bool (*serves)(const struct csi_profile *p);
	/* Can a volume of this driver have ID @id (stricter than csi_volume_id_ok())?  NULL: no more. */
	bool (*id_ok)(const char *id);
	csi_handler *create; /* CreateVolume */
	csi_handler *remove; /* DeleteVolume */
	/* Is there a volume @id: 0, or <0 (answered, NOT_FOUND when there is none). */
	int (*exists)(struct grpc_call *call, struct fv_ctx *cx, const char *id);
	csi_handler *capacity;	/* GetCapacity */
	csi_handler *expand;	/* ControllerExpandVolume, or NULL: volumes have no size */
	csi_handler *publish;	/* ControllerPublishVolume, or NULL: nothing to attach */
	csi_handler *unpublish; /* ControllerUnpublishVolume, with @publish */
	/*
	 * Snapshots (CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS): create serves
	 * CreateVolume from a snapshot too (csi/snapshot.c has the shared part).
	 */
	csi_handler *create_snapshot;
	csi_handler *delete_snapshot;
	csi_handler *list_snapshots;
	bool clones; /* CLONE_VOLUME: create serves CreateVolume from a volume */
};

/* The table of driver @drv that serves with profile @p, or NULL (controller.c). */
const struct csi_controller *csi_controller_of(const struct csi_profile *p);

/*
 * The ID of the volume CreateVolume names @name: the name itself when the
 * driver's IDs may take it (the external-provisioner's "pvc-<uid>"), else
 * "pvc-" and a hash of it, which they must take: the same name always gives
 * the same ID (a retried CreateVolume finds its volume).
 */
void csi_volume_id_of(const char *name, char *id, size_t len);

/* Is @id a volume ID of this driver's (csi_volume_id_ok() and the table's id_ok)? */
bool csi_id_ok(const char *id);

/*
 * The longest CreateVolume name: the spec's 128 bytes and more, what an owner
 * record keeps whole (fv_owner's pv).
 */
#define CSI_NAME_MAX 255

/* Check CreateVolume's name and capabilities, and refuse a content source: 0 or <0 (answered). */
int csi_create_checks(struct grpc_call *call, const Csi__V1__CreateVolumeRequest *q);

/*
 * A volume made before for the same name, of @have bytes: it must fit the
 * range @cr asked now (CSI: else ALREADY_EXISTS), and be a capacity at all
 * (at most INT64_MAX; else FAILED_PRECONDITION: a record gone wrong).  0 or
 * <0 (answered).
 */
int csi_check_made(struct grpc_call *call, const char *id, uint64_t have,
		   const Csi__V1__CapacityRange *cr);

/*
 * Answer CreateVolume: volume @id of @capacity bytes (0: unknown), its
 * volume context the @n pairs @keys and @vals; for a node-local driver,
 * @node as its topology; the request's content @source, if any, echoed.
 */
void csi_reply_volume(struct grpc_call *call, const char *id, uint64_t capacity, size_t n,
		      const char *const *keys, const char *const *vals, const char *node,
		      const Csi__V1__VolumeContentSource *source);

/* Is @key one of the sidecars' own parameters ("csi.storage.k8s.io/...")? */
bool csi_sidecar_param(const char *key);

/*
 * The ID of the snapshot CreateSnapshot names @name: the name itself when it
 * is one of [a-z0-9-] up to 63 (the external-snapshotter's "snapshot-<uid>"),
 * else "snapshot-" and a hash of it (the name kept with the snapshot, so
 * two names never share one).
 */
void csi_snapshot_id_of(const char *name, char *id, size_t len);

/* Is @id a snapshot ID csi_snapshot_id_of() can give? */
bool csi_snapshot_id_ok(const char *id);

/* Answer CreateSnapshot: snapshot @id of volume @source, @size bytes, made at @created (s). */
void csi_reply_snapshot(struct grpc_call *call, const char *id, const char *source, uint64_t size,
			int64_t created);

/* A snapshot as ListSnapshots collects them (csi/snapshot.c). */
struct csi_snapshot {
	char id[96], source[256];
	uint64_t size;
	int64_t created;
};

/*
 * Answer ListSnapshots with the @n snapshots @s (any order; sorted here by
 * ID), those of the request's filters, paged by its max_entries and
 * starting_token.
 */
void csi_reply_snapshots(struct grpc_call *call, const Csi__V1__ListSnapshotsRequest *q,
			 struct csi_snapshot *s, size_t n);

extern const struct csi_controller csi_controller_loop, csi_controller_nfs, csi_controller_iscsi;

#endif
