/* SPDX-License-Identifier: Apache-2.0 */
/* flexvol-csi: what main.c, identity.c and node.c share (docs/design.md, "CSI"). */
#ifndef FV_CSI_H
#define FV_CSI_H

#include <stdbool.h>

#include "csi.pb-c.h"
#include "grpc.h"

struct fv_driver;

/* The endpoint's settings, fixed at start (main.c). */
struct csi_endpoint {
	const struct fv_driver *drv; /* --driver */
	char name[64];		     /* --driver-name, the CSI driver name */
	char topology_key[128];	     /* "topology.<name>/node" for node-local drivers */
};

extern struct csi_endpoint csi_ep;

/* Does the endpoint serve stage/unstage for this driver (a block driver's device mount)? */
bool csi_node_stages(void);
/* Are this driver's volumes reachable from this node only (loop: the image is a local file)? */
bool csi_node_local(void);

extern const struct grpc_method csi_identity_methods[];
extern const size_t csi_identity_n;
extern const struct grpc_method csi_node_methods[];
extern const size_t csi_node_n;

#endif
