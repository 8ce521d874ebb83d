/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-csi: the driver profile every service reads, and the kit the
 * service files share (docs/design.md, "CSI").
 *
 * The profile is built once at start-up (profile.c) from the flexvol
 * driver's table (struct fv_driver) and the driver's Controller table
 * (controller.h): what the endpoint serves for this driver, in the words of
 * the CSI spec, and the capability lists it answers with.  Every request is
 * checked against it, so an advertised capability and a served call cannot
 * disagree.  The service files (identity.c, node.c, controller.c and the
 * controller-<driver>.c tables) only translate requests: the work is the op
 * layer's (fv/op.h's runner) and lib/'s.
 */
#ifndef FV_CSI_H
#define FV_CSI_H

#include <stdbool.h>
#include <stddef.h>

#include "csi.pb-c.h"
#include "grpc.h"
#include "fv/ctx.h"

struct csi_controller;

/* The CSI access modes (VolumeCapability.AccessMode.Mode) as a bit each. */
#define CSI_MODE(m) (1u << (m))

struct csi_profile {
	const struct fv_driver *drv;		 /* --driver */
	const struct csi_controller *controller; /* its Controller table, when served here */
	char name[64];				 /* --driver-name, the CSI driver name */
	char topology_key[128];			 /* "topology.<name>/node" when node_local */
	const char *root;			 /* nfs --root: the share mounted here, or NULL */
	const char *share;			 /* nfs --share: "SERVER:/PATH", or NULL */

	bool stages;	 /* STAGE_UNSTAGE_VOLUME: a device mount per node, bound per pod */
	bool mounts;	 /* no staging: the driver mounts the volume on each pod's target */
	bool node_local; /* volumes reachable from one node: topology, NodeGetInfo's segment */
	bool expands;	 /* EXPAND_VOLUME, online */
	bool block;	 /* raw block volumes (access type block): a staged block-class driver */
	bool stats;	 /* GET_VOLUME_STATS and VOLUME_CONDITION: the driver's stats slot */
	unsigned int modes;   /* the access modes served: CSI_MODE() bits */
	unsigned int ro_modes; /* those that make the volume read-only on the node */

	/* the capability lists, built once (GetPluginCapabilities, Node..., Controller...) */
	Csi__V1__PluginCapability *plugin_caps[3];
	size_t n_plugin_caps;
	Csi__V1__NodeServiceCapability *node_caps[4];
	size_t n_node_caps;
	Csi__V1__ControllerServiceCapability *controller_caps[8];
	size_t n_controller_caps;
};

/* The endpoint's profile, fixed at start (main.c). */
extern struct csi_profile csi_plugin;

/*
 * csi_profile_init() - the profile of flexvol driver @drv served as CSI
 * driver @name (NULL: "<driver>.csi.flexvol"), nfs's @root and @share (or
 * NULL).  Returns 0, or -EINVAL with why in @err.
 */
int csi_profile_init(struct csi_profile *p, const struct fv_driver *drv, const char *name,
		     const char *root, const char *share, char *err, size_t len);

/* The map entries of every request type have this layout (protobuf-c map fields). */
struct csi_map_entry {
	ProtobufCMessage base;
	char *key;
	char *value;
};

/* --- the kit (kit.c): each answers the call when it fails --------------------------- */

/* INVALID_ARGUMENT "@what is/are required" unless @present: 0 or <0 (answered). */
int csi_need(struct grpc_call *call, bool present, const char *what);

/* Is @id a volume ID of ours: one path component of PV-name characters, at most 128 bytes? */
bool csi_volume_id_ok(const char *id);

/* NOT_FOUND: no volume of ours has the ID @id.  Returns <0 (answered). */
int csi_no_volume(struct grpc_call *call, const char *id);

/*
 * csi_open() - what a call on volume @id starts with: the ID one of ours
 * (else NOT_FOUND) and a fresh @cx with the node configuration loaded, as
 * each FlexVolume call has it (FAILED_PRECONDITION without one); @id may be
 * NULL for calls on no volume.  0 or <0 (answered).
 */
int csi_open(struct grpc_call *call, struct fv_ctx *cx, const char *id);

/*
 * csi_fail() - answer the op layer's (or lib/'s) error @r, its message in
 * @cx (else strerror), with its gRPC status; "@what: " before the message.
 * Returns @r.
 */
int csi_fail(struct grpc_call *call, struct fv_ctx *cx, int r, const char *what);

/* Answer error @r (its code from csi_code_of()) with a printf-style message; returns @r. */
int csi_fail_with(struct grpc_call *call, int r, const char *fmt, ...) _printf_(3, 4);

/* The gRPC status of the op layer's (or lib/'s) error @r. */
enum grpc_code csi_code_of(int r);

/* Is @cap served by this profile?  Else why not, in @why. */
bool csi_capability_served(const Csi__V1__VolumeCapability *cap, char *why, size_t len);

/* Does @cap ask for a raw block volume (access type block)? */
static inline bool csi_is_block(const Csi__V1__VolumeCapability *cap)
{
	return cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
}

/*
 * csi_check_capability() - a capability this profile serves (a filesystem
 * or, where served, a raw block device; no mount flags, a mode of
 * @csi_plugin.modes): 0 with *@fstype (NULL for raw block) and *@ro
 * (read-only on the node), or <0 (answered INVALID_ARGUMENT).
 */
int csi_check_capability(struct grpc_call *call, const Csi__V1__VolumeCapability *cap,
			 const char **fstype, bool *ro);

/* A call's volume context or secrets: @n entries of @map. */
struct csi_map {
	size_t n;
	struct csi_map_entry **map;
};

#define CSI_MAP(q, field) ((struct csi_map){ (q)->n_##field, (struct csi_map_entry **)(q)->field })

/*
 * The options of a call: the volume context @ctx (the keys kubernetes.io/...
 * are kubelet's and refused here), the capability's @fstype and @ro, @id as
 * the volume's name, and the request's @secrets (never logged), into @o
 * (fv_opts_done() frees it; the strings stay the request's).  0 or <0
 * (answered).
 */
int csi_opts(struct grpc_call *call, struct fv_ctx *cx, const char *id, const char *fstype,
	     bool ro, struct csi_map ctx, struct csi_map secrets, struct fv_opts *o);

/* The lock on volume @id's node state, as every op of it takes (fv/lock.h): fd or <0 (answered). */
int csi_lock_volume(struct grpc_call *call, struct fv_ctx *cx, const char *id, char *name,
		    size_t len);

extern const struct grpc_method csi_identity_methods[];
extern const size_t csi_identity_n;
extern const struct grpc_method csi_node_methods[];
extern const size_t csi_node_n;
extern const struct grpc_method csi_controller_methods[];
extern const size_t csi_controller_n;

#endif
