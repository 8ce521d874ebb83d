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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "csi.h"
#include "controller.h"
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

/* How long a mounted volume's filesystem may stay frozen for a copy of it (writers wait). */
#define FREEZE_MS 30000

/*
 * Lock the volumes @a and @b (either may be NULL), in the order of their
 * names, so that two calls locking the same two never wait for each other.
 * 0 and the fds in @fd (-1 where none), or <0 (answered).
 */
static int lock_two(struct grpc_call *call, struct fv_ctx *cx, const char *a, const char *b,
		    int fd[2])
{
	const char *v[2] = { a, b };
	char name[PATH_MAX];

	if (a && b && strcmp(a, b) > 0) {
		v[0] = b;
		v[1] = a;
	}
	fd[0] = fd[1] = -1;
	for (int i = 0; i < 2; i++) {
		if (!v[i] || (i == 1 && v[0] && streq(v[0], v[1])))
			continue;
		fd[i] = csi_lock_volume(call, cx, v[i], name, sizeof(name));
		if (fd[i] < 0) {
			fv_unlock(fd[0]);
			return fd[i];
		}
	}
	return 0;
}

static void unlock_two(int fd[2])
{
	fv_unlock(fd[0]);
	fv_unlock(fd[1]);
}

/*
 * CreateVolume from a snapshot or a volume (a clone): image @img of volume
 * @id a point-in-time copy of the source's file, at least @size bytes.  0
 * and *@have, or <0 (answered).
 */
static int make_copy(struct grpc_call *call, struct fv_ctx *cx, int rootfd,
		     const Csi__V1__CreateVolumeRequest *q, const char *id, const char *img,
		     uint64_t size, uint64_t *have, char *msg, size_t len)
{
	const Csi__V1__VolumeContentSource *s = q->volume_content_source;
	const Csi__V1__CapacityRange *cr = q->capacity_range;
	bool snap = s->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT;
	const char *from = snap ? s->snapshot->snapshot_id : s->volume->volume_id;
	char src[FV_IMAGE_NAME_MAX + 8];
	struct fv_image_info info;
	int fd[2], r;

	if ((snap ? !csi_snapshot_id_ok(from) ||
			    (size_t)snprintf(src, sizeof(src), "%s.snap", from) >= sizeof(src)
		  : !image_of(from, src, sizeof(src))) ||
	    fv_image_info(rootfd, src, &info) < 0 || !streq(info.owner, from))
		return -grpc_fail(call, GRPC_NOT_FOUND, "no %s %s '%s' in this node's loop root",
				  csi_plugin.drv->name, snap ? "snapshot" : "volume", from);
	if (cr && cr->limit_bytes && info.size > (uint64_t)cr->limit_bytes)
		return -grpc_fail(call, GRPC_OUT_OF_RANGE, "%s '%s' is %llu bytes, past the limit "
				  "%lld", snap ? "snapshot" : "volume", from,
				  (unsigned long long)info.size, (long long)cr->limit_bytes);
	r = lock_two(call, cx, id, snap ? NULL : from, fd);
	if (r < 0)
		return r;
	/* no size asked: the source's */
	r = fv_image_copy(rootfd, src, img, id, q->name, from, cr && cr->required_bytes ? size : 0,
			  FREEZE_MS, have, msg, len);
	unlock_two(fd);
	return r < 0 ? csi_fail_with(call, r, "%s", msg) : 0;
}

/*
 * A class's parameters: preallocate (true, false: sparse, the default) and
 * overcommit (a ratio from 1 to 100, one decimal: how far the sparse images
 * of a node may promise more than its free space, default 1: never).
 */
struct class_params {
	bool prealloc;
	unsigned int ratio10; /* overcommit x 10 */
};

