/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Node service on the op layer (docs/design.md, "CSI").  The
 * endpoint runs the same op functions as the FlexVolume dispatcher
 * (src/main.c), with the same per-volume and per-directory locks:
 *
 *   NodeStageVolume      the driver's mountdevice, on <staging>/<volume_id>
 *   NodeUnstageVolume    the driver's unmountdevice, on the same directory
 *   NodePublishVolume    the pod's bind of that mount (fv_blkvol_bind); for a
 *                        driver without a device mount (nfs), the driver's mount
 *                        on the target, as kubelet's FlexVolume mount <dir>
 *   NodeUnpublishVolume  its unmount (fv_blkvol_unmount, or the driver's unmount),
 *                        then the target removed
 *   NodeGetVolumeStats   statvfs of a mount of the volume (what kubelet does for
 *                        FlexVolume); staged drivers only
 *
 * Why a subdirectory of the staging path: the block class names a volume by
 * the last component of its device mount directory (fv/blkvol.h,
 * "Identity"), and kubelet's CSI staging path always ends in "globalmount".
 * The volume ID is the name: it comes from the PV's volumeHandle, which only
 * whoever may create PVs sets, as a FlexVolume PV's name.  The volume
 * context is the FlexVolume options map (the PV's volumeAttributes), the
 * capability's fsType is kubernetes.io/fsType; the options parser checks
 * them as it checks kubelet's JSON.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <json-c/json.h>

#include "csi.h"
#include "../src/internal.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/mountutil.h"
#include "fv/util.h"

typedef Csi__V1__VolumeCapability__AccessMode__Mode access_mode;

bool csi_node_stages(void)
{
	const struct fv_driver *d = csi_ep.drv;

	return d->blk && d->mountdevice && d->unmountdevice;
}

bool csi_node_mounts(void)
{
	const struct fv_driver *d = csi_ep.drv;

	return !csi_node_stages() && d->mount && d->unmount;
}

bool csi_node_local(void)
{
	/* a loop volume is an image file in this node's loop_root */
	return streq(csi_ep.drv->name, "loop");
}

/* Load the node configuration into a fresh @cx, as each FlexVolume call does. */
int csi_ctx_load(struct grpc_call *call, struct fv_ctx *cx)
{
	char err[512];

	memset(cx, 0, sizeof(*cx));
	cx->drv = csi_ep.drv;
	if (fv_config_load(&cx->cfg, cx->drv->name, err, sizeof(err)) < 0)
		return -grpc_fail(call, GRPC_FAILED_PRECONDITION, "node configuration: %s", err);
	cx->config_ok = true;
	return 0;
}

/* The op layer's error @r (message in @cx) as a gRPC status. */
void csi_fail_op(struct grpc_call *call, struct fv_ctx *cx, int r, const char *what)
{
	enum grpc_code code;

	switch (-r) {
	case FV_ERR_BADOPT:
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
	case ENOTDIR:
		code = GRPC_INVALID_ARGUMENT;
		break;
	case ENOENT:
		code = GRPC_NOT_FOUND;
		break;
	case FV_ERR_TIMEOUT:
	case ETIMEDOUT:
		code = GRPC_DEADLINE_EXCEEDED;
		break;
	case FV_ERR_CONFLICT:
	case FV_ERR_NOTBLANK:
	case EBUSY:
	case ENXIO:
	case ENOTEMPTY:
		code = GRPC_FAILED_PRECONDITION;
		break;
	default:
		code = GRPC_INTERNAL;
	}
	if (cx->message[0])
		grpc_fail(call, code, "%s: %s%s%s", what, cx->message, cx->detail[0] ? ": " : "",
			  cx->detail);
	else
		grpc_fail(call, code, "%s: %s", what, strerror(r < 0 && r > -4096 ? -r : EIO));
}

/*
 * A volume ID we take as a volume name: one path component of PV-name
 * characters.  Anything else is no volume of ours.
 */
bool csi_volume_id_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || streq(s, ".") || streq(s, ".."))
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/*
 * Check a capability: a filesystem (no raw block yet), no mount flags (the
 * op layer takes its mount options from the node config), one node.
 * *@ro: the volume is read-only on the node.
 */
int csi_check_capability(struct grpc_call *call, const Csi__V1__VolumeCapability *cap,
			    const char **fstype, bool *ro)
{
	access_mode m = cap->access_mode ? cap->access_mode->mode : 0;

	if (cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT,
				  "only filesystem volumes are served (access type mount)");
	if (cap->mount->n_mount_flags)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT,
				  "mount flags are not accepted (the node config sets mount options)");
	if (!csi_mode_served(m, ro))
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "access mode %d is not served (%s)",
				  (int)m, csi_node_mounts() ? "every mode but the multi-node "
				  "single-writer one" : "single node modes only");
	*fstype = cap->mount->fs_type;
	return 0;
}

