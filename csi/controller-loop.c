/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service for loop (csi/controller.h), and NodeExpandVolume.
 *
 * Loop's images live in the node's loop root (a node-local driver: its
 * controller runs beside the node plugin, one per node, as the
 * external-provisioner's distributed provisioning does).  The images are
 * made, removed and grown by the same code as the flexvol/loop node agent's
 * (provisioner/image.c), with the same confinement and owner records: the
 * owner of a CSI volume's image is its volume ID, as the owner of a
 * FlexVolume PV's image is the PV's name (the name the loop driver records).
 *
 *   CreateVolume            image "<id>.img" in the loop root, sparse (or
 *                           allocated: parameter preallocate=true), owned by <id>
 *   DeleteVolume            the image removed, when <id> owns it and no loop device holds it
 *   ValidateVolumeCapabilities, GetCapacity (the loop root's free bytes)
 *   ControllerExpandVolume  the image grown when no device holds it; the node grows the rest
 *                           (all of it where this controller has no loop root)
 *   NodeExpandVolume        the op layer's expandfs (image, loop capacity, filesystem)
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

#include <json-c/json.h>

#include "csi.h"
#include "controller.h"
#include "../src/internal.h"
#include "fv/image.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/state.h"
#include "fv/util.h"

#define MiB (1024LL * 1024LL)
#define DEFAULT_SIZE (1024LL * MiB)
#define MAX_SIZE (1LL << 50) /* the loop driver's bound: 1Pi */

static bool loop_serves(void)
{
	return true; /* every call reads the node config: one without a loop root answers so */
}

/* The image of volume @id ("<id>.img"), when @id is a name the loop root may hold. */
static bool image_of(const char *id, char *img, size_t len)
{
	return (size_t)snprintf(img, len, "%s.img", id) < len && fv_image_name_ok(img);
}

/* Is @id a volume ID whose image the loop root may hold? */
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
			if (!streq(t[i]->segments[j]->key, csi_ep.topology_key) ||
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
	Csi__V1__CreateVolumeResponse resp = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
	Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;
	Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT, *topos[] = { &topo };
	Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
	Csi__V1__Topology__SegmentsEntry *segs[] = { &seg };
	Csi__V1__Volume__VolumeContextEntry file = CSI__V1__VOLUME__VOLUME_CONTEXT_ENTRY__INIT;
	Csi__V1__Volume__VolumeContextEntry *ctxs[] = { &file };
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
	    csi_ctx_load(call, &cx) < 0)
		return;
	if (tr && !topology_has_us(tr->requisite, tr->n_requisite, cx.cfg.node_name))
		return (void)grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "the required topology does not "
				       "include this node (%s): loop volumes are made on their node",
				       cx.cfg.node_name);
	csi_volume_id_of(q->name, loop_id_ok, id, sizeof(id));
	image_of(id, img, sizeof(img));
	rootfd = open_root(call, &cx);
	if (rootfd < 0)
		return;
	fd = csi_lock_as_dispatcher(call, &cx, "vol", id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_image_ensure(rootfd, img, id, (uint64_t)size, prealloc, &have, msg, sizeof(msg));
	fv_unlock_remove(&cx, lock, fd);
	if (r == -EEXIST)
		return (void)grpc_fail(call, GRPC_ALREADY_EXISTS, "%s", msg);
	if (r == -ENOSPC)
		return (void)grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "%s", msg);
	if (r < 0)
		return (void)grpc_fail(call, GRPC_INTERNAL, "%s", msg);
	if (msg[0])
		fv_log("CreateVolume %s: %s", q->name, msg);
	/* a volume made before for this name: it must fit the range asked now */
	if ((int64_t)have < size && !(q->capacity_range && q->capacity_range->limit_bytes &&
				       (int64_t)have >= q->capacity_range->required_bytes))
		return (void)grpc_fail(call, GRPC_ALREADY_EXISTS, "volume %s exists with %llu bytes, "
				       "not the %lld asked", id, (unsigned long long)have, (long long)size);
	if (q->capacity_range && q->capacity_range->limit_bytes &&
	    (int64_t)have > q->capacity_range->limit_bytes)
		return (void)grpc_fail(call, GRPC_ALREADY_EXISTS, "volume %s exists with %llu bytes, "
				       "past the limit %lld", id, (unsigned long long)have,
				       (long long)q->capacity_range->limit_bytes);
	file.key = (char *)"file";
	file.value = img;
	seg.key = csi_ep.topology_key;
	seg.value = cx.cfg.node_name;
	topo.n_segments = 1;
	topo.segments = segs;
	vol.volume_id = id;
	vol.capacity_bytes = (int64_t)have;
	vol.n_volume_context = 1;
	vol.volume_context = ctxs;
	vol.n_accessible_topology = 1;
	vol.accessible_topology = topos;
	resp.volume = &vol;
	grpc_reply(call, &resp.base);
}