static int class_params(struct grpc_call *call, struct csi_map params, struct class_params *ret)
{
	ret->prealloc = false;
	ret->ratio10 = 10;
	for (size_t i = 0; i < params.n; i++) {
		const char *k = params.map[i]->key, *v = params.map[i]->value;
		char *end = NULL;
		unsigned long whole, tenth = 0;

		if (streq(k, "preallocate") && (streq(v, "true") || streq(v, "false"))) {
			ret->prealloc = streq(v, "true");
			continue;
		}
		if (streq(k, "overcommit") && v[0] >= '0' && v[0] <= '9') {
			whole = strtoul(v, &end, 10);
			if (*end == '.' && end[1] >= '0' && end[1] <= '9' && !end[2])
				tenth = (unsigned long)(end[1] - '0');
			else if (*end)
				whole = 0;
			if (whole >= 1 && whole * 10 + tenth <= 1000) {
				ret->ratio10 = (unsigned int)(whole * 10 + tenth);
				continue;
			}
		}
		if (!csi_sidecar_param(k))
			return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "parameter '%s'='%s' is not one "
					  "of ours (preallocate: true or false; overcommit: 1 to 100, "
					  "one decimal)", k, v);
	}
	return 0;
}

/* What a class of @c may still make in the loop root of @sp (GetCapacity's available). */
static uint64_t room_for(const struct class_params *c, const struct fv_image_space *sp)
{
	uint64_t may;

	if (c->prealloc)
		return sp->free; /* allocated at once: no promise beyond what is there */
	may = sp->free / 10 * c->ratio10;
	return may > sp->unbacked ? may - sp->unbacked : 0;
}

/*
 * A new image of @size bytes fits the node's space for class @c: 0, or <0
 * (answered RESOURCE_EXHAUSTED, saying why).  Under the loop root's
 * capacity lock (@lockfd), so two calls cannot both take the last room.
 */
static int check_room(struct grpc_call *call, struct fv_ctx *cx, int rootfd,
		      const struct class_params *c, uint64_t size, int *lockfd)
{
	struct fv_image_space sp;
	char name[64];
	int r;

	snprintf(name, sizeof(name), "%s-capacity", cx->drv->name);
	*lockfd = fv_lock(cx, name);
	if (*lockfd < 0)
		return csi_fail(call, cx, *lockfd, "capacity lock");
	r = fv_image_space(rootfd, &sp);
	if (r < 0)
		return -grpc_fail(call, GRPC_INTERNAL, "cannot read the loop root's space: %s",
				  strerror(-r));
	if (size <= room_for(c, &sp))
		return 0;
	return -grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "a %s image of %llu bytes does not fit on "
			  "node %s: its loop root has %llu bytes free, %llu of them promised to "
			  "sparse images (overcommit %u.%u)", c->prealloc ? "preallocated" : "sparse",
			  (unsigned long long)size, cx->cfg.node_name, (unsigned long long)sp.free,
			  (unsigned long long)sp.unbacked, c->ratio10 / 10, c->ratio10 % 10);
}

static void create_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__CreateVolumeRequest *q = (const void *)m;
	const Csi__V1__TopologyRequirement *tr = q->accessibility_requirements;
	_cleanup_close_ int rootfd = -1;
	char id[FV_IMAGE_NAME_MAX + 8], img[FV_IMAGE_NAME_MAX + 8], lock[PATH_MAX], msg[512];
	struct class_params cp;
	struct fv_image_info info;
	int64_t size;
	uint64_t have = 0;
	struct fv_ctx cx;
	int fd, room = -1, r;

	if (csi_create_checks(call, q) < 0 ||
	    class_params(call, CSI_MAP(q, parameters), &cp) < 0)
		return;
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
	if (q->volume_content_source)
		r = make_copy(call, &cx, rootfd, q, id, img, (uint64_t)size, &have, msg, sizeof(msg));
	else if ((fd = csi_lock_volume(call, &cx, id, lock, sizeof(lock))) < 0)
		return;
	else {
		/* a new image must fit the node's room (a retry finds its image made) */
		r = fv_image_info(rootfd, img, &info) == 0 ? 0 :
			check_room(call, &cx, rootfd, &cp, (uint64_t)size, &room);
		if (r == 0) {
			r = fv_image_ensure_named(rootfd, img, id, q->name, (uint64_t)size,
						  cp.prealloc, &have, msg, sizeof(msg));
			if (r < 0)
				csi_fail_with(call, r, "%s", msg);
		}
		fv_unlock(room);
		fv_unlock_remove(&cx, lock, fd);
	}
	if (r < 0)
		return;
	if (msg[0])
		fv_log("CreateVolume %s: %s", q->name, msg);
	if (csi_check_made(call, id, have, q->capacity_range) == 0)
		csi_reply_volume(call, id, have, 1, (const char *[]){ "file" },
				 (const char *[]){ img }, cx.cfg.node_name, q->volume_content_source);
}

