/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block class's raw block volumes (fv_opts.block; docs/design.md, "Raw
 * block volumes"): CSI's access type block for the block drivers.  The
 * volume is attached as a filesystem volume is (the backend's attach,
 * claimed for the volume's name: the same owner record, the same fencing),
 * but nothing is made or mounted on it:
 *
 *   stage      the device's node bound on the file "device" in the stage
 *              directory (<staging>/<volume>, named for the volume as a
 *              filesystem stage's is), read-only for a read-only stage;
 *              the record says "block"
 *   publish    that node bound on the target, a file the runner made
 *   unpublish  the bind unmounted (the runner removes the file)
 *   unstage    the stage's bind unmounted, its file removed, the attach
 *              released
 *
 * The binds are what the kernel shows of a raw block volume: a mount of
 * devtmpfs whose root is the node's name (fv_mnt_node_devno()), counted by
 * fv_mnt_count_devno() as a mount of the device, so that no backend releases
 * a device whose node is bound anywhere and the collector keeps it.  A
 * volume is a filesystem or a raw block device on a node, never both at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "blkvol-internal.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/state.h"
#include "fv/util.h"

/*
 * The mount on the file @name under the directory fd @parent (not followed):
 * 0 and the topmost mount in @mi, 1 not a mount point (or absent), <0.
 * statx() on the file itself, as fv_dir_mounted() asks of a directory.
 */
static int file_mounted(int parent, const char *name, struct fv_mntinfo *mi)
{
	_cleanup_close_ int fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return errno == ENOENT ? 1 : NEG_ERRNO();
	/* -EOPNOTSUPP before Linux 5.8: raw block volumes are not served there */
	return fv_mnt_of_fd(fd, mi);
}

/* Unmount everything stacked on the file @name under @parent (@path in messages). */
static int file_umount_all(struct fv_ctx *cx, int parent, const char *name, const char *path)
{
	for (int i = 0; i < 64; i++) {
		struct fv_mntinfo mi;
		int r = file_mounted(parent, name, &mi);

		if (r == 1)
			return 0;
		if (r < 0)
			return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", path,
				       strerror(-r));
		fv_log("umount: %s", path);
		r = fv_umount_at(parent, name, 0);
		if (r < 0 && r != -EINVAL)
			return fv_fail(cx, r, "unmount of '%s' failed: %s", path, strerror(-r));
	}
	return fv_fail(cx, -EBUSY, "'%s' is still mounted after 64 unmounts", path);
}

/* Skip @target unless it is the stage file ("<dir>/<name>/device") of a volume other than @arg. */
static bool not_others_stage(const char *target, void *arg)
{
	const char *name = arg, *last = fv_path_last(target);
	size_t n = (size_t)(last - target), k = strlen(name);

	if (!streq(last, BLKVOL_NODE_FILE) || n < 2)
		return true; /* a publish: a target of whichever volume staged it */
	return n > k + 1 && target[n - k - 2] == '/' && !strncmp(target + n - k - 1, name, k);
}

/* Skip @target unless it is the stage file of volume @arg ("<dir>/@arg/device"). */
static bool not_own_stage(const char *target, void *arg)
{
	return !streq(fv_path_last(target), BLKVOL_NODE_FILE) || !not_others_stage(target, arg);
}

static bool is_path(const char *target, void *arg)
{
	return streq(target, arg);
}

int fv_blkvol_owns_node(struct fv_ctx *cx, const char *name, dev_t rdev)
{
	json_object *rec = NULL, *d;
	char ident[PATH_MAX], at[PATH_MAX];
	struct stat st;
	int r = fv_state_read(cx, name, &rec);

	if (r == 0) {
		r = json_object_object_get_ex(rec, "device", &d) &&
		    json_object_is_type(d, json_type_string) &&
		    stat(json_object_get_string(d), &st) == 0 && S_ISBLK(st.st_mode) &&
		    st.st_rdev == rdev;
		json_object_put(rec);
		return r;
	}
	if (r < 0)
		return r;
	/* no record (the state dir wiped): a device of ours staged for @name */
	r = fv_mnt_find_node(rdev, not_own_stage, (void *)name, at, sizeof(at));
	if (r != 0)
		return r < 0 ? r : 0;
	r = blkvol_ops(cx)->ident_of ? blkvol_ops(cx)->ident_of(cx, rdev, ident, sizeof(ident)) : 1;
	return r < 0 ? r : r == 0;
}

int fv_blkvol_no_node_binds(struct fv_ctx *cx, const char *dev, const char *name)
{
	char at[PATH_MAX];
	struct stat st;
	int r;

	if (stat(dev, &st) < 0 || !S_ISBLK(st.st_mode))
		return 0; /* the mount's own checks say what is wrong with it */
	r = fv_mnt_find_node(st.st_rdev, NULL, NULL, at, sizeof(at));
	if (r < 0)
		return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
	if (r == 0)
		return fv_fail(cx, -FV_ERR_CONFLICT, "%s is in use as a raw block device ('%s'); "
			       "refusing to mount it as a filesystem for '%s' (a volume is one or "
			       "the other on a node)", dev, at, name);
	return 0;
}

/*
 * The device @dev attached for @name may be staged as a raw block device
 * here: no filesystem of it mounted anywhere (this volume as a filesystem,
 * or another volume), no other volume's stage of its node.
 */
static int block_use_ok(struct fv_ctx *cx, const char *name, const char *dev, dev_t rdev)
{
	char at[PATH_MAX];
	int r = fv_mnt_find_source(dev, NULL, at, sizeof(at));

	if (r == 0)
		return fv_fail(cx, -FV_ERR_CONFLICT, "%s is mounted as a filesystem at '%s'; "
			       "refusing it as a raw block device for '%s' (a volume is one or the "
			       "other on a node)", dev, at, name);
	if (r == 1)
		r = fv_mnt_find_node(rdev, not_others_stage, (void *)name, at, sizeof(at));
	if (r == 0)
		return fv_fail(cx, -FV_ERR_CONFLICT, "%s is staged for another volume at '%s'; "
			       "refusing it for '%s'", dev, at, name);
	return r < 0 ? fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r)) : 0;
}

