/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service for nfs (csi/controller.h): one directory per
 * volume directly below --root, the share mounted into the controller's
 * pod, made and removed by the code flexvol-provisioner's nfs backend uses
 * too (lib/ownerdir.c: confined walks, owner records).  A CSI volume's
 * directory is owned by its volume ID, as a FlexVolume PV's is by its
 * claim; nodes mount --share with subPath = the ID (csi/node.c, the nfs
 * driver's mount).
 *
 *   CreateVolume     directory <id>, mode 0777 (the provisioner's default
 *                    mode), after its owner record; a directory already there
 *                    without our record, or with another's, is refused
 *   DeleteVolume     the directory and everything below it removed (not
 *                    leaving the share), then its record: only when <id> owns it
 *   ValidateVolumeCapabilities, GetCapacity (the share's free bytes)
 *
 * A directory has no size: the capacity asked is kept in the owner record
 * (a retry must ask a range it fits, as CSI says) and answered, but the
 * share enforces none, and nothing is grown.  Served when both --root and
 * --share are given.
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
#include "fv/ownerdir.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/util.h"

static bool nfs_serves(const struct csi_profile *p)
{
	return p->root && p->share;
}

/* A volume ID an owner record can hold whole. */
static bool nfs_id_ok(const char *id)
{
	return strlen(id) < sizeof(((struct fv_owner *)0)->claim);
}

/* The share's mount (O_PATH): fd, or <0 (answered). */
static int open_root(struct grpc_call *call)
{
	int fd = fv_ownerdir_root_open(csi_plugin.root);

	if (fd < 0)
		return -grpc_fail(call, GRPC_FAILED_PRECONDITION, "cannot open the share's mount "
				  "'%s': %s", csi_plugin.root, strerror(-fd));
	return fd;
}

/* lib/ownerdir.c's refusal @r of what it was asked to do with directory @id, answered. */
static int dir_fail(struct grpc_call *call, int r, const char *what, const char *id,
		    const struct fv_owner *other)
{
	switch (r) {
	case -FV_OWNERDIR_E_UNOWNED:
		return csi_fail_with(call, r, "%s: directory '%s' of the share has no owner record: "
				     "not a volume this endpoint made, not touched", what, id);
	case -FV_OWNERDIR_E_OWNED:
		return csi_fail_with(call, r, "%s: directory '%s' of the share is owned by %s, not "
				     "touched", what, id, other->claim);
	case -EBADMSG:
		return csi_fail_with(call, r, "%s: directory '%s' has an owner record that is not "
				     "one of ours, not touched", what, id);
	case -ENOTDIR:
	case -ELOOP: /* the share's state, not the request's: a precondition */
		return csi_fail_with(call, -FV_ERR_CONFLICT, "%s: '%s' in the share is not a "
				     "directory (symlinks are never followed)", what, id);
	default:
		return csi_fail_with(call, r, "%s: '%s': %s", what, id, strerror(-r));
	}
}

/* --share "SERVER:/PATH" ("[v6]:/PATH" too) split at the colon before the path. */
static void share_parts(char *server, size_t slen, const char **path)
{
	const char *c = strstr(csi_plugin.share, ":/");

	snprintf(server, slen, "%.*s", (int)(c - csi_plugin.share), csi_plugin.share);
	*path = c + 1;
}

static void create_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__CreateVolumeRequest *q = (const void *)m;
	_cleanup_close_ int rootfd = -1;
	char id[96], server[256], lock[PATH_MAX], inside[PATH_MAX];
	const char *path;
	const Csi__V1__CapacityRange *cr = q->capacity_range;
	enum fv_ownerdir_made made;
	struct fv_owner other, own;
	uint64_t size = 0;
	struct fv_ctx cx;
	int fd, r;

	if (csi_create_checks(call, q) < 0)
		return;
	for (size_t i = 0; i < q->n_parameters; i++)
		if (!csi_sidecar_param(q->parameters[i]->key))
			return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "parameter '%s'='%s' is not "
					       "one of ours (nfs volumes take no parameters)",
					       q->parameters[i]->key, q->parameters[i]->value);
	if (cr && (cr->required_bytes < 0 || cr->limit_bytes < 0 ||
		   (cr->limit_bytes && cr->limit_bytes < cr->required_bytes)))
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "a capacity range of negative "
				       "bytes, or with a limit below the required bytes");
	if (cr)
		size = (uint64_t)(cr->required_bytes ? cr->required_bytes : cr->limit_bytes);
	if (csi_open(call, &cx, NULL) < 0)
		return;
	csi_volume_id_of(q->name, id, sizeof(id));
	rootfd = open_root(call);
	if (rootfd < 0)
		return;
	fd = csi_lock_volume(call, &cx, id, lock, sizeof(lock));
	if (fd < 0)
		return;
	/* the record keeps the name (its PV's): two names never share a directory */
	r = fv_ownerdir_make(rootfd, id, 0777, (uid_t)-1, (gid_t)-1, id, q->name, size, false, &made,
			     &other, inside, sizeof(inside));
	/* the record says the size: this call's, or that of the call that wrote it (a retry) */
	if (r == 0)
		r = fv_ownerdir_owner(rootfd, id, &own);
	fv_unlock_remove(&cx, lock, fd);
	if (r < 0)
		return (void)dir_fail(call, r, "not created", id, &other);
	if (made == FV_OWNERDIR_NEW)
		fv_log("CreateVolume %s: directory %s made in %s", q->name, id, csi_plugin.root);
	if (!streq(own.pv, q->name))
		return (void)grpc_fail(call, GRPC_ALREADY_EXISTS, "volume %s was made for the name "
				       "'%s', not '%s'", id, own.pv, q->name);
	if (csi_check_made(call, id, own.size, cr) < 0)
		return;
	share_parts(server, sizeof(server), &path);
	/* the capacity as asked (0: unknown): the share enforces none */
	csi_reply_volume(call, id, own.size, 3, (const char *[]){ "server", "share", "subPath" },
			 (const char *[]){ server, path, id }, NULL);
}