/*
 * The file @file of ID @id removed from the loop root, when @id owns it and
 * no loop device holds it, under @id's lock; then the call answered with
 * @resp (DeleteVolume's, DeleteSnapshot's): an image or a snapshot.
 */
static void remove_file(struct grpc_call *call, const char *what, const char *id,
			const char *file, const ProtobufCMessage *resp)
{
	_cleanup_close_ int rootfd = -1;
	char lock[PATH_MAX], msg[512];
	struct fv_ctx cx;
	int fd, r;

	if (csi_open(call, &cx, NULL) < 0 || (rootfd = open_root(call, &cx)) < 0)
		return;
	fd = csi_lock_volume(call, &cx, id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_image_remove(rootfd, file, id, msg, sizeof(msg));
	fv_unlock(fd);
	if (r < 0)
		return (void)csi_fail_with(call, r, "not deleted: %s", msg);
	if (msg[0])
		fv_log("%s %s: %s", what, id, msg);
	grpc_reply(call, resp);
}

static void delete_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__DeleteVolumeRequest *q = (const void *)m;
	Csi__V1__DeleteVolumeResponse resp = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	char img[FV_IMAGE_NAME_MAX + 8];

	if (csi_need(call, *q->volume_id, "volume_id") < 0)
		return;
	/* no image can have this ID: no volume of ours, nothing to delete */
	if (!image_of(q->volume_id, img, sizeof(img)))
		return grpc_reply(call, &resp.base);
	remove_file(call, "DeleteVolume", q->volume_id, img, &resp.base);
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
	struct fv_image_space sp;
	struct class_params cp;
	struct fv_ctx cx;
	int r;

	if (class_params(call, CSI_MAP(q, parameters), &cp) < 0 ||
	    csi_open(call, &cx, NULL) < 0)
		return;
	/* another node's space is not ours to tell: none here */
	if (!q->accessible_topology ||
	    topology_has_us((Csi__V1__Topology **)&q->accessible_topology, 1, cx.cfg.node_name)) {
		rootfd = open_root(call, &cx);
		if (rootfd < 0)
			return;
		r = fv_image_space(rootfd, &sp);
		if (r < 0)
			return (void)grpc_fail(call, GRPC_INTERNAL, "cannot read the space of '%s': %s",
					       cx.cfg.loop_root, strerror(-r));
		resp.available_capacity = (int64_t)room_for(&cp, &sp);
	}
	/*
	 * The largest CreateVolume of this class would make here: the largest file
	 * the root's filesystem holds, but no more than the room (check_room()
	 * refuses the rest).  kube-scheduler prefers this to the capacity when it
	 * places a claim (CSIStorageCapacity's maximumVolumeSize).
	 */
	max.value = rootfd >= 0 ? root_max(rootfd) : MAX_SIZE;
	if (rootfd >= 0 && resp.available_capacity < max.value)
		max.value = resp.available_capacity;
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
		/* no shrinking: an image already past the limit asked is a range we cannot serve */
		if (q->capacity_range->limit_bytes && have > q->capacity_range->limit_bytes)
			return (void)grpc_fail(call, GRPC_OUT_OF_RANGE, "volume %s is %lld bytes already, "
					       "past the limit of %lld bytes (volumes do not shrink)",
					       q->volume_id, (long long)have,
					       (long long)q->capacity_range->limit_bytes);
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

/*
 * CreateSnapshot: "<sid>.snap" in the loop root, a point-in-time copy of
 * the volume's image (its filesystem frozen meanwhile when it is mounted on
 * this node), under the volume's lock.  A volume whose image is not in this
 * node's loop root is another node's: NOT_FOUND here (loop volumes are
 * snapshotted on their node: csi-snapshotter runs beside each node's
 * controller).
 */
static void create_snapshot(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__CreateSnapshotRequest *q = (const void *)m;
	_cleanup_close_ int rootfd = -1;
	char sid[96], file[FV_IMAGE_NAME_MAX + 8], img[FV_IMAGE_NAME_MAX + 8], msg[768];
	struct fv_image_info info;
	uint64_t size = 0;
	struct fv_ctx cx;
	int fd[2], r;

	if (csi_need(call, *q->name && *q->source_volume_id, "name and source_volume_id") < 0)
		return;
	for (size_t i = 0; i < q->n_parameters; i++)
		if (!csi_sidecar_param(q->parameters[i]->key))
			return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "parameter '%s' is not one "
					       "of ours (loop snapshots take none)",
					       q->parameters[i]->key);
	if (!image_of(q->source_volume_id, img, sizeof(img)))
		return (void)csi_no_volume(call, q->source_volume_id);
	csi_snapshot_id_of(q->name, sid, sizeof(sid));
	snprintf(file, sizeof(file), "%s.snap", sid);
	if (csi_open(call, &cx, NULL) < 0 || (rootfd = open_root(call, &cx)) < 0)
		return;
	if (fv_image_info(rootfd, img, &info) < 0)
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "volume %s has no image in this node's "
				       "loop root", q->source_volume_id);
	r = lock_two(call, &cx, q->source_volume_id, sid, fd);
	if (r < 0)
		return;
	r = fv_image_copy(rootfd, img, file, sid, q->name, q->source_volume_id, 0, FREEZE_MS, &size,
			  msg, sizeof(msg));
	unlock_two(fd);
	if (r < 0)
		return (void)csi_fail_with(call, r, "snapshot of %s: %s", q->source_volume_id, msg);
	if (msg[0])
		fv_log("CreateSnapshot %s: %s", q->name, msg);
	if (fv_image_info(rootfd, file, &info) < 0)
		info.created = 0;
	csi_reply_snapshot(call, sid, q->source_volume_id, size, info.created);
}