bool csi_mode_served(int mode, bool *ro)
{
	switch (mode) {
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
		*ro = false;
		return true;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY:
		*ro = true;
		return true;
	/*
	 * A filesystem the driver mounts itself on each node (an NFS share) is
	 * shared by nature.  One writer among many nodes is not something a
	 * share can enforce: not served.
	 */
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
		*ro = true;
		return csi_node_mounts();
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
		*ro = false;
		return csi_node_mounts();
	default:
		return false;
	}
}

int csi_parse_opts(struct grpc_call *call, struct fv_ctx *cx, const char *name, const char *fstype,
		   bool ro, size_t n, struct csi_map_entry **ctx, struct fv_opts *o)
{
	json_object *obj = json_object_new_object();
	int r;

	if (!obj)
		return -grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
	for (size_t i = 0; i < n; i++)
		json_object_object_add(obj, ctx[i]->key, json_object_new_string(ctx[i]->value));
	/* ours last: a volume attribute of the same name does not override them */
	if (fstype && *fstype)
		json_object_object_add(obj, "kubernetes.io/fsType", json_object_new_string(fstype));
	json_object_object_add(obj, "kubernetes.io/readwrite", json_object_new_string(ro ? "ro" : "rw"));
	json_object_object_add(obj, "kubernetes.io/pvOrVolumeName", json_object_new_string(name));
	r = fv_opts_parse(cx, json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN), o);
	json_object_put(obj);
	if (r < 0) {
		csi_fail_op(call, cx, r, "volume context");
		return r;
	}
	return 0;
}

/* The lock the FlexVolume dispatcher takes for the same op ("<driver>-vol-<name>", "-dir-"). */
int csi_lock_as_dispatcher(struct grpc_call *call, struct fv_ctx *cx, const char *kind,
			      const char *key, char *name, size_t len)
{
	int fd;

	snprintf(name, len, "%s-%s-%s", cx->drv->name, kind, key);
	fd = fv_lock(cx, name);
	if (fd < 0)
		csi_fail_op(call, cx, fd, "lock");
	return fd;
}

/*
 * Make directory @path, taken literally (its parents checked as the op layer
 * checks a directory argument: no symlink, no magic link); the parent must
 * exist; there already is fine.  0 or <0 (answered).
 */
static int make_dir(struct grpc_call *call, struct fv_ctx *cx, const char *path)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	int r = fv_dir_arg(cx, path, FV_DIRARG_PARENT_ONLY | FV_DIRARG_MUST_EXIST, &d);

	if (r < 0) {
		csi_fail_op(call, cx, r, "cannot create the directory");
		return r;
	}
	if (mkdirat(d.parent, fv_path_last(d.path), 0750) == 0 || errno == EEXIST)
		return 0;
	return -grpc_fail(call, GRPC_INTERNAL, "cannot create '%s': %s", path, strerror(errno));
}

/* Remove directory @path, taken literally, when it is there and empty.  0 or <0 (answered). */
static int remove_dir(struct grpc_call *call, struct fv_ctx *cx, const char *path)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	int r = fv_dir_arg(cx, path, FV_DIRARG_PARENT_ONLY, &d);

	if (r == 1)
		return 0; /* a parent is gone: so is the directory */
	if (r < 0) {
		csi_fail_op(call, cx, r, "cannot remove the directory");
		return r;
	}
	if (unlinkat(d.parent, fv_path_last(d.path), AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	return -grpc_fail(call, GRPC_INTERNAL, "cannot remove '%s': %s", path, strerror(errno));
}

/*
 * The device mount directory of volume @id under the staging path: the ID
 * must be a volume name (else NOT_FOUND: no volume of ours).  0 or <0 (answered).
 */
static int volume_dir(struct grpc_call *call, const char *staging, const char *id, char *buf,
		      size_t len)
{
	if (!csi_volume_id_ok(id))
		return -grpc_fail(call, GRPC_NOT_FOUND, "no %s volume has the ID '%s'",
				  csi_ep.drv->name, id);
	if ((size_t)snprintf(buf, len, "%s/%s", staging, id) >= len)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "staging path too long");
	return 0;
}