static void delete_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__DeleteVolumeRequest *q = (const void *)m;
	Csi__V1__DeleteVolumeResponse resp = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	_cleanup_close_ int rootfd = -1;
	char img[FV_IMAGE_NAME_MAX + 8], lock[PATH_MAX], msg[512];
	struct fv_ctx cx;
	int fd, r;

	if (!*q->volume_id)
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_id is required");
	/* no image can have this ID: no volume of ours, nothing to delete */
	if (!image_of(q->volume_id, img, sizeof(img)))
		return grpc_reply(call, &resp.base);
	if (csi_ctx_load(call, &cx) < 0)
		return;
	rootfd = open_root(call, &cx);
	if (rootfd < 0)
		return;
	fd = csi_lock_as_dispatcher(call, &cx, "vol", q->volume_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_image_remove(rootfd, img, q->volume_id, msg, sizeof(msg));
	fv_unlock_remove(&cx, lock, fd);
	if (r == -EBUSY || r == -EPERM || r == -EAGAIN)
		return (void)grpc_fail(call, GRPC_FAILED_PRECONDITION, "not deleted: %s", msg);
	if (r < 0)
		return (void)grpc_fail(call, GRPC_INTERNAL, "not deleted: %s", msg);
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
		return -grpc_fail(call, GRPC_NOT_FOUND, "no %s volume has the ID '%s'",
				  csi_ep.drv->name, id);
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

	if (csi_ctx_load(call, &cx) < 0)
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
	max.value = MAX_SIZE;
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

	if (!*q->volume_id || !q->capacity_range)
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT,
				       "volume_id and capacity_range are required");
	if (wanted_size(call, q->capacity_range, 0, &want) < 0 || csi_ctx_load(call, &cx) < 0)
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
	fd = csi_lock_as_dispatcher(call, &cx, "vol", q->volume_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	/* a bound image is grown by NodeExpandVolume (the file and the device's capacity at once) */
	r = fv_image_grow(rootfd, img, q->volume_id, (uint64_t)want, msg, sizeof(msg));
	fv_unlock_remove(&cx, lock, fd);
	if (r == -EPERM || r == -ENOENT)
		return (void)grpc_fail(call, GRPC_FAILED_PRECONDITION, "not grown: %s", msg);
	if (r == -ENOSPC)
		return (void)grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "not grown: %s", msg);
	if (r < 0 && r != -EBUSY)
		return (void)grpc_fail(call, GRPC_INTERNAL, "not grown: %s", msg);
	if (msg[0])
		fv_log("ControllerExpandVolume %s: %s", q->volume_id, msg);
	resp.capacity_bytes = want;
	grpc_reply(call, &resp.base);
}

/*
 * NodeExpandVolume: the op layer's expandfs on the volume's mount.  The
 * request has no volume context: the options come from the volume's state
 * record, which stage wrote (the loop record's "file" is its option of that
 * name); a volume not staged on this node has none.
 */
static void node_expand(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__NodeExpandVolumeRequest *q = (const void *)m;
	Csi__V1__NodeExpandVolumeResponse resp = CSI__V1__NODE_EXPAND_VOLUME_RESPONSE__INIT;
	json_object *rec = NULL, *opts, *f;
	struct fv_opts o = { 0 };
	char lock[PATH_MAX];
	struct stat st;
	int64_t want, have;
	struct fv_ctx cx;
	int fd, r;

	if (!*q->volume_id || !*q->volume_path)
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT,
				       "volume_id and volume_path are required");
	if (!csi_volume_id_ok(q->volume_id))
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "no %s volume has the ID '%s'",
				       csi_ep.drv->name, q->volume_id);
	if (csi_ctx_load(call, &cx) < 0)
		return;
	if (stat(q->volume_path, &st) < 0)
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "volume_path '%s': %s", q->volume_path,
				       strerror(errno));
	r = fv_state_read(&cx, q->volume_id, &rec);
	f = r == 0 ? json_object_object_get(rec, "file") : NULL;
	if (!f || !json_object_is_type(f, json_type_string)) {
		json_object_put(rec);
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "volume %s is not staged on this node",
				       q->volume_id);
	}
	opts = json_object_new_object();
	json_object_object_add(opts, "file", json_object_get(f));
	json_object_object_add(opts, "kubernetes.io/pvOrVolumeName",
			       json_object_new_string(q->volume_id));
	json_object_put(rec);
	r = fv_opts_parse(&cx, json_object_to_json_string_ext(opts, JSON_C_TO_STRING_PLAIN), &o);
	json_object_put(opts);
	if (r < 0) {
		csi_fail_op(call, &cx, r, "volume record");
		return;
	}
	if (image_size(call, &cx, q->volume_id, &have) < 0) {
		fv_opts_done(&o);
		return;
	}
	/* no size asked: the filesystem grows to the image as it is */
	want = have;
	if (q->capacity_range && q->capacity_range->required_bytes &&
	    wanted_size(call, q->capacity_range, 0, &want) < 0) {
		fv_opts_done(&o);
		return;
	}
	fd = csi_lock_as_dispatcher(call, &cx, "vol", q->volume_id, lock, sizeof(lock));
	if (fd >= 0) {
		r = cx.drv->expandfs(&cx, &o, "", q->volume_path, (uint64_t)want, (uint64_t)have);
		fv_unlock_remove(&cx, lock, fd);
		if (r == -ENXIO)
			grpc_fail(call, GRPC_NOT_FOUND, "%s", cx.message);
		else if (r < 0)
			csi_fail_op(call, &cx, r, "expand");
	}
	fv_opts_done(&o);
	if (fd >= 0 && r == 0) {
		resp.capacity_bytes = want;
		grpc_reply(call, &resp.base);
	}
}

const struct csi_controller csi_controller_loop = {
	.driver = "loop",
	.serves = loop_serves,
	.create = create_volume,
	.remove = delete_volume,
	.exists = loop_exists,
	.capacity = get_capacity,
	.expand = controller_expand,
	.node_expand = node_expand,
};