static void delete_snapshot(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__DeleteSnapshotRequest *q = (const void *)m;
	Csi__V1__DeleteSnapshotResponse resp = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;
	char file[FV_IMAGE_NAME_MAX + 8];

	if (csi_need(call, *q->snapshot_id, "snapshot_id") < 0)
		return;
	/* no snapshot of ours can have this ID: nothing to delete */
	if (!csi_snapshot_id_ok(q->snapshot_id))
		return grpc_reply(call, &resp.base);
	snprintf(file, sizeof(file), "%s.snap", q->snapshot_id);
	remove_file(call, "DeleteSnapshot", q->snapshot_id, file, &resp.base);
}

struct collect {
	struct csi_snapshot *s;
	size_t n, cap;
};

static int collect_fn(const char *file, const struct fv_image_info *i, void *arg)
{
	struct collect *c = arg;
	size_t n = strlen(file) - strlen(".snap");
	struct csi_snapshot *s;

	/* ours: its owner record is its ID */
	if (n >= sizeof(c->s->id) || strncmp(i->owner, file, n) || i->owner[n])
		return 0;
	if (c->n == c->cap) {
		s = realloc(c->s, (c->cap ? c->cap * 2 : 16) * sizeof(*s));
		if (!s)
			return -ENOMEM;
		c->s = s;
		c->cap = c->cap ? c->cap * 2 : 16;
	}
	s = &c->s[c->n++];
	snprintf(s->id, sizeof(s->id), "%s", i->owner);
	snprintf(s->source, sizeof(s->source), "%s", i->source);
	s->size = i->size;
	s->created = i->created;
	return 0;
}

static void list_snapshots(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__ListSnapshotsRequest *q = (const void *)m;
	_cleanup_close_ int rootfd = -1;
	struct collect c = { 0 };
	struct fv_ctx cx;
	int r;

	if (csi_open(call, &cx, NULL) < 0 || (rootfd = open_root(call, &cx)) < 0)
		return;
	r = fv_snapshot_each(rootfd, collect_fn, &c);
	if (r < 0)
		grpc_fail(call, GRPC_INTERNAL, "cannot list the loop root: %s", strerror(-r));
	else
		csi_reply_snapshots(call, q, c.s, c.n);
	free(c.s);
}

const struct csi_controller csi_controller_loop = {
	.driver = "loop",
	.id_ok = loop_id_ok,
	.create = create_volume,
	.remove = delete_volume,
	.exists = loop_exists,
	.capacity = get_capacity,
	.expand = controller_expand,
	.create_snapshot = create_snapshot,
	.delete_snapshot = delete_snapshot,
	.list_snapshots = list_snapshots,
	.clones = true,
};
