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
#include <dirent.h>
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
#include "fv/ownerdir.h"
#include "fv/copy.h"
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

/*
 * Snapshots and clones of nfs volumes (docs/design.md, "Snapshots"): copies
 * of a volume's directory tree made on the share by lib/copy.c's confined
 * walk.  A copy, not an archive: restoring one is another copy (no archive
 * format to trust when it is read back as root), and each side of it is
 * walked beneath its directory, following no link.  No filesystem can be
 * frozen for it: a volume written meanwhile (by pods on any node) is copied
 * as it changes, not at one point in time.
 *
 *   .flexvol-snapshots/<sid>/        its owner record beside it (claim: <sid>, pv: the name)
 *                            data/   the copy, renamed in when whole
 *                            meta    "source <volume id>\nsize <bytes>\n", written before
 *   .flexvol-snapshots/.fill-<id>/   a restore or clone being made, then renamed over
 *                                    the volume's (empty) directory <id>
 */
#define SNAPS ".flexvol-snapshots"
#define COPY_MS (10 * 60 * 1000) /* a copy of a tree: the bound of one call */

static void snap_rel(const char *sid, char *buf, size_t len)
{
	snprintf(buf, len, SNAPS "/%s", sid);
}

/* The directory @rel below the root as an O_RDONLY fd: fd or -errno. */
static int open_rel(int rootfd, const char *rel)
{
	return fv_ownerdir_open(rootfd, rel, O_RDONLY);
}

/* Is directory @fd empty?  1 yes, 0 no, -errno. */
static int empty(int fd)
{
	int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;
	struct dirent *e;
	DIR *d;

	if (dfd < 0)
		return NEG_ERRNO();
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -ENOMEM;
	}
	while ((e = readdir(d)))
		n += !streq(e->d_name, ".") && !streq(e->d_name, "..");
	closedir(d);
	return n == 0;
}

