/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service for loop (csi/controller.h).
 *
 * Loop's images live in the node's loop root (a node-local driver: its
 * controller runs beside the node plugin, one per node, as the
 * external-provisioner's distributed provisioning does).  The images are
 * made, removed and grown by the same code as the flexvol/loop node agent's
 * (lib/image.c), with the same confinement and owner records: the
 * owner of a CSI volume's image is its volume ID, as the owner of a
 * FlexVolume PV's image is the PV's name (the name the loop driver records).
 *
 *   CreateVolume            image "<id>.img" in the loop root, sparse (or
 *                           allocated: parameter preallocate=true), owned by <id>
 *   DeleteVolume            the image removed, when <id> owns it and no loop device holds it
 *   ValidateVolumeCapabilities, GetCapacity (the loop root's free bytes)
 *   ControllerExpandVolume  the image grown when no device holds it; the node grows the rest
 *                           (all of it where this controller has no loop root), at
 *                           NodeExpandVolume: the op layer's expandfs (image, loop
 *                           capacity, filesystem; csi/node.c)
 *
 * Nothing is attached by a controller: the op layer attaches on the node, at
 * NodeStageVolume (no ControllerPublishVolume).
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
#include "controller.h"
#include "fv/image.h"
#include "fv/image.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/util.h"

#define MiB (1024LL * 1024LL)
#define DEFAULT_SIZE (1024LL * MiB)
#define MAX_SIZE (1LL << 50) /* the loop driver's bound: 1Pi */

/* The image of volume @id ("<id>.img"), when @id is a name the loop root may hold. */
static bool image_of(const char *id, char *img, size_t len)
{
	return (size_t)snprintf(img, len, "%s.img", id) < len && fv_image_name_ok(img);
}

/* Can volume @id have an image in the loop root? */
static bool loop_id_ok(const char *id)
{
	char img[FV_IMAGE_NAME_MAX + 8];

	return image_of(id, img, sizeof(img));
}

/* The loop root's descriptor: fd, or <0 (answered). */
static int open_root(struct grpc_call *call, struct fv_ctx *cx)
{
	int fd = open(cx->cfg.loop_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -grpc_fail(call, GRPC_FAILED_PRECONDITION, "cannot open the loop root '%s': %s",
				  cx->cfg.loop_root, strerror(errno));
	return fd;
}

/* The largest image the loop root's filesystem holds, at most the loop driver's bound. */
static int64_t root_max(int rootfd)
{
	uint64_t max;

	return fv_image_max_size(rootfd, MAX_SIZE, &max) == 0 ? (int64_t)max : MAX_SIZE;
}

/*
 * The size a capacity range asks for: whole MiB, or whole sectors when the
 * limit leaves no room for the next MiB (the loop driver takes whole sectors
 * from 1Mi to 1Pi); @dflt without a required size.  0, or <0 (answered).
 */
static int wanted_size(struct grpc_call *call, const Csi__V1__CapacityRange *cr, int64_t dflt,
		       int64_t *ret)
{
	int64_t req = cr && cr->required_bytes ? cr->required_bytes : dflt;
	int64_t limit = cr ? cr->limit_bytes : 0, want;

	if (req < 0 || limit < 0)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "negative capacity");
	if (req > MAX_SIZE)
		return -grpc_fail(call, GRPC_OUT_OF_RANGE, "at most %lld bytes", (long long)MAX_SIZE);
	want = req ? (req + MiB - 1) / MiB * MiB : MiB;
	if (limit && want > limit)
		want = (req + 511) / 512 * 512;
	if (want < MiB)
		want = MiB;
	if (limit && want > limit)
		return -grpc_fail(call, GRPC_OUT_OF_RANGE, "no size of whole sectors from 1 MiB fits "
				  "between the required %lld and the limit %lld bytes", (long long)req,
				  (long long)limit);
	*ret = want;
	return 0;
}

/* Is this node among the topologies in @t (none given: yes)? */
static bool topology_has_us(Csi__V1__Topology **t, size_t n, const char *node)
{
	for (size_t i = 0; i < n; i++) {
		bool ours = true;

		for (size_t j = 0; j < t[i]->n_segments; j++)
			if (!streq(t[i]->segments[j]->key, csi_plugin.topology_key) ||
			    !streq(t[i]->segments[j]->value, node))
				ours = false;
		if (ours)
			return true;
	}
	return n == 0;
}

static void create_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__CreateVolumeRequest *q = (const void *)m;
	const Csi__V1__TopologyRequirement *tr = q->accessibility_requirements;
	_cleanup_close_ int rootfd = -1;
	char id[FV_IMAGE_NAME_MAX + 8], img[FV_IMAGE_NAME_MAX + 8], lock[PATH_MAX], msg[512];
	bool prealloc = false;
	int64_t size;
	uint64_t have = 0;
	struct fv_ctx cx;
	int fd, r;

	if (csi_create_checks(call, q) < 0)
		return;
	for (size_t i = 0; i < q->n_parameters; i++) {
		const char *k = q->parameters[i]->key, *v = q->parameters[i]->value;

		if (streq(k, "preallocate") && (streq(v, "true") || streq(v, "false")))
			prealloc = streq(v, "true");
		else if (!csi_sidecar_param(k))
			return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "parameter '%s'='%s' is "
					       "not one of ours (preallocate: true or false)", k, v);
	}
	if (wanted_size(call, q->capacity_range, DEFAULT_SIZE, &size) < 0 ||
	    csi_open(call, &cx, NULL) < 0)
		return;
	if (tr && !topology_has_us(tr->requisite, tr->n_requisite, cx.cfg.node_name))
		return (void)grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "the required topology does not "
				       "include this node (%s): loop volumes are made on their node",
				       cx.cfg.node_name);
	csi_volume_id_of(q->name, id, sizeof(id));
	image_of(id, img, sizeof(img));
	rootfd = open_root(call, &cx);
	if (rootfd < 0)
		return;
	if (size > root_max(rootfd))
		return (void)grpc_fail(call, GRPC_OUT_OF_RANGE, "at most %lld bytes: the largest "
				       "file the loop root's filesystem holds", (long long)root_max(rootfd));
	fd = csi_lock_volume(call, &cx, id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_image_ensure_named(rootfd, img, id, q->name, (uint64_t)size, prealloc, &have, msg,
				  sizeof(msg));
	fv_unlock_remove(&cx, lock, fd);
	if (r < 0)
		return (void)csi_fail_with(call, r, "%s", msg);
	if (msg[0])
		fv_log("CreateVolume %s: %s", q->name, msg);
	if (csi_check_made(call, id, have, q->capacity_range) == 0)
		csi_reply_volume(call, id, have, 1, (const char *[]){ "file" },
				 (const char *[]){ img }, cx.cfg.node_name);
}