/*
 * The node of @dev (device @rdev) bound on the file BLKVOL_NODE_FILE in the
 * stage directory @dfd (@gmp), read-only when @ro; made first when missing.
 * Bound already from @rdev in the mode asked is success; in the other mode
 * -EEXIST; anything else there -FV_ERR_CONFLICT.
 */
static int bind_stage(struct fv_ctx *cx, int dfd, const char *gmp, const char *dev, dev_t rdev,
		      bool ro)
{
	_cleanup_close_ int nfd = -1;
	char path[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	dev_t have;
	int fd, r;

	snprintf(path, sizeof(path), "%s/" BLKVOL_NODE_FILE, gmp);
	r = file_mounted(dfd, BLKVOL_NODE_FILE, &mi);
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", path, strerror(-r));
	if (r == 0) {
		if (fv_mnt_node_devno(&mi, &have) != 0 || have != rdev)
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s' (%s)",
				       path, mi.source, mi.root);
		if (mi.readonly != ro)
			return fv_fail(cx, -EEXIST, "the volume is staged %s already; this stage "
				       "asks for %s", mi.readonly ? "read-only" : "read-write",
				       ro ? "read-only" : "read-write");
		return 0;
	}
	/* the empty file of a stage killed before its bind, or a new one: nothing else is used */
	if (fstatat(dfd, BLKVOL_NODE_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISREG(st.st_mode) || st.st_size != 0)
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is %s%s, not a raw block stage's: "
				       "left alone", path, fv_file_type(st.st_mode),
				       S_ISREG(st.st_mode) ? " with data" : "");
	} else {
		fd = openat(dfd, BLKVOL_NODE_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
			    O_CLOEXEC, 0600);
		if (fd < 0)
			return fv_fail(cx, NEG_ERRNO(), "cannot create '%s': %m", path);
		close(fd);
	}
	/* the node itself, checked: never anything swapped in at its path */
	nfd = open(dev, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (nfd < 0 || fstat(nfd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != rdev)
		return fv_fail(cx, -ENXIO, "%s is not the volume's device any more", dev);
	return fv_node_bind(cx, nfd, dev, dfd, BLKVOL_NODE_FILE, path, ro);
}

int fv_blkvol_stage_block(struct fv_ctx *cx, const void *v, const struct fv_opts *o,
			  const char *name, const struct fv_dir *gd)
{
	_cleanup_close_ int dfd = -1;
	char dev[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	unsigned int age;
	bool fresh = false;
	int lock = -1, r = fv_dir_mounted(gd, &mi);

	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", gd->path,
			       strerror(-r));
	if (r == 0)
		return fv_fail(cx, -EEXIST, "'%s' holds volume '%s' staged as a filesystem (%s); this "
			       "stage asks for a raw block device", gd->path, name, mi.fstype);
	dfd = fv_dir_open_self(gd);
	if (dfd < 0)
		return fv_dir_fail(cx, dfd, gd->path);
	/*
	 * A first stage records the volume before its attach: a raw block
	 * attach is not released by the kernel with a last mount (nothing is
	 * mounted on it), so a kill after the attach must leave what the
	 * collector and unstage find.  A record there already (this volume's,
	 * maybe as a filesystem) stays until the checks below passed.
	 */
	if (fv_state_age(cx, name, &age) == 1) {
		r = fv_blkvol_save_record(cx, name, v, "", o);
		if (r < 0)
			return r;
		fresh = true;
	}
	r = blkvol_ops(cx)->attach(cx, v, name, NULL, dev, sizeof(dev), &lock);
	if (r < 0) {
		if (fresh) /* nothing attached: nothing to record */
			(void)fv_state_remove(cx, name);
		return r;
	}
	if (stat(dev, &st) < 0 || !S_ISBLK(st.st_mode))
		r = fv_fail(cx, -ENXIO, "%s is not a block device", dev);
	if (r == 0)
		r = block_use_ok(cx, name, dev, st.st_rdev);
	if (r == 0)
		r = fv_blkvol_save_record(cx, name, v, dev, o);
	if (r == 0)
		r = bind_stage(cx, dfd, gd->path, dev, st.st_rdev, o->readonly);
	if (lock >= 0)
		fv_unlock(lock);
	if (r == 0) {
		fv_log("staged %s as a raw block device for '%s'%s", dev, name,
		       o->readonly ? " (read-only)" : "");
	} else if (fresh) {
		/*
		 * Refused after this call attached: what it attached goes again (a
		 * raw block attach has no last mount to release it), unless it is in
		 * use (the release refuses that).  The refusal is the answer.
		 */
		struct fv_saved_message saved;

		fv_ctx_save_message(cx, &saved);
		if (fv_blkvol_release_volume(cx, name, 0) < 0)
			fv_log("after the refused stage of '%s': %s", name, fv_ctx_message(cx));
		fv_ctx_restore_message(cx, &saved, true);
	}
	return r;
}

int fv_blkvol_unstage_block(struct fv_ctx *cx, const char *name, const struct fv_dir *gd)
{
	_cleanup_close_ int dfd = -1;
	char path[PATH_MAX], other[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	dev_t rdev = 0;
	int n, r;

	dfd = fv_dir_open_self(gd);
	if (dfd < 0)
		return dfd == -ENOENT ? 1 : fv_dir_fail(cx, dfd, gd->path);
	if (fstatat(dfd, BLKVOL_NODE_FILE, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 1 : fv_fail(cx, NEG_ERRNO(), "cannot look at '%s': %m",
						     gd->path);
	snprintf(path, sizeof(path), "%s/" BLKVOL_NODE_FILE, gd->path);
	r = file_mounted(dfd, BLKVOL_NODE_FILE, &mi);
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", path, strerror(-r));
	if (r == 0) {
		/* only ours, as the runner asks of a directory's mount (op.c, only_ours()) */
		r = fv_mnt_node_devno(&mi, &rdev) == 0 ? fv_blkvol_owns_node(cx, name, rdev) : 0;
		if (r < 0)
			return r;
		if (r == 0) {
			fv_log("unmountdevice of volume '%s': '%s' holds %s, left alone", name,
			       path, mi.source);
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds %s (%s%s), not a stage of "
				       "volume '%s': left alone", path, mi.source, mi.fstype,
				       mi.root, name);
		}
		n = fv_mnt_count_devno(rdev);
		if (n < 0)
			return fv_fail(cx, n, "cannot read the mount table: %s", strerror(-n));
		if (n > 1) {
			if (fv_mnt_find_node(rdev, is_path, path, other, sizeof(other)) != 0)
				snprintf(other, sizeof(other), "another place");
			return fv_fail(cx, -EBUSY, "the device of volume '%s' is still in use at '%s' "
				       "(%d mounts in all): not unstaging it", name, other, n);
		}
		r = file_umount_all(cx, dfd, BLKVOL_NODE_FILE, path);
		if (r < 0)
			return r;
		if (fstatat(dfd, BLKVOL_NODE_FILE, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return fv_fail(cx, NEG_ERRNO(), "cannot look at '%s': %m", path);
	}
	/* only the empty file the stage made goes */
	if (!S_ISREG(st.st_mode) || st.st_size != 0)
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is %s%s, not a raw block stage's: left "
			       "alone", path, fv_file_type(st.st_mode),
			       S_ISREG(st.st_mode) ? " with data" : "");
	if (unlinkat(dfd, BLKVOL_NODE_FILE, 0) < 0 && errno != ENOENT)
		return fv_fail(cx, NEG_ERRNO(), "cannot remove '%s': %m", path);
	return fv_blkvol_release_volume(cx, name, rdev);
}

/* The device of the raw block stage in @staged: 0 (*@rdev), 1 none there, <0. */
static int staged_node(const char *staged, dev_t *rdev)
{
	_cleanup_(fv_dir_closep) struct fv_dir sd = { .parent = -1 };
	_cleanup_close_ int dfd = -1;
	struct fv_mntinfo mi;
	int r = fv_dir_open_quiet(staged, &sd);

	if (r < 0)
		return r == -ENOENT ? 1 : r;
	r = fv_dir_mounted(&sd, &mi);
	if (r != 1)
		return r < 0 ? r : 1; /* a filesystem staged there: nothing in it is looked at */
	dfd = fv_dir_open_self(&sd);
	if (dfd < 0)
		return dfd == -ENOENT ? 1 : dfd;
	r = file_mounted(dfd, BLKVOL_NODE_FILE, &mi);
	if (r != 0)
		return r == -EOPNOTSUPP ? 1 : r;
	return fv_mnt_node_devno(&mi, rdev);
}

int fv_blkvol_staged_as_block(struct fv_ctx *cx, const char *staged, const char *what, int err)
{
	dev_t rdev;

	if (staged_node(staged, &rdev) != 0)
		return 0;
	return fv_fail(cx, err, "volume '%s' is staged on this node as a raw block device "
		       "('%s'); this %s asks for a filesystem (a volume is one or the other on a "
		       "node)", fv_path_last(staged), staged, what);
}

/*
 * The node bound on the target @name under @parent (@dir): the device @rdev
 * in the mode asked is success (1: nothing to do), in the other mode -EEXIST;
 * another mount there -FV_ERR_CONFLICT; a directory -EEXIST (a filesystem's
 * target); a plain file: 0, to be bound.
 */
static int target_state(struct fv_ctx *cx, int parent, const char *name, const char *dir,
			dev_t rdev, bool ro)
{
	struct fv_mntinfo mi;
	struct stat st;
	dev_t have;
	int r = file_mounted(parent, name, &mi);

	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", dir, strerror(-r));
	if (r == 0) {
		if (fv_mnt_node_devno(&mi, &have) != 0 || have != rdev)
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s' (%s)",
				       dir, mi.source, mi.fstype);
		if (mi.readonly != ro)
			return fv_fail(cx, -EEXIST, "'%s' is published %s already; this publish asks "
				       "for %s", dir, mi.readonly ? "read-only" : "read-write",
				       ro ? "read-only" : "read-write");
		return 1;
	}
	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot look at '%s': %m", dir);
	if (!S_ISREG(st.st_mode))
		return fv_fail(cx, -EEXIST, "'%s' is %s: a raw block volume is published on a file, "
			       "which the plugin makes", dir, fv_file_type(st.st_mode));
	return 0;
}

int fv_blkvol_publish_block(struct fv_ctx *cx, const char *dir, const char *staged,
			    const struct fv_opts *o)
{
	_cleanup_(fv_dir_closep) struct fv_dir td = { .parent = -1 }, sd = { .parent = -1 };
	_cleanup_close_ int sdfd = -1, nfd = -1;
	const char *name = fv_path_last(staged);
	char dev[PATH_MAX], src[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	dev_t rdev;
	int r = staged_node(staged, &rdev);

	if (r < 0)
		return fv_fail(cx, r, "cannot look at '%s': %s", staged, strerror(-r));
	if (r == 1) {
		if (fv_dir_open_quiet(staged, &sd) == 0 && fv_dir_mounted(&sd, &mi) == 0)
			return fv_fail(cx, -FV_ERR_CONFLICT, "volume '%s' is staged on this node as "
				       "a filesystem ('%s'); this publish asks for a raw block device "
				       "(a volume is one or the other on a node)", name, staged);
		return fv_fail(cx, -ENXIO, "the volume is not staged on this node ('%s'; "
			       "stage it first)", staged);
	}
	/* options that name a device must name this one (as a filesystem publish checks) */
	for (size_t i = 0; i < o->n; i++) {
		_cleanup_(fv_blkvol_vol_freep) void *v = NULL;

		if (!strncmp(o->pairs[i].key, "kubernetes.io/", 14))
			continue;
		r = fv_blkvol_parse(cx, o, &v);
		if (r == 0)
			r = blkvol_ops(cx)->find(cx, v, dev, sizeof(dev));
		if (r < 0)
			return r;
		if (r == 1 || stat(dev, &st) < 0 || st.st_rdev != rdev)
			return fv_fail(cx, -FV_ERR_CONFLICT, "volume '%s' is staged on this node from "
				       "a device these options do not name", name);
		break;
	}
	r = fv_dir_arg(cx, dir, FV_DIRARG_PARENT_ONLY | FV_DIRARG_MUST_EXIST, &td);
	if (r < 0)
		return r;
	r = target_state(cx, td.parent, td.name, td.path, rdev, o->readonly);
	if (r != 0)
		return r < 0 ? r : 0;
	/* the stage's bind itself: its root is the node */
	if (fv_dir_open_quiet(staged, &sd) < 0 || (sdfd = fv_dir_open_self(&sd)) < 0)
		return fv_fail(cx, -ENXIO, "the volume is not staged on this node ('%s')", staged);
	nfd = openat(sdfd, BLKVOL_NODE_FILE, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (nfd < 0 || fstat(nfd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != rdev)
		return fv_fail(cx, -ENXIO, "the volume's stage changed under this publish ('%s')",
			       staged);
	snprintf(src, sizeof(src), "%s/" BLKVOL_NODE_FILE, sd.path);
	return fv_node_bind(cx, nfd, src, td.parent, td.name, td.path, o->readonly);
}

int fv_blkvol_unpublish_block(struct fv_ctx *cx, const char *dir)
{
	_cleanup_(fv_dir_closep) struct fv_dir td = { .parent = -1 };
	struct stat st;
	int r = fv_dir_arg(cx, dir, FV_DIRARG_PARENT_ONLY, &td);

	if (r != 0)
		return r < 0 ? r : 0; /* a parent is gone: nothing mounted there */
	/* the runner found nothing mounted there, or a mount of the volume: a local look */
	if (fstatat(td.parent, td.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : fv_fail(cx, NEG_ERRNO(), "cannot look at '%s': %m", dir);
	if (S_ISDIR(st.st_mode))
		return 1;
	r = file_umount_all(cx, td.parent, td.name, td.path);
	if (r < 0)
		return r;
	if (fstatat(td.parent, td.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is %s, not a raw block volume's target",
			       dir, fv_file_type(st.st_mode));
	return 0;
}
