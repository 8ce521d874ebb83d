/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver profile (csi.h), built once at start-up from the flexvol
 * driver's table and its Controller table: every service reads it, none
 * looks at the driver's name.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "csi.h"
#include "controller.h"
#include "fv/driver.h"
#include "fv/op.h"
#include "fv/util.h"

typedef Csi__V1__VolumeCapability__AccessMode__Mode access_mode;

/* The messages the capability lists point into: one profile per process. */
static Csi__V1__PluginCapability plugin_cap[3];
static Csi__V1__PluginCapability__Service plugin_svc[2];
static Csi__V1__PluginCapability__VolumeExpansion plugin_exp;
static Csi__V1__NodeServiceCapability node_cap[4];
static Csi__V1__NodeServiceCapability__RPC node_rpc[4];
static Csi__V1__ControllerServiceCapability ctl_cap[8];
static Csi__V1__ControllerServiceCapability__RPC ctl_rpc[8];

static void plugin_service(struct csi_profile *p, Csi__V1__PluginCapability__Service__Type t)
{
	size_t n = p->n_plugin_caps, ns = n; /* the services come first */
	Csi__V1__PluginCapability *c = &plugin_cap[n];

	csi__v1__plugin_capability__service__init(&plugin_svc[ns]);
	plugin_svc[ns].type = t;
	csi__v1__plugin_capability__init(c);
	c->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
	c->service = &plugin_svc[ns];
	p->plugin_caps[p->n_plugin_caps++] = c;
}

static void node_rpc_cap(struct csi_profile *p, Csi__V1__NodeServiceCapability__RPC__Type t)
{
	size_t n = p->n_node_caps;

	csi__v1__node_service_capability__rpc__init(&node_rpc[n]);
	node_rpc[n].type = t;
	csi__v1__node_service_capability__init(&node_cap[n]);
	node_cap[n].type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
	node_cap[n].rpc = &node_rpc[n];
	p->node_caps[p->n_node_caps++] = &node_cap[n];
}

static void ctl_rpc_cap(struct csi_profile *p, Csi__V1__ControllerServiceCapability__RPC__Type t)
{
	size_t n = p->n_controller_caps;

	csi__v1__controller_service_capability__rpc__init(&ctl_rpc[n]);
	ctl_rpc[n].type = t;
	csi__v1__controller_service_capability__init(&ctl_cap[n]);
	ctl_cap[n].type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
	ctl_cap[n].rpc = &ctl_rpc[n];
	p->controller_caps[p->n_controller_caps++] = &ctl_cap[n];
}

/* A CSI driver name: at most 63 characters of [a-zA-Z0-9.-], alphanumeric at both ends. */
static bool driver_name_ok(const char *s)
{
	static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	size_t n = strlen(s);

	return n > 0 && n <= 63 && strchr(alnum, s[0]) && strchr(alnum, s[n - 1]) &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == n;
}

int csi_profile_init(struct csi_profile *p, const struct fv_driver *drv, const char *name,
		     const char *root, const char *share, char *err, size_t len)
{
	const struct csi_controller *c;

	memset(p, 0, sizeof(*p));
	p->drv = drv;
	p->root = root;
	p->share = share;
	if (name && !driver_name_ok(name)) {
		snprintf(err, len, "--driver-name %s: not a CSI driver name (at most 63 of "
			 "[a-zA-Z0-9.-], alphanumeric at both ends)", name);
		return -EINVAL;
	}
	snprintf(p->name, sizeof(p->name), "%s", name ? name : "");
	if (!name && (size_t)snprintf(p->name, sizeof(p->name), "%s.csi.flexvol", drv->name) >=
			     sizeof(p->name)) {
		snprintf(err, len, "--driver %s: its CSI name is too long", drv->name);
		return -EINVAL;
	}
	snprintf(p->topology_key, sizeof(p->topology_key), "topology.%s/node", p->name);

	/* a device mount per node, bound into each pod's target */
	p->stages = fv_op_served(drv, FV_OP_MOUNTDEVICE) && fv_op_served(drv, FV_OP_UNMOUNTDEVICE) &&
		    fv_op_served(drv, FV_OP_PUBLISH) && fv_op_served(drv, FV_OP_UNPUBLISH);
	/* or the driver mounts the volume on each target itself (an NFS share) */
	p->mounts = !p->stages && fv_op_served(drv, FV_OP_PUBLISH) &&
		    fv_op_served(drv, FV_OP_UNPUBLISH);
	p->node_local = drv->node_local;
	/* raw block: staged as the device's node (the block class), never an NFS share */
	p->block = p->stages && drv->raw_block;
	/* stats and the volume's condition, wherever volumes are mounted on the node */
	p->stats = (p->stages || p->mounts) && drv->stats;
	p->modes = CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER) |
		   CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER) |
		   CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY);
	p->ro_modes = CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY) |
		      CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY);
	/*
	 * A filesystem the driver mounts itself on each node (an NFS share) is
	 * shared by nature.  One writer among many nodes is not something a
	 * share can enforce: that mode is not served.
	 */
	if (p->mounts)
		p->modes |= CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY) |
			    CSI_MODE(CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER);

	c = csi_controller_of(p);
	p->controller = c;
	p->expands = c && c->expand && p->stages && fv_op_served(drv, FV_OP_EXPANDFS);

	if (c)
		plugin_service(p, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE);
	if (p->node_local)
		plugin_service(p, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS);
	if (p->expands) {
		/* a mounted volume grows: the op layer's expandfs is online */
		csi__v1__plugin_capability__volume_expansion__init(&plugin_exp);
		plugin_exp.type = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE;
		csi__v1__plugin_capability__init(&plugin_cap[p->n_plugin_caps]);
		plugin_cap[p->n_plugin_caps].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
		plugin_cap[p->n_plugin_caps].volume_expansion = &plugin_exp;
		p->plugin_caps[p->n_plugin_caps] = &plugin_cap[p->n_plugin_caps];
		p->n_plugin_caps++;
	}

	if (p->stages)
		node_rpc_cap(p, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME);
	if (p->stats) {
		node_rpc_cap(p, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS);
		node_rpc_cap(p, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION);
	}
	if (p->expands)
		node_rpc_cap(p, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME);

	if (c && c->create) {
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME);
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY);
	}
	if (p->expands)
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME);
	if (c && c->publish)
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME);
	if (c && c->create_snapshot && c->delete_snapshot)
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT);
	if (c && c->list_snapshots)
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS);
	if (c && c->create && c->clones)
		ctl_rpc_cap(p, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CLONE_VOLUME);
	return 0;
}
