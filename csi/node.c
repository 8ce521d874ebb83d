/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Node service: each call translated to the op runner (fv/op.h),
 * the one the FlexVolume program runs its ops with (docs/design.md, "CSI"):
 *
 *   NodeStageVolume      mountdevice on <staging>/<volume_id>, made first
 *   NodeUnstageVolume    unmountdevice of it, then the directory removed
 *   NodePublishVolume    publish on the target, made first: the pod's bind of
 *                        the staged mount, or, for a driver without one (nfs),
 *                        its own mount of the volume, as kubelet's FlexVolume mount
 *   NodeUnpublishVolume  unpublish, then the target removed
 *   NodeExpandVolume     expandfs with the options the volume was staged with
 *   NodeGetVolumeStats   the driver's stats of a mount of the volume: statvfs (what
 *                        kubelet does for FlexVolume), a raw block volume's size,
 *                        and the volume's condition; every probe bounded
 *
 * A raw block volume (access type block, the block class's drivers) goes the
 * same way with fv_opts.block set: staged as its device's node in the same
 * directory, published as a bind of that node on a target file the runner
 * makes (FV_OP_FILE); unpublish and unstage tell it from the kernel.
 * Why a subdirectory of the staging path: the block class names a volume by
 * the last component of its device mount directory (fv/blkvol.h,
 * "Identity"), and kubelet's CSI staging path always ends in "globalmount".
 * The volume ID is the name: it comes from the PV's volumeHandle, which only
 * whoever may create PVs sets, as a FlexVolume PV's name.  The volume
 * context is the FlexVolume options map (the PV's volumeAttributes), the
 * capability's fsType is kubernetes.io/fsType.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "csi.h"
#include "fv/mountutil.h"
#include "fv/op.h"
#include "fv/util.h"

/* The device mount directory of volume @id under the staging path: 0 or <0 (answered). */
static int staged_dir(struct grpc_call *call, const char *staging, const char *id, char *buf,
		      size_t len)
{
	if ((size_t)snprintf(buf, len, "%s/%s", staging, id) >= len)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "staging path too long");
	return 0;
}

/* The profile has staging (the other Node calls need that too): 0, or UNIMPLEMENTED. */
static int require_stages(struct grpc_call *call)
{
	if (csi_plugin.stages)
		return 0;
	return -grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes are not staged",
			  csi_plugin.drv->name);
}

/* Run @c; answer its failure as @what.  0 or <0 (answered). */
static int run(struct grpc_call *call, struct fv_ctx *cx, struct fv_op_call *c, const char *what)
{
	int r = fv_op_run(cx, c);

	return r < 0 ? csi_fail(call, cx, r, what) : 0;
}

static void node_stage(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeStageVolumeRequest *q = (const void *)m;
	Csi__V1__NodeStageVolumeResponse resp = CSI__V1__NODE_STAGE_VOLUME_RESPONSE__INIT;
	_cleanup_(fv_opts_donep) struct fv_opts o = { 0 };
	struct fv_op_call c = { .op = FV_OP_MOUNTDEVICE, .flags = FV_OP_MKDIR, .device = "" };
	char dir[PATH_MAX];
	const char *fstype = NULL;
	bool ro = false;
	struct fv_ctx cx;

	if (csi_need(call, *q->volume_id && *q->staging_target_path && q->volume_capability,
		     "volume_id, staging_target_path and volume_capability") < 0 ||
	    require_stages(call) < 0 ||
	    csi_check_capability(call, q->volume_capability, &fstype, &ro) < 0 ||
	    csi_open(call, &cx, q->volume_id) < 0 ||
	    staged_dir(call, q->staging_target_path, q->volume_id, dir, sizeof(dir)) < 0 ||
	    csi_opts(call, &cx, q->volume_id, fstype, ro, CSI_MAP(q, volume_context),
		     CSI_MAP(q, secrets), &o) < 0)
		return;
	c.dir = dir;
	o.block = csi_is_block(q->volume_capability);
	c.opts = &o;
	if (run(call, &cx, &c, "stage") == 0)
		grpc_reply(call, &resp.base);
}

static void node_unstage(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeUnstageVolumeRequest *q = (const void *)m;
	Csi__V1__NodeUnstageVolumeResponse resp = CSI__V1__NODE_UNSTAGE_VOLUME_RESPONSE__INIT;
	struct fv_op_call c = { .op = FV_OP_UNMOUNTDEVICE, .flags = FV_OP_RMDIR };
	char dir[PATH_MAX];
	struct fv_ctx cx;

	if (csi_need(call, *q->volume_id && *q->staging_target_path,
		     "volume_id and staging_target_path") < 0 ||
	    require_stages(call) < 0 || csi_open(call, &cx, q->volume_id) < 0 ||
	    staged_dir(call, q->staging_target_path, q->volume_id, dir, sizeof(dir)) < 0)
		return;
	c.dir = dir;
	if (run(call, &cx, &c, "unstage") == 0)
		grpc_reply(call, &resp.base);
}