/* The driver's volumes are staged (the other Node calls need that too): 0, or UNIMPLEMENTED. */
static int require_stages(struct grpc_call *call)
{
	if (csi_node_stages())
		return 0;
	return -grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes are not staged", csi_ep.drv->name);
}

/* NodePublishVolume of a driver that mounts the volume on the target itself (nfs). */
static void node_publish_mount(struct grpc_call *call, const Csi__V1__NodePublishVolumeRequest *q)
{
	Csi__V1__NodePublishVolumeResponse resp = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
	struct fv_opts o = { 0 };
	char lock[PATH_MAX + 64];
	const char *fstype = NULL;
	bool ro = false;
	struct fv_ctx cx;
	int fd, r = -1;

	if (csi_check_capability(call, q->volume_capability, &fstype, &ro) < 0)
		return;
	if (!csi_volume_id_ok(q->volume_id))
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "no %s volume has the ID '%s'",
				       csi_ep.drv->name, q->volume_id);
	if (csi_ctx_load(call, &cx) < 0 ||
	    csi_parse_opts(call, &cx, q->volume_id, fstype, ro || q->readonly, q->n_volume_context,
		       (struct csi_map_entry **)q->volume_context, &o) < 0)
		return;
	/* CSI: the plugin creates the target itself (the CO made its parent) */
	if (make_dir(call, &cx, q->target_path) == 0) {
		fd = csi_lock_as_dispatcher(call, &cx, "dir", q->target_path, lock, sizeof(lock));
		if (fd >= 0) {
			r = cx.drv->mount(&cx, q->target_path, &o);
			if (r < 0) {
				csi_fail_op(call, &cx, r, "publish");
				remove_dir(call, &cx, q->target_path); /* empty unless mounted */
			}
			fv_unlock_remove(&cx, lock, fd);
		}
	}
	fv_opts_done(&o);
	if (r == 0)
		grpc_reply(call, &resp.base);
}

static void node_stage(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeStageVolumeRequest *q = (const void *)m;
	struct fv_ctx cx;
	struct fv_opts o = { 0 };
	char dir[PATH_MAX], lock[PATH_MAX + 64];
	const char *fstype = NULL;
	bool ro = false;
	int fd, r = -1;

	if (!*q->volume_id || !*q->staging_target_path || !q->volume_capability) {
		grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_id, staging_target_path and "
			  "volume_capability are required");
		return;
	}
	if (require_stages(call) < 0 ||
	    csi_check_capability(call, q->volume_capability, &fstype, &ro) < 0 ||
	    volume_dir(call, q->staging_target_path, q->volume_id, dir, sizeof(dir)) < 0 ||
	    csi_ctx_load(call, &cx) < 0)
		return;
	if (csi_parse_opts(call, &cx, q->volume_id, fstype, ro, q->n_volume_context,
		       (struct csi_map_entry **)q->volume_context, &o) < 0)
		return;
	fd = csi_lock_as_dispatcher(call, &cx, "vol", q->volume_id, lock, sizeof(lock));
	if (fd >= 0) {
		r = make_dir(call, &cx, dir);
		if (r == 0) {
			r = cx.drv->mountdevice(&cx, dir, "", &o);
			if (r < 0) {
				csi_fail_op(call, &cx, r, "stage");
				remove_dir(call, &cx, dir); /* empty unless something is mounted there */
			}
		}
		fv_unlock_remove(&cx, lock, fd);
		fv_blkvol_gc_maybe(&cx);
	}
	fv_opts_done(&o);
	if (fd >= 0 && r == 0) {
		Csi__V1__NodeStageVolumeResponse resp = CSI__V1__NODE_STAGE_VOLUME_RESPONSE__INIT;

		grpc_reply(call, &resp.base);
	}
}

