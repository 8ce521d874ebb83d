/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mount actions (fv/mountutil.h): mount, bind, remount, unmount, on
 * libmount or the new mount API, through descriptors of directories
 * checked by dirarg.c; what is mounted is asked of the table (mounttab.c).
 */
#include <dirent.h>
#include <libmount.h>
#include <stdio.h>
#include <sys/mount.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <stdint.h>

#include "internal.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/util.h"

static inline void mnt_free_contextp(struct libmnt_context **c)
{
	mnt_free_context(*c);
}

_Static_assert(FV_ERR_BASE > 5999, "FV_ERR_* must not overlap libmount's MNT_ERR_* (5000..5999)");

/*
 * libmount returns its own codes (-MNT_ERR_*, 5000 and up) besides -errno:
 * translate them to the nearest errno, so that no caller mistakes one for
 * an FV_ERR_* or an errno.  The message (mnt_context_get_excode) says more.
 */
int fv_mnt_errno(int r)
{
	if (r >= 0 || r > -5000)
		return r;
	switch (-r) {
	case MNT_ERR_NOFSTAB:
	case MNT_ERR_NOSOURCE:
		return -ENOENT;
	case MNT_ERR_NOFSTYPE:
		return -ENODEV; /* no filesystem type given or found */
	case MNT_ERR_MOUNTOPT:
	case MNT_ERR_AMBIFS:
		return -EINVAL;
	case MNT_ERR_LOCK:
		return -EAGAIN;
	default:
		return -EIO; /* loop device, flags, namespaces, ...: an I/O-side failure */
	}
}

/* fv_mnt_mount() on @target, named @shown in the log and messages. */
static int mnt_mount_as(struct fv_ctx *cx, const char *source, const char *target, const char *shown,
			const char *fstype, const char *options, bool helpers)
{
	_cleanup_(mnt_free_contextp) struct libmnt_context *m = mnt_new_context();
	char buf[1024] = "";
	int r, ex;

	if (!m)
		return -ENOMEM;
	mnt_context_set_optsmode(m, MNT_OMODE_IGNORE); /* never consult fstab */
	mnt_context_disable_mtab(m, 1);		       /* never write utab */
	/* targets are literal (checked by the caller), never resolved again (realpath) */
	mnt_context_disable_canonicalize(m, 1);
	mnt_context_disable_helpers(m, !helpers);
	if (mnt_context_set_source(m, source) || mnt_context_set_target(m, target) ||
	    (fstype && mnt_context_set_fstype(m, fstype)) ||
	    (options && mnt_context_set_options(m, options)))
		return -ENOMEM;
	target = shown;
	fv_log("mount: %s on %s type %s (%s)", source, target, fstype ? fstype : "-",
	       options ? options : "");
	r = mnt_context_mount(m);
	ex = mnt_context_get_excode(m, r, buf, sizeof(buf));
	if (ex == MNT_EX_SUCCESS)
		return 0;
	if (mnt_context_helper_executed(m))
		return fv_fail(cx, -FV_ERR_HELPER, "mount of '%s' on '%s' failed (helper status %d)",
			       source, target, mnt_context_get_helper_status(m));
	return fv_fail(cx, r > 0 ? -r : (r < 0 ? fv_mnt_errno(r) : -EIO), "mount of '%s' on '%s' failed: %s",
		       source, target, buf[0] ? buf : strerror(r > 0 ? r : EIO));
}

int fv_mnt_mount(struct fv_ctx *cx, const char *source, const char *target, const char *fstype,
		 const char *options, bool helpers)
{
	return mnt_mount_as(cx, source, target, target, fstype, options, helpers);
}