static void node_publish(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodePublishVolumeRequest *q = (const void *)m;
	Csi__V1__NodePublishVolumeResponse resp = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
	_cleanup_(fv_opts_donep) struct fv_opts o = { 0 };
	/* CSI: the plugin creates the target itself (the CO made its parent) */
	struct fv_op_call c = { .op = FV_OP_PUBLISH, .flags = FV_OP_MKDIR };
	char staged[PATH_MAX];
	const char *fstype = NULL;
	bool ro = false;
	struct fv_ctx cx;

	if (csi_need(call, *q->volume_id && *q->target_path && q->volume_capability,
		     "volume_id, target_path and volume_capability") < 0)
		return;
	if (!csi_plugin.stages && !csi_plugin.mounts)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes are not published "
				       "on nodes", csi_plugin.drv->name);
	if (csi_plugin.stages && !*q->staging_target_path)
		return (void)grpc_fail(call, GRPC_FAILED_PRECONDITION, "staging_target_path is "
				       "required (the plugin has STAGE_UNSTAGE_VOLUME)");
	if (csi_check_capability(call, q->volume_capability, &fstype, &ro) < 0 ||
	    csi_open(call, &cx, q->volume_id) < 0 ||
	    (csi_plugin.stages &&
	     staged_dir(call, q->staging_target_path, q->volume_id, staged, sizeof(staged)) < 0) ||
	    csi_opts(call, &cx, q->volume_id, fstype, ro || q->readonly, CSI_MAP(q, volume_context),
		     CSI_MAP(q, secrets), &o) < 0)
		return;
	c.dir = q->target_path;
	c.staged = csi_plugin.stages ? staged : NULL;
	o.block = csi_is_block(q->volume_capability);
	if (o.block) /* the target is a file, the node is bound on it */
		c.flags |= FV_OP_FILE;
	c.opts = &o;
	if (run(call, &cx, &c, "publish") == 0)
		grpc_reply(call, &resp.base);
}

static void node_unpublish(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeUnpublishVolumeRequest *q = (const void *)m;
	Csi__V1__NodeUnpublishVolumeResponse resp = CSI__V1__NODE_UNPUBLISH_VOLUME_RESPONSE__INIT;
	/* CSI: the plugin removes what it made */
	struct fv_op_call c = { .op = FV_OP_UNPUBLISH, .flags = FV_OP_RMDIR };
	struct fv_ctx cx;

	if (csi_need(call, *q->volume_id && *q->target_path, "volume_id and target_path") < 0)
		return;
	if (!csi_plugin.stages && !csi_plugin.mounts)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes are not published "
				       "on nodes", csi_plugin.drv->name);
	if (csi_open(call, &cx, q->volume_id) < 0)
		return;
	c.dir = q->target_path;
	c.name = q->volume_id;
	if (run(call, &cx, &c, "unpublish") == 0)
		grpc_reply(call, &resp.base);
}

/*
 * NodeExpandVolume: the op layer's expandfs on the volume's mount, with the
 * options it was staged with (the request carries none); a volume not staged
 * on this node has none: NOT_FOUND.
 */
static void node_expand(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeExpandVolumeRequest *q = (const void *)m;
	Csi__V1__NodeExpandVolumeResponse resp = CSI__V1__NODE_EXPAND_VOLUME_RESPONSE__INIT;
	const Csi__V1__CapacityRange *cr = q->capacity_range;
	struct fv_op_call c = { .op = FV_OP_EXPANDFS, .device = "" };
	struct fv_ctx cx;
	int r;

	if (csi_need(call, *q->volume_id && *q->volume_path, "volume_id and volume_path") < 0)
		return;
	if (!csi_plugin.expands)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes are not grown here",
				       csi_plugin.drv->name);
	if (cr && (cr->required_bytes < 0 || cr->limit_bytes < 0))
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "negative capacity");
	/* no size asked: the filesystem grows to the device as it is; else whole sectors */
	if (cr && cr->required_bytes)
		c.new_size = ((uint64_t)cr->required_bytes + 511) / 512 * 512;
	if (cr && cr->limit_bytes && c.new_size > (uint64_t)cr->limit_bytes)
		return (void)grpc_fail(call, GRPC_OUT_OF_RANGE, "no size of whole sectors fits "
				       "between the required %lld and the limit %lld bytes",
				       (long long)cr->required_bytes, (long long)cr->limit_bytes);
	if (csi_open(call, &cx, q->volume_id) < 0)
		return;
	c.dir = q->volume_path;
	c.name = q->volume_id;
	r = fv_op_run(&cx, &c);
	if (r == -ENXIO || r == -ENOENT) /* not mounted there, not staged here */
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "%s", cx.message);
	if (r < 0)
		return (void)csi_fail(call, &cx, r, "expand");
	resp.capacity_bytes = (int64_t)c.new_size; /* 0: as big as the device (unknown here) */
	grpc_reply(call, &resp.base);
}

/*
 * The figures and condition of a staged or published volume (kubelet's
 * statfs of a FlexVolume pod dir), by the driver's stats slot: @volume_path
 * must be a mount of the volume by the driver's own account (its owns slot),
 * else NOT_FOUND; the staging path itself names the volume's stage below it.
 * A raw block volume has its size only.  The condition is abnormal, with a
 * message, when the driver's bounded probes say the backing is not well.
 */