static void node_unstage(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeUnstageVolumeRequest *q = (const void *)m;
	Csi__V1__NodeUnstageVolumeResponse resp = CSI__V1__NODE_UNSTAGE_VOLUME_RESPONSE__INIT;
	struct fv_ctx cx;
	char dir[PATH_MAX], lock[PATH_MAX + 64];
	int fd, r;

	if (!*q->volume_id || !*q->staging_target_path) {
		grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_id and staging_target_path are required");
		return;
	}
	if (require_stages(call) < 0 ||
	    volume_dir(call, q->staging_target_path, q->volume_id, dir, sizeof(dir)) < 0 ||
	    csi_ctx_load(call, &cx) < 0)
		return;
	fd = csi_lock_as_dispatcher(call, &cx, "vol", q->volume_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = cx.drv->unmountdevice(&cx, dir);
	if (r < 0)
		csi_fail_op(call, &cx, r, "unstage");
	else
		r = remove_dir(call, &cx, dir);
	fv_unlock_remove(&cx, lock, fd);
	fv_blkvol_gc_maybe(&cx);
	if (r == 0)
		grpc_reply(call, &resp.base);
}

static void node_publish(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodePublishVolumeRequest *q = (const void *)m;
	Csi__V1__NodePublishVolumeResponse resp = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
	struct fv_ctx cx;
	char src[PATH_MAX], lock[PATH_MAX + 64];
	const char *fstype = NULL;
	bool ro = false;
	int fd, r;

	if (!*q->volume_id || !*q->target_path || !q->volume_capability) {
		grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_id, target_path and "
			  "volume_capability are required");
		return;
	}
	if (csi_node_mounts())
		return node_publish_mount(call, q);
	if (require_stages(call) < 0)
		return;
	if (!*q->staging_target_path) {
		grpc_fail(call, GRPC_FAILED_PRECONDITION, "staging_target_path is required "
			  "(the plugin has STAGE_UNSTAGE_VOLUME)");
		return;
	}
	if (csi_check_capability(call, q->volume_capability, &fstype, &ro) < 0 ||
	    volume_dir(call, q->staging_target_path, q->volume_id, src, sizeof(src)) < 0 ||
	    csi_ctx_load(call, &cx) < 0)
		return;
	/* CSI: the plugin creates the target itself (the CO made its parent) */
	if (make_dir(call, &cx, q->target_path) < 0)
		return;
	fd = csi_lock_as_dispatcher(call, &cx, "dir", q->target_path, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_blkvol_bind(&cx, q->target_path, src, ro || q->readonly);
	if (r < 0)
		csi_fail_op(call, &cx, r, "publish");
	fv_unlock_remove(&cx, lock, fd);
	if (r == 0)
		grpc_reply(call, &resp.base);
}

static void node_unpublish(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeUnpublishVolumeRequest *q = (const void *)m;
	Csi__V1__NodeUnpublishVolumeResponse resp = CSI__V1__NODE_UNPUBLISH_VOLUME_RESPONSE__INIT;
	struct fv_ctx cx;
	char lock[PATH_MAX + 64];
	int fd, r;

	if (!*q->volume_id || !*q->target_path) {
		grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_id and target_path are required");
		return;
	}
	if ((!csi_node_mounts() && require_stages(call) < 0) || csi_ctx_load(call, &cx) < 0)
		return;
	fd = csi_lock_as_dispatcher(call, &cx, "dir", q->target_path, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = csi_node_mounts() ? cx.drv->unmount(&cx, q->target_path) :
				fv_blkvol_unmount(&cx, q->target_path, NULL);
	if (r < 0)
		csi_fail_op(call, &cx, r, "unpublish");
	else
		r = remove_dir(call, &cx, q->target_path); /* CSI: the plugin removes what it made */
	fv_unlock_remove(&cx, lock, fd);
	if (r == 0)
		grpc_reply(call, &resp.base);
}

/* The device of the mount at @path (taken literally): 0, or NOT_FOUND when nothing is mounted there. */
static int mounted_dev(struct grpc_call *call, const char *path, struct fv_dir *d, dev_t *ret)
{
	struct fv_mntinfo mi;
	int r = fv_dir_open_quiet(path, d);

	if (r == 0)
		r = fv_dir_mounted(d, &mi);
	if (r == 0 && streq(mi.root, "/")) {
		*ret = mi.devno;
		return 0;
	}
	if (r < 0 && r != -ENOENT && r != -ENOTDIR && r != -ELOOP && r != -EINVAL)
		return -grpc_fail(call, GRPC_INTERNAL, "cannot tell what is mounted at '%s': %s",
				  path, strerror(-r));
	return -grpc_fail(call, GRPC_NOT_FOUND, "no volume is mounted at '%s'", path);
}

/*
 * The filesystem figures of a staged or published volume (kubelet's statfs
 * of a FlexVolume pod dir).  @volume_path must be a mount of the volume:
 * with the staging path given, of the same device as its staged mount.
 */
static void node_get_volume_stats(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeGetVolumeStatsRequest *q = (const void *)m;
	Csi__V1__NodeGetVolumeStatsResponse r = CSI__V1__NODE_GET_VOLUME_STATS_RESPONSE__INIT;
	Csi__V1__VolumeUsage bytes = CSI__V1__VOLUME_USAGE__INIT, inodes = CSI__V1__VOLUME_USAGE__INIT;
	Csi__V1__VolumeUsage *usage[] = { &bytes, &inodes };
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 }, sd = { .parent = -1 };
	char staged[PATH_MAX];
	const char *path = q->volume_path;
	struct statvfs sv;
	dev_t dev, sdev;
	int fd;

	if (!*q->volume_id || !*q->volume_path) {
		grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_id and volume_path are required");
		return;
	}
	if (require_stages(call) < 0)
		return;
	if (*q->staging_target_path) {
		if (volume_dir(call, q->staging_target_path, q->volume_id, staged, sizeof(staged)) < 0)
			return;
		/* the staging path itself names the staged mount below it */
		if (streq(path, q->staging_target_path))
			path = staged;
	} else if (!csi_volume_id_ok(q->volume_id)) {
		grpc_fail(call, GRPC_NOT_FOUND, "no %s volume has the ID '%s'", csi_ep.drv->name,
			  q->volume_id);
		return;
	}
	if (mounted_dev(call, path, &d, &dev) < 0)
		return;
	if (*q->staging_target_path && path != staged &&
	    (mounted_dev(call, staged, &sd, &sdev) < 0 || sdev != dev)) {
		grpc_fail(call, GRPC_NOT_FOUND, "'%s' holds no mount of volume '%s'", path,
			  q->volume_id);
		return;
	}
	fd = openat(d.parent, fv_path_last(d.path), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstatvfs(fd, &sv) < 0) {
		grpc_fail(call, GRPC_INTERNAL, "cannot read the filesystem at '%s': %s", path,
			  strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	bytes.unit = CSI__V1__VOLUME_USAGE__UNIT__BYTES;
	bytes.total = (int64_t)(sv.f_blocks * sv.f_frsize);
	bytes.available = (int64_t)(sv.f_bavail * sv.f_frsize);
	bytes.used = (int64_t)((sv.f_blocks - sv.f_bfree) * sv.f_frsize);
	inodes.unit = CSI__V1__VOLUME_USAGE__UNIT__INODES;
	inodes.total = (int64_t)sv.f_files;
	inodes.available = (int64_t)sv.f_favail;
	inodes.used = (int64_t)(sv.f_files - sv.f_ffree);
	r.n_usage = ARRAY_SIZE(usage);
	r.usage = usage;
	grpc_reply(call, &r.base);
}

static void node_get_capabilities(struct grpc_call *call, const ProtobufCMessage *m)
{
	Csi__V1__NodeGetCapabilitiesResponse r = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__NodeServiceCapability cap[3];
	Csi__V1__NodeServiceCapability__RPC rpc[3];
	Csi__V1__NodeServiceCapability *caps[3];
	Csi__V1__NodeServiceCapability__RPC__Type types[3];
	size_t n = 0;

	if (csi_node_stages()) {
		types[n++] = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME;
		types[n++] = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS;
	}
	if (csi_expands())
		types[n++] = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME;
	for (size_t i = 0; i < n; i++) {
		csi__v1__node_service_capability__rpc__init(&rpc[i]);
		csi__v1__node_service_capability__init(&cap[i]);
		rpc[i].type = types[i];
		cap[i].type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
		cap[i].rpc = &rpc[i];
		caps[i] = &cap[i];
	}
	r.n_capabilities = n;
	r.capabilities = caps;
	grpc_reply(call, &r.base);
}

static void node_get_info(struct grpc_call *call, const ProtobufCMessage *m)
{
	Csi__V1__NodeGetInfoResponse r = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
	Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
	Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
	Csi__V1__Topology__SegmentsEntry *segs[] = { &seg };
	struct fv_ctx cx;

	if (csi_ctx_load(call, &cx) < 0)
		return;
	r.node_id = cx.cfg.node_name;
	r.max_volumes_per_node = 0; /* no limit of ours */
	if (csi_node_local()) {
		seg.key = csi_ep.topology_key;
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
	{ "/csi.v1.Node/NodeGetVolumeStats", &csi__v1__node_get_volume_stats_request__descriptor,
	  node_get_volume_stats, true },
	{ "/csi.v1.Node/NodeGetCapabilities", &csi__v1__node_get_capabilities_request__descriptor,
	  node_get_capabilities, true },
	{ "/csi.v1.Node/NodeGetInfo", &csi__v1__node_get_info_request__descriptor, node_get_info,
	  true },
};
const size_t csi_node_n = ARRAY_SIZE(csi_node_methods);