int fv_umount_at(int parent, const char *name, int flags)
{
	char p[PATH_MAX + 32];

	/* the parent is pinned by its fd; the last component is not followed */
	if ((size_t)snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", parent, name) >= sizeof(p))
		return -ENAMETOOLONG;
	return umount2(p, flags | UMOUNT_NOFOLLOW) == 0 ? 0 : NEG_ERRNO();
}

int fv_umount_literal(const char *path, int flags)
{
	char norm[PATH_MAX];
	int parent = fv_dir_open(path, FV_DIR_PARENT, norm, sizeof(norm)), r;

	if (parent < 0)
		return parent;
	r = fv_umount_at(parent, fv_path_last(norm), flags);
	close(parent);
	return r;
}

int fv_dir_umount_all(struct fv_ctx *cx, const struct fv_dir *d, bool lazy)
{
	for (int i = 0; i < 64; i++) {
		int r = fv_dir_mounted(d, NULL);

		if (r == 1)
			return 0;
		if (r < 0)
			return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", d->path,
				       strerror(-r));
		fv_log("umount: %s", d->path);
		r = fv_umount_at(d->parent, d->name, 0);
		if (r == 0 || r == -EINVAL)
			continue;
		if (r == -EBUSY && lazy && fv_umount_at(d->parent, d->name, MNT_DETACH) == 0) {
			fv_log("umount: %s was busy, detached lazily", d->path);
			continue;
		}
		return fv_fail(cx, r, "unmount of '%s' failed: %s", d->path, strerror(-r));
	}
	return fv_fail(cx, -EBUSY, "'%s' is still mounted after 64 unmounts", d->path);
}

int fv_dir_mount(struct fv_ctx *cx, const struct fv_dir *d, const char *source,
		 const char *fstype, const char *options)
{
	char target[32];
	int fd = fv_dir_open_self(d), r;

	if (fd < 0)
		return fv_dir_fail(cx, fd, d->path);
	/*
	 * The verified directory itself, whatever happens to its path
	 * meanwhile.  What remains: a mount that someone else puts on this
	 * directory between the caller's fv_dir_mounted() and here is mounted
	 * over (our own calls on one directory are serialised by the locks).
	 */
	snprintf(target, sizeof(target), "/proc/self/fd/%d", fd);
	r = mnt_mount_as(cx, source, target, d->path, fstype, options, false);
	close(fd);
	return r;
}

/*
 * The new mount API (Linux 5.2: open_tree, move_mount; 5.12: mount_setattr),
 * called through syscall(): glibc 2.36 wraps them but musl 1.2.3 (the static
 * build) does not, and their numbers are the same on every architecture but
 * alpha (which we do not build for).
 */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define FV_OPEN_TREE_CLONE 1
#define FV_MOVE_MOUNT_F_EMPTY_PATH 0x04
#define FV_MOVE_MOUNT_T_EMPTY_PATH 0x40
#define FV_MOUNT_ATTR_RDONLY 0x1