static void delete_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__DeleteVolumeRequest *q = (const void *)m;
	Csi__V1__DeleteVolumeResponse resp = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	_cleanup_close_ int rootfd = -1;
	struct fv_owner other;
	char lock[PATH_MAX];
	struct fv_ctx cx;
	int fd, r;

	if (csi_need(call, *q->volume_id, "volume_id") < 0)
		return;
	/* no directory of ours can have this ID: nothing to delete */
	if (!csi_id_ok(q->volume_id))
		return grpc_reply(call, &resp.base);
	if (csi_open(call, &cx, NULL) < 0)
		return;
	rootfd = open_root(call);
	if (rootfd < 0)
		return;
	fd = csi_lock_volume(call, &cx, q->volume_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_ownerdir_delete(rootfd, q->volume_id, q->volume_id, &other);
	fv_unlock_remove(&cx, lock, fd);
	if (r < 0)
		return (void)dir_fail(call, r, "not deleted", q->volume_id, &other);
	fv_log("DeleteVolume %s: its directory is gone from %s", q->volume_id, csi_plugin.root);
	grpc_reply(call, &resp.base);
}

static int nfs_exists(struct grpc_call *call, struct fv_ctx *cx, const char *id)
{
	_cleanup_close_ int rootfd = -1;
	struct fv_owner own;
	struct stat st;

	(void)cx;
	if (csi_id_ok(id)) {
		rootfd = open_root(call);
		if (rootfd < 0)
			return rootfd;
		if (fv_ownerdir_owner(rootfd, id, &own) == 0 && streq(own.claim, id) &&
		    fstatat(rootfd, id, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
			return 0;
	}
	return csi_no_volume(call, id);
}

static void get_capacity(struct grpc_call *call, const ProtobufCMessage *m)
{
	Csi__V1__GetCapacityResponse resp = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
	_cleanup_close_ int rootfd = -1;
	struct statvfs sv;

	(void)m;
	rootfd = open_root(call);
	if (rootfd < 0)
		return;
	if (fstatvfs(rootfd, &sv) < 0)
		return (void)grpc_fail(call, GRPC_INTERNAL, "statvfs of '%s': %s", csi_plugin.root,
				       strerror(errno));
	resp.available_capacity = (int64_t)(sv.f_bavail * sv.f_frsize);
	grpc_reply(call, &resp.base);
}

const struct csi_controller csi_controller_nfs = {
	.driver = "nfs",
	.serves = nfs_serves,
	.id_ok = nfs_id_ok,
	.create = create_volume,
	.remove = delete_volume,
	.exists = nfs_exists,
	.capacity = get_capacity,
};