static void delete_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__DeleteVolumeRequest *q = (const void *)m;
	Csi__V1__DeleteVolumeResponse resp = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	_cleanup_close_ int rootfd = -1;
	char img[FV_IMAGE_NAME_MAX + 8], lock[PATH_MAX], msg[512];
	struct fv_ctx cx;
	int fd, r;

	if (csi_need(call, *q->volume_id, "volume_id") < 0)
		return;
	/* no image can have this ID: no volume of ours, nothing to delete */
	if (!image_of(q->volume_id, img, sizeof(img)))
		return grpc_reply(call, &resp.base);
	if (csi_open(call, &cx, NULL) < 0)
		return;
	rootfd = open_root(call, &cx);
	if (rootfd < 0)
		return;
	fd = csi_lock_volume(call, &cx, q->volume_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_image_remove(rootfd, img, q->volume_id, msg, sizeof(msg));
	fv_unlock_remove(&cx, lock, fd);
	if (r < 0)
		return (void)csi_fail_with(call, r, "not deleted: %s", msg);
	if (msg[0])
		fv_log("DeleteVolume %s: %s", q->volume_id, msg);
	grpc_reply(call, &resp.base);
}

/* The size of volume @id's image: 0, or <0 (answered NOT_FOUND when there is none). */
static int image_size(struct grpc_call *call, struct fv_ctx *cx, const char *id, int64_t *ret)
{
	char img[FV_IMAGE_NAME_MAX + 8];
	_cleanup_close_ int rootfd = -1, fd = -1;
	struct stat st;

	if (!image_of(id, img, sizeof(img)))
		return csi_no_volume(call, id);
	rootfd = open_root(call, cx);
	if (rootfd < 0)
		return rootfd;
	fd = fv_open_regular_beneath(rootfd, img, O_RDONLY, &st);
	if (fd == -ENOENT)
		return -grpc_fail(call, GRPC_NOT_FOUND, "volume %s: no image %s in '%s'", id, img,
				  cx->cfg.loop_root);
	if (fd < 0)
		return -grpc_fail(call, GRPC_INTERNAL, "volume %s: image %s: %s", id, img,
				  fd == -EMEDIUMTYPE ? "not a regular file" : strerror(-fd));
	*ret = st.st_size;
	return 0;
}

