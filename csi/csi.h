/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-csi: what main.c, identity.c, node.c and the controller files share
 * (docs/design.md, "CSI").
 */
#ifndef FV_CSI_H
#define FV_CSI_H

#include <stdbool.h>
#include <stddef.h>

#include "csi.pb-c.h"
#include "grpc.h"

struct fv_driver;
struct fv_ctx;
struct fv_opts;

/* The endpoint's settings, fixed at start (main.c). */
struct csi_endpoint {
	const struct fv_driver *drv; /* --driver */
	char name[64];		     /* --driver-name, the CSI driver name */
	char topology_key[128];	     /* "topology.<name>/node" for node-local drivers */
	const char *root;	     /* --root: nfs, the share mounted here (controller), or NULL */
	const char *share;	     /* --share: nfs, "SERVER:/PATH" as nodes mount it, or NULL */
};

extern struct csi_endpoint csi_ep;

/* The map entries of every request type have this layout (protobuf-c map fields). */
struct csi_map_entry {
	ProtobufCMessage base;
	char *key;
	char *value;
};

/* Does the endpoint serve stage/unstage for this driver (a block driver's device mount)? */
bool csi_node_stages(void);
/* Does the driver mount its volumes on the pod's target itself (nfs: no device, no staging)? */
bool csi_node_mounts(void);
/* Is access mode @mode served for this driver?  *@ro: read-only on the node. */
bool csi_mode_served(int mode, bool *ro);
/* Are this driver's volumes reachable from this node only (loop: the image is a local file)? */
bool csi_node_local(void);

/* Does the endpoint serve the Controller service for this driver (controller.c)? */
bool csi_controller_serves(void);
/* Does it grow this driver's volumes (ControllerExpandVolume, NodeExpandVolume)? */
bool csi_expands(void);

/* node.c's helpers, shared with controller.c.  Each answers the call when it fails. */
/* Load the node configuration into a fresh @cx, as each FlexVolume call does: 0 or <0. */
int csi_ctx_load(struct grpc_call *call, struct fv_ctx *cx);
/* Answer the op layer's error @r (message in @cx) with its gRPC status. */
void csi_fail_op(struct grpc_call *call, struct fv_ctx *cx, int r, const char *what);
/* The FlexVolume options of a call into @o: the volume context @ctx (@n entries), the
 * capability's @fstype and @ro, @name as the volume's name.  0 or <0 (answered). */
int csi_parse_opts(struct grpc_call *call, struct fv_ctx *cx, const char *name, const char *fstype,
		   bool ro, size_t n, struct csi_map_entry **ctx, struct fv_opts *o);
/* Is @s a volume ID of ours (one path component of PV-name characters)? */
bool csi_volume_id_ok(const char *s);
/* A capability we serve (filesystem, no mount flags, one node): 0 or <0; *ro, *fstype. */
int csi_check_capability(struct grpc_call *call, const Csi__V1__VolumeCapability *cap,
			 const char **fstype, bool *ro);
/* Take the lock the FlexVolume dispatcher takes ("<driver>-<kind>-<key>"): fd or <0. */
int csi_lock_as_dispatcher(struct grpc_call *call, struct fv_ctx *cx, const char *kind,
			   const char *key, char *name, size_t len);

extern const struct grpc_method csi_identity_methods[];
extern const size_t csi_identity_n;
extern const struct grpc_method csi_node_methods[];
extern const size_t csi_node_n;
extern const struct grpc_method csi_controller_methods[];
extern const size_t csi_controller_n;

#endif