/* A snapshot's meta file: 0 with its source and size, -ENOENT (not whole), -errno. */
static int read_meta(int snapfd, char *source, size_t len, uint64_t *size, int64_t *created)
{
	_cleanup_close_ int fd = -1;
	char buf[512], *v;
	struct stat st;
	ssize_t n;

	if (faccessat(snapfd, "data", F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -ENOENT;
	fd = openat(snapfd, "meta", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return fd < 0 ? NEG_ERRNO() : -EBADMSG;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0)
		return NEG_ERRNO();
	buf[n] = '\0';
	v = strstr(buf, "source ");
	if (!v || !strstr(buf, "\nsize "))
		return -EBADMSG;
	snprintf(source, len, "%.*s", (int)strcspn(v + 7, "\n"), v + 7);
	*size = strtoull(strstr(buf, "\nsize ") + 6, NULL, 10);
	*created = st.st_mtim.tv_sec;
	return 0;
}

/* The volume or snapshot data CreateVolume copies from: the directory's fd, or -errno. */
static int open_source(int rootfd, const Csi__V1__VolumeContentSource *src)
{
	char rel[PATH_MAX], source[256];
	struct fv_owner own;
	uint64_t size;
	int64_t created;
	int fd, r;

	if (src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME) {
		const char *vid = src->volume->volume_id;

		if (!csi_id_ok(vid) || fv_ownerdir_owner(rootfd, vid, &own) < 0 ||
		    !streq(own.claim, vid))
			return -ENOENT;
		return open_rel(rootfd, vid);
	}
	if (!csi_snapshot_id_ok(src->snapshot->snapshot_id))
		return -ENOENT;
	snap_rel(src->snapshot->snapshot_id, rel, sizeof(rel));
	if (fv_ownerdir_owner(rootfd, rel, &own) < 0 || !streq(own.claim, src->snapshot->snapshot_id))
		return -ENOENT;
	fd = open_rel(rootfd, rel);
	if (fd < 0)
		return fd;
	r = read_meta(fd, source, sizeof(source), &size, &created);
	if (r == 0)
		r = fv_ownerdir_open(fd, "data", O_RDONLY);
	close(fd);
	return r;
}

/*
 * The new volume @id's directory filled from @src: a copy made whole in
 * .fill-<id> (with an owner record, so a killed call's leftover is ours to
 * remove), then renamed over the volume's directory while it is still
 * empty.  Not empty: filled before (a retry).  0, -ECANCELED (answered),
 * or -errno.
 */
static int fill(struct grpc_call *call, int rootfd, const char *id,
		const Csi__V1__VolumeContentSource *src)
{
	_cleanup_close_ int from = -1, vol = -1, to = -1;
	char tmp[PATH_MAX], claim[128];
	enum fv_ownerdir_made made;
	unsigned int skipped = 0;
	uint64_t bytes = 0;
	int r;

	vol = open_rel(rootfd, id);
	if (vol < 0)
		return vol;
	r = empty(vol);
	if (r <= 0)
		return r;
	from = open_source(rootfd, src);
	if (from < 0) {
		bool clone = src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME;

		grpc_fail(call, GRPC_NOT_FOUND, "no %s '%s' on the share", clone ? "volume" : "snapshot",
			  clone ? src->volume->volume_id : src->snapshot->snapshot_id);
		return -ECANCELED;
	}
	snprintf(tmp, sizeof(tmp), SNAPS "/.fill-%s", id);
	snprintf(claim, sizeof(claim), "fill-%s", id);
	r = fv_ownerdir_delete(rootfd, tmp, claim, NULL); /* a killed call's half copy */
	if (r == 0)
		r = fv_ownerdir_make(rootfd, tmp, 0777, (uid_t)-1, (gid_t)-1, claim, claim, 0, false,
				     &made, NULL, NULL, 0);
	if (r == 0)
		r = (to = open_rel(rootfd, tmp)) < 0 ? to : 0;
	if (r == 0)
		r = fv_copy_tree(from, to, fv_now_ms() + COPY_MS, &bytes, &skipped);
	if (r == 0 && renameat(rootfd, tmp, rootfd, id) < 0)
		r = NEG_ERRNO();
	if (r < 0)
		(void)fv_ownerdir_delete(rootfd, tmp, claim, NULL);
	/* lib/ownerdir.c's refusals here are of the copy's directory, not the volume's */
	if (r <= -FV_OWNERDIR_E_UNOWNED && r >= -FV_OWNERDIR_E_HOLDS) {
		grpc_fail(call, GRPC_FAILED_PRECONDITION, "not created: '%s' in the share has "
			  "another's owner record, or none: not touched", tmp);
		return -ECANCELED;
	}
	if (r < 0)
		return r;
	(void)fv_ownerdir_remove_empty(rootfd, tmp, claim, NULL); /* its record, the dir gone */
	fv_log("CreateVolume %s: %llu bytes copied%s", id, (unsigned long long)bytes,
	       skipped ? " (device nodes, FIFOs and sockets skipped)" : "");
	return 0;
}

static void create_volume(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__CreateVolumeRequest *q = (const void *)m;
	_cleanup_close_ int rootfd = -1;
	char id[96], server[256], lock[PATH_MAX], inside[PATH_MAX];
	const char *path;
	const Csi__V1__CapacityRange *cr = q->capacity_range;
	enum fv_ownerdir_made made;
	struct fv_owner other = { 0 }, own;
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
	if (r == 0 && streq(own.pv, q->name) && q->volume_content_source) {
		r = fill(call, rootfd, id, q->volume_content_source);
		/*
		 * Not filled (no such source, the copy failed): no volume was answered,
		 * so no DeleteVolume will come for the directory made for it, which is
		 * still empty (fill() leaves a filled one alone): not left on the share.
		 */
		if (r < 0)
			(void)fv_ownerdir_remove_empty(rootfd, id, id, NULL);
	}
	fv_unlock_remove(&cx, lock, fd);
	if (r == -ECANCELED) /* answered */
		return;
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
			 (const char *[]){ server, path, id }, NULL, q->volume_content_source);
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

/*
 * CreateSnapshot: .flexvol-snapshots/<sid>: its record, then data.tmp
 * filled, meta written, data.tmp renamed to data.  A directory there
 * without data is a killed call's: removed and made again.
 */
static void create_snapshot(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__CreateSnapshotRequest *q = (const void *)m;
	_cleanup_close_ int rootfd = -1, from = -1, snap = -1, to = -1, mf = -1;
	char sid[96], rel[PATH_MAX], source[256], meta[512], lock[2][PATH_MAX];
	enum fv_ownerdir_made made;
	struct fv_owner own, other;
	unsigned int skipped;
	uint64_t size = 0;
	int64_t created = 0;
	struct fv_ctx cx;
	int fd[2] = { -1, -1 }, r;

	if (csi_need(call, *q->name && *q->source_volume_id, "name and source_volume_id") < 0)
		return;
	for (size_t i = 0; i < q->n_parameters; i++)
		if (!csi_sidecar_param(q->parameters[i]->key))
			return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "parameter '%s' is not one "
					       "of ours (nfs snapshots take none)",
					       q->parameters[i]->key);
	if (!csi_id_ok(q->source_volume_id))
		return (void)csi_no_volume(call, q->source_volume_id);
	csi_snapshot_id_of(q->name, sid, sizeof(sid));
	snap_rel(sid, rel, sizeof(rel));
	if (csi_open(call, &cx, NULL) < 0 || (rootfd = open_root(call)) < 0)
		return;
	if (fv_ownerdir_owner(rootfd, q->source_volume_id, &own) < 0 ||
	    !streq(own.claim, q->source_volume_id))
		return (void)csi_no_volume(call, q->source_volume_id);
	fd[0] = csi_lock_volume(call, &cx, q->source_volume_id, lock[0], sizeof(lock[0]));
	if (fd[0] < 0)
		return;
	fd[1] = csi_lock_volume(call, &cx, sid, lock[1], sizeof(lock[1]));
	r = fd[1] < 0 ? -ECANCELED : 0;
	/* made before: a retry, if of the same volume for the same name */
	if (r == 0 && fv_ownerdir_owner(rootfd, rel, &own) == 0 && (snap = open_rel(rootfd, rel)) >= 0 &&
	    read_meta(snap, source, sizeof(source), &size, &created) == 0) {
		r = streq(own.claim, sid) && streq(own.pv, q->name) &&
				    streq(source, q->source_volume_id) ? 1 : -EEXIST;
	} else if (r == 0) {
		/* nothing there yet, or a killed call's half copy: made from the start */
		if (snap >= 0)
			close(TAKE_FD(snap));
		r = fv_ownerdir_delete(rootfd, rel, sid, &other);
		if (r == 0)
			r = fv_ownerdir_make(rootfd, rel, 0700, (uid_t)-1, (gid_t)-1, sid, q->name, 0,
					     false, &made, &other, NULL, 0);
		if (r == 0 && ((snap = open_rel(rootfd, rel)) < 0 ||
			       (from = open_rel(rootfd, q->source_volume_id)) < 0))
			r = snap < 0 ? snap : from;
		if (r == 0 && mkdirat(snap, "data.tmp", 0700) < 0)
			r = NEG_ERRNO();
		if (r == 0 && (to = fv_ownerdir_open(snap, "data.tmp", O_RDONLY)) < 0)
			r = to;
		if (r == 0)
			r = fv_copy_tree(from, to, fv_now_ms() + COPY_MS, &size, &skipped);
		snprintf(meta, sizeof(meta), "source %s\nsize %llu\n", q->source_volume_id,
			 (unsigned long long)size);
		if (r == 0 && ((mf = openat(snap, "meta", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
					    O_CLOEXEC, 0600)) < 0 ||
			       write(mf, meta, strlen(meta)) != (ssize_t)strlen(meta) || fsync(mf) < 0 ||
			       renameat(snap, "data.tmp", snap, "data") < 0))
			r = NEG_ERRNO();
		if (r == 0)
			r = read_meta(snap, source, sizeof(source), &size, &created);
	}
	fv_unlock(fd[1]);
	fv_unlock(fd[0]);
	if (r == -ECANCELED)
		return;
	if (r == -EEXIST)
		return (void)grpc_fail(call, GRPC_ALREADY_EXISTS, "snapshot %s exists, of another "
				       "volume or for another name", sid);
	if (r < 0)
		return (void)dir_fail(call, r, "no snapshot", sid, &other);
	if (r == 0)
		fv_log("CreateSnapshot %s: %s copied into %s/%s", q->name, q->source_volume_id,
		       csi_plugin.root, rel);
	csi_reply_snapshot(call, sid, q->source_volume_id, size, created);
}

static void delete_snapshot(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__DeleteSnapshotRequest *q = (const void *)m;
	Csi__V1__DeleteSnapshotResponse resp = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;
	_cleanup_close_ int rootfd = -1;
	char rel[PATH_MAX], lock[PATH_MAX];
	struct fv_owner other;
	struct fv_ctx cx;
	int fd, r;

	if (csi_need(call, *q->snapshot_id, "snapshot_id") < 0)
		return;
	if (!csi_snapshot_id_ok(q->snapshot_id))
		return grpc_reply(call, &resp.base);
	snap_rel(q->snapshot_id, rel, sizeof(rel));
	if (csi_open(call, &cx, NULL) < 0 || (rootfd = open_root(call)) < 0)
		return;
	fd = csi_lock_volume(call, &cx, q->snapshot_id, lock, sizeof(lock));
	if (fd < 0)
		return;
	r = fv_ownerdir_delete(rootfd, rel, q->snapshot_id, &other);
	fv_unlock(fd);
	if (r < 0)
		return (void)dir_fail(call, r, "not deleted", rel, &other);
	grpc_reply(call, &resp.base);
}

static void list_snapshots(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__ListSnapshotsRequest *q = (const void *)m;
	_cleanup_close_ int rootfd = -1, dfd = -1;
	struct csi_snapshot *s = NULL, *t;
	size_t n = 0, cap = 0;
	struct dirent *e;
	DIR *d = NULL;

	if ((rootfd = open_root(call)) < 0)
		return;
	dfd = open_rel(rootfd, SNAPS);
	if (dfd >= 0)
		d = fdopendir(TAKE_FD(dfd));
	while (d && (e = readdir(d))) {
		char rel[PATH_MAX];
		struct fv_owner own;
		int sfd;

		if (!csi_snapshot_id_ok(e->d_name))
			continue;
		snap_rel(e->d_name, rel, sizeof(rel));
		if (fv_ownerdir_owner(rootfd, rel, &own) < 0 || !streq(own.claim, e->d_name) ||
		    (sfd = open_rel(rootfd, rel)) < 0)
			continue;
		if (n == cap && (t = realloc(s, (cap = cap ? 2 * cap : 16) * sizeof(*s))))
			s = t;
		if (n < cap && read_meta(sfd, s[n].source, sizeof(s[n].source), &s[n].size,
					 &s[n].created) == 0)
			snprintf(s[n++].id, sizeof(s->id), "%s", e->d_name);
		close(sfd);
	}
	if (d)
		closedir(d);
	csi_reply_snapshots(call, q, s, n);
	free(s);
}

const struct csi_controller csi_controller_nfs = {
	.driver = "nfs",
	.serves = nfs_serves,
	.id_ok = nfs_id_ok,
	.create = create_volume,
	.remove = delete_volume,
	.exists = nfs_exists,
	.capacity = get_capacity,
	.create_snapshot = create_snapshot,
	.delete_snapshot = delete_snapshot,
	.list_snapshots = list_snapshots,
	.clones = true,
};