/* Is there a volume @id: 0, or <0 (answered NOT_FOUND). */
static int loop_exists(struct grpc_call *call, struct fv_ctx *cx, const char *id)
{
	int64_t size;

	return image_size(call, cx, id, &size);
}

static void get_capacity(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__GetCapacityRequest *q = (const void *)m;
	Csi__V1__GetCapacityResponse resp = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
	Google__Protobuf__Int64Value max = GOOGLE__PROTOBUF__INT64_VALUE__INIT;
	Google__Protobuf__Int64Value min = GOOGLE__PROTOBUF__INT64_VALUE__INIT;
	_cleanup_close_ int rootfd = -1;
	struct statvfs sv;
	struct fv_ctx cx;

	if (csi_open(call, &cx, NULL) < 0)
		return;
	/* another node's space is not ours to tell: none here */
	if (!q->accessible_topology ||
	    topology_has_us((Csi__V1__Topology **)&q->accessible_topology, 1, cx.cfg.node_name)) {
		rootfd = open_root(call, &cx);
		if (rootfd < 0)
			return;
		if (fstatvfs(rootfd, &sv) < 0)
			return (void)grpc_fail(call, GRPC_INTERNAL, "statvfs of '%s': %s",
					       cx.cfg.loop_root, strerror(errno));
		resp.available_capacity = (int64_t)(sv.f_bavail * sv.f_frsize);
	}
	max.value = rootfd >= 0 ? root_max(rootfd) : MAX_SIZE;
	min.value = MiB;
	resp.maximum_volume_size = &max;
	resp.minimum_volume_size = &min;
	grpc_reply(call, &resp.base);
}

static void controller_expand(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__ControllerExpandVolumeRequest *q = (const void *)m;
	Csi__V1__ControllerExpandVolumeResponse resp = CSI__V1__CONTROLLER_EXPAND_VOLUME_RESPONSE__INIT;
	_cleanup_close_ int rootfd = -1;
	char img[FV_IMAGE_NAME_MAX + 8], lock[PATH_MAX], msg[512];
	int64_t have, want;
	struct fv_ctx cx;
	int fd, r;

	if (csi_need(call, *q->volume_id && q->capacity_range, "volume_id and capacity_range") < 0)
		return;
	if (wanted_size(call, q->capacity_range, 0, &want) < 0 || csi_open(call, &cx, NULL) < 0)
		return;
	resp.node_expansion_required = true; /* the filesystem grows on the node */
	/*
	 * A controller without a loop root (one central resizer for every node:
	 * the external-resizer is not distributed) cannot see the image: the
	 * node grows it, file and all, at NodeExpandVolume.
	 */
	if (image_of(q->volume_id, img, sizeof(img)) && access(cx.cfg.loop_root, F_OK) < 0 &&
	    errno == ENOENT) {
		resp.capacity_bytes = want;
		return grpc_reply(call, &resp.base);
	}
	if (image_size(call, &cx, q->volume_id, &have) < 0)
		return;
	if (have >= want) {
		resp.capacity_bytes = have;
		return grpc_reply(call, &resp.base);
	}
	rootfd = open_root(call, &cx);
	if (rootfd < 0)
		return;
	fd = csi_lock_volume(call, &cx, q->volume_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	/* a bound image is grown by NodeExpandVolume (the file and the device's capacity at once) */
	r = fv_image_grow(rootfd, img, q->volume_id, (uint64_t)want, msg, sizeof(msg));
	fv_unlock_remove(&cx, lock, fd);
	if (r == -ENOENT) /* gone since image_size() looked: a precondition, not an ID of none */
		r = -EPERM;
	if (r < 0 && r != -EBUSY)
		return (void)csi_fail_with(call, r, "not grown: %s", msg);
	if (msg[0])
		fv_log("ControllerExpandVolume %s: %s", q->volume_id, msg);
	resp.capacity_bytes = want;
	grpc_reply(call, &resp.base);
}

const struct csi_controller csi_controller_loop = {
	.driver = "loop",
	.id_ok = loop_id_ok,
	.create = create_volume,
	.remove = delete_volume,
	.exists = loop_exists,
	.capacity = get_capacity,
	.expand = controller_expand,
};