struct fv_mount_attr { /* struct mount_attr, MOUNT_ATTR_SIZE_VER0 */
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static int set_ro_at(int dfd, const char *path, unsigned int flags)
{
	struct fv_mount_attr a = { .attr_set = FV_MOUNT_ATTR_RDONLY };

	return syscall(SYS_mount_setattr, dfd, path, flags, &a, sizeof(a)) == 0 ? 0 : NEG_ERRNO();
}

/* No new mount API here: a kernel before 5.12, or a seccomp filter that does not know it. */
static bool no_new_api(int r)
{
	return r == -ENOSYS || r == -EPERM;
}

/*
 * The bind of @sfd (a directory on the mount to bind) onto the directory
 * @dfd in one visible step: a detached clone of the mount, made read-only
 * while nobody can see it, then attached.  A SIGKILL before move_mount()
 * leaves nothing (the detached clone goes with the last descriptor); after
 * it, the bind is already what was asked.  -ENOSYS/-EPERM: no new API.
 */
static int bind_atomic(int sfd, int dfd, bool ro)
{
	_cleanup_close_ int tfd = (int)syscall(SYS_open_tree, sfd, "",
					       FV_OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH);
	int r;

	if (tfd < 0)
		return NEG_ERRNO();
	if (ro) {
		r = set_ro_at(tfd, "", AT_EMPTY_PATH);
		if (r < 0)
			return r;
	}
	if (syscall(SYS_move_mount, tfd, "", dfd, "",
		    FV_MOVE_MOUNT_F_EMPTY_PATH | FV_MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return NEG_ERRNO();
	return 0;
}

/* MS_* flags a bind must keep when it is remounted read-only (MS_REMOUNT|MS_BIND sets them all). */
static unsigned long kept_flags(int fd)
{
	static const struct {
		unsigned long st, ms;
	} map[] = {
		{ ST_NOSUID, MS_NOSUID },	{ ST_NODEV, MS_NODEV },
		{ ST_NOEXEC, MS_NOEXEC },	{ ST_NOATIME, MS_NOATIME },
		{ ST_NODIRATIME, MS_NODIRATIME }, { ST_RELATIME, MS_RELATIME },
	};
	struct statvfs sv;
	unsigned long f = 0;

	if (fstatvfs(fd, &sv) < 0)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (sv.f_flag & map[i].st)
			f |= map[i].ms;
	return f;
}

/* The old API's read-only step on the mount whose root @fd is open on. */
static int remount_ro_fd(int fd)
{
	char p[32];

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	return mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(fd), NULL) == 0
		       ? 0
		       : NEG_ERRNO();
}

int fv_dir_make_ro(struct fv_ctx *cx, const struct fv_dir *d)
{
	_cleanup_close_ int fd = -1;
	int r = set_ro_at(d->parent, d->name, AT_SYMLINK_NOFOLLOW);

	if (no_new_api(r)) {
		fd = fv_dir_open_self(d);
		r = fd < 0 ? fd : remount_ro_fd(fd);
	}
	if (r < 0)
		return fv_fail(cx, r, "read-only remount of '%s' failed: %s", d->path, strerror(-r));
	fv_log("made the mount on %s read-only", d->path);
	return 0;
}

int fv_dir_remount_rw(struct fv_ctx *cx, const struct fv_dir *d)
{
	_cleanup_close_ int fd = fv_dir_open_self(d);
	char p[32];

	if (fd < 0)
		return fv_dir_fail(cx, fd, d->path);
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	fv_log("remount: %s read-write", d->path);
	/* the filesystem itself, not a bind's flag: a read-only superblock fails every write */
	if (mount(NULL, p, NULL, MS_REMOUNT | (kept_flags(fd) & ~(unsigned long)MS_RDONLY), NULL) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot make '%s' read-write: %m", d->path);
	return 0;
}

/* Unmount whatever is stacked on @path (ours, under the run dir), lazily: a leftover of a killed call. */
static void umount_leftovers(const char *path)
{
	/* the run dir is configuration and may come through a symlink (/var/run): not "literal" */
	for (int i = 0; i < 16 && umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0; i++)
		fv_log("umount: %s (left by a killed call)", path);
}

/*
 * Is @path (ours: the run dir may come through a symlink such as /var/run)
 * the root of a mount?  statx() knows since Linux 5.8; before, mountinfo.
 */
static bool is_mount_root(const char *path)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, 0, &stx) == 0 &&
	    (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
		return stx.stx_attributes & STATX_ATTR_MOUNT_ROOT;
	return fv_mnt_find(path, NULL) == 0;
}

/*
 * The fallback of bind_atomic() for kernels without the new mount API: the
 * bind is made and made read-only in a private staging directory under the
 * run dir, which no pod sees, and only then moved (MS_MOVE, one step) onto
 * the pod dir.  The staging root is a private bind of itself, so that the
 * move is allowed (a mount under a shared parent cannot be moved) and the
 * staged mount propagates nowhere.  A SIGKILL leaves at most a staged
 * mount, which the retry for the same pod dir (serialised by its lock,
 * hence the key) unmounts first.
 */
static int bind_staged(struct fv_ctx *cx, int sfd, int dfd, const char *dst)
{
	char root[PATH_MAX], stage[PATH_MAX], s[32], t[32];
	_cleanup_close_ int stfd = -1;
	int r;

	if (snprintf(root, sizeof(root), "%s/%s/staging", cx->cfg.run_dir, cx->drv->name) >=
		    (int)sizeof(root) ||
	    snprintf(stage, sizeof(stage), "%s/%016llx", root,
		     (unsigned long long)fv_hash64(dst)) >= (int)sizeof(stage))
		return -ENAMETOOLONG;
	r = fv_mkdir_p(stage, 0700);
	if (r < 0)
		return r;
	umount_leftovers(stage);
	/* the staging root: a mount point of its own, private (again, after a killed call) */
	if (!is_mount_root(root) && mount(root, root, NULL, MS_BIND, NULL) < 0)
		return NEG_ERRNO();
	if (mount(NULL, root, NULL, MS_PRIVATE, NULL) < 0)
		return NEG_ERRNO();
	snprintf(s, sizeof(s), "/proc/self/fd/%d", sfd);
	if (mount(s, stage, NULL, MS_BIND, NULL) < 0)
		return NEG_ERRNO();
	stfd = open(stage, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = stfd < 0 ? NEG_ERRNO() : remount_ro_fd(stfd);
	if (r == 0) {
		snprintf(t, sizeof(t), "/proc/self/fd/%d", dfd);
		r = mount(stage, t, NULL, MS_MOVE, NULL) == 0 ? 0 : NEG_ERRNO();
	}
	if (r < 0)
		umount_leftovers(stage);
	(void)rmdir(stage);
	return r;
}

/*
 * A read-only bind is never writable, not even between two syscalls:
 * with the new mount API it is made read-only before it is attached
 * (bind_atomic); without it, in a private staging directory before it is
 * moved into place (bind_staged).  A read-write bind is one mount(2).
 * Plain mount(2) rather than libmount: libmount would do the read-only step
 * of "bind,ro" on the target path again, after the bind is visible.
 */
int fv_dir_bind(struct fv_ctx *cx, const struct fv_dir *src, const struct fv_dir *dst, bool ro)
{
	_cleanup_close_ int sfd = fv_dir_open_self(src), dfd = fv_dir_open_self(dst);
	char s[32], t[32];
	int r;

	if (sfd < 0)
		return fv_dir_fail(cx, sfd, src->path);
	if (dfd < 0)
		return fv_dir_fail(cx, dfd, dst->path);
	fv_log("mount: %s on %s (bind%s)", src->path, dst->path, ro ? ",ro" : "");
	if (!ro) {
		snprintf(s, sizeof(s), "/proc/self/fd/%d", sfd);
		snprintf(t, sizeof(t), "/proc/self/fd/%d", dfd);
		r = mount(s, t, NULL, MS_BIND, NULL) == 0 ? 0 : NEG_ERRNO();
	} else {
		r = bind_atomic(sfd, dfd, true);
		if (no_new_api(r)) {
			fv_log("no open_tree/mount_setattr (%s): staging the read-only bind",
			       strerror(-r));
			r = bind_staged(cx, sfd, dfd, dst->path);
		}
	}
	if (r < 0)
		return fv_fail(cx, r, "%sbind mount of '%s' on '%s' failed: %s",
			       ro ? "read-only " : "", src->path, dst->path, strerror(-r));
	return 0;
}

int fv_node_bind(struct fv_ctx *cx, int sfd, const char *src, int parent, const char *name,
		 const char *dst, bool ro)
{
	_cleanup_close_ int dfd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC), bfd = -1;
	char s[32], t[32];
	struct stat st;
	int r = -ENOSYS;

	if (dfd < 0 || fstat(dfd, &st) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot open '%s': %m", dst);
	if (!S_ISREG(st.st_mode))
		return fv_fail(cx, -EEXIST, "'%s' is %s, not the file a raw block volume is "
			       "bound on", dst, fv_file_type(st.st_mode));
	fv_log("mount: %s on %s (bind%s)", src, dst, ro ? ",ro" : "");
	if (ro)
		r = bind_atomic(sfd, dfd, true);
	if (!ro || no_new_api(r)) {
		/* two steps: the flag guards no device's I/O, so no window to close here */
		snprintf(s, sizeof(s), "/proc/self/fd/%d", sfd);
		snprintf(t, sizeof(t), "/proc/self/fd/%d", dfd);
		r = mount(s, t, NULL, MS_BIND, NULL) == 0 ? 0 : NEG_ERRNO();
		if (r == 0 && ro) {
			bfd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
			r = bfd < 0 ? NEG_ERRNO() : remount_ro_fd(bfd);
		}
	}
	if (r < 0)
		return fv_fail(cx, r, "bind mount of '%s' on '%s' failed: %s", src, dst,
			       strerror(-r));
	return 0;
}