static void node_get_volume_stats(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeGetVolumeStatsRequest *q = (const void *)m;
	Csi__V1__NodeGetVolumeStatsResponse r = CSI__V1__NODE_GET_VOLUME_STATS_RESPONSE__INIT;
	Csi__V1__VolumeUsage bytes = CSI__V1__VOLUME_USAGE__INIT, inodes = CSI__V1__VOLUME_USAGE__INIT;
	Csi__V1__VolumeUsage *usage[] = { &bytes, &inodes };
	Csi__V1__VolumeCondition cond = CSI__V1__VOLUME_CONDITION__INIT;
	char staged[PATH_MAX];
	const char *path = q->volume_path;
	struct fv_volstats st;
	struct fv_ctx cx;
	int k;

	if (csi_need(call, *q->volume_id && *q->volume_path, "volume_id and volume_path") < 0)
		return;
	if (!csi_plugin.stats)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes have no stats here",
				       csi_plugin.drv->name);
	if (csi_open(call, &cx, q->volume_id) < 0)
		return;
	if (csi_plugin.stages && *q->staging_target_path) {
		if (staged_dir(call, q->staging_target_path, q->volume_id, staged, sizeof(staged)) < 0)
			return;
		if (streq(path, q->staging_target_path))
			path = staged;
	}
	k = fv_op_stats(&cx, q->volume_id, path, &st);
	if (k == -ENOENT || k == -EINVAL || k == -ENOTDIR || k == -ELOOP)
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "'%s' holds no mount of volume '%s'%s%s",
				       path, q->volume_id, cx.message[0] ? ": " : "", cx.message);
	if (k < 0)
		return (void)csi_fail(call, &cx, k, "stats");
	/* kubelet takes an answer without usage for an error: zeros when it could not be read */
	bytes.unit = CSI__V1__VOLUME_USAGE__UNIT__BYTES;
	bytes.total = (int64_t)st.bytes_total;
	bytes.available = (int64_t)st.bytes_avail;
	bytes.used = (int64_t)st.bytes_used;
	inodes.unit = CSI__V1__VOLUME_USAGE__UNIT__INODES;
	inodes.total = (int64_t)st.inodes_total;
	inodes.available = (int64_t)st.inodes_avail;
	inodes.used = (int64_t)st.inodes_used;
	r.n_usage = st.block || !st.has_usage ? 1 : ARRAY_SIZE(usage);
	r.usage = usage;
	cond.abnormal = st.abnormal;
	cond.message = st.abnormal ? st.message : (char *)"";
	r.volume_condition = &cond;
	grpc_reply(call, &r.base);
}

static void node_get_capabilities(struct grpc_call *call, const ProtobufCMessage *m)
{
	Csi__V1__NodeGetCapabilitiesResponse r = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;

	r.n_capabilities = csi_plugin.n_node_caps;
	r.capabilities = csi_plugin.node_caps;
	grpc_reply(call, &r.base);
}

static void node_get_info(struct grpc_call *call, const ProtobufCMessage *m)
{
	Csi__V1__NodeGetInfoResponse r = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
	Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
	Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
	Csi__V1__Topology__SegmentsEntry *segs[] = { &seg };
	struct fv_ctx cx;

	if (csi_open(call, &cx, NULL) < 0)
		return;
	r.node_id = cx.cfg.node_name;
	r.max_volumes_per_node = 0; /* no limit of ours */
	if (csi_plugin.node_local) {
		seg.key = csi_plugin.topology_key;
		seg.value = cx.cfg.node_name;
		topo.n_segments = 1;
		topo.segments = segs;
		r.accessible_topology = &topo;
	}
	grpc_reply(call, &r.base);
}

const struct grpc_method csi_node_methods[] = {
	{ "/csi.v1.Node/NodeStageVolume", &csi__v1__node_stage_volume_request__descriptor,
	  node_stage, false },
	{ "/csi.v1.Node/NodeUnstageVolume", &csi__v1__node_unstage_volume_request__descriptor,
	  node_unstage, false },
	{ "/csi.v1.Node/NodePublishVolume", &csi__v1__node_publish_volume_request__descriptor,
	  node_publish, false },
	{ "/csi.v1.Node/NodeUnpublishVolume", &csi__v1__node_unpublish_volume_request__descriptor,
	  node_unpublish, false },
	{ "/csi.v1.Node/NodeExpandVolume", &csi__v1__node_expand_volume_request__descriptor,
	  node_expand, false },
	{ "/csi.v1.Node/NodeGetVolumeStats", &csi__v1__node_get_volume_stats_request__descriptor,
	  node_get_volume_stats, true },
	{ "/csi.v1.Node/NodeGetCapabilities", &csi__v1__node_get_capabilities_request__descriptor,
	  node_get_capabilities, true },
	{ "/csi.v1.Node/NodeGetInfo", &csi__v1__node_get_info_request__descriptor, node_get_info,
	  true },
};
const size_t csi_node_n = ARRAY_SIZE(csi_node_methods);
