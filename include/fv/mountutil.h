/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mount helpers on libmount (mountutil.c).  The mount table is always read
 * from the kernel (/proc/self/mountinfo), never from a cache, and fstab is
 * never consulted.  Targets must be canonical paths (libmount compares
 * strings); fv_canonical_dir() gives one.
 */
#ifndef FV_MOUNTUTIL_H
#define FV_MOUNTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct fv_ctx;

struct fv_mntinfo {
	char source[4096];
	char fstype[64];
	char root[4096];	/* root of the mount within its filesystem ("/" for a whole fs) */
	char vfs_options[1024]; /* per-mount options: "rw,relatime" */
	dev_t devno;		/* st_dev of the mounted filesystem */
	bool readonly;
};

/*
 * fv_mnt_find() - the topmost mount at @target.
 * Returns 0 and fills @ret (may be NULL), 1 when @target is not a mount point, or -errno.
 */
int fv_mnt_find(const char *target, struct fv_mntinfo *ret);

/*
 * fv_mnt_find_source() - the first mount (in mount order) whose source is
 * @source and whose root is "/" - for a block device, the one that mounted
 * the whole filesystem first.  Targets equal to @exclude are skipped.
 * Returns 0 and the target in @ret, 1 if none, or -errno.
 */
int fv_mnt_find_source(const char *source, const char *exclude, char *ret, size_t len);

/*
 * How many mounts are of the filesystem on device number @devno (the
 * mountinfo major:minor field: whole-fs mounts and bind mounts alike,
 * whatever path the source was given as).  Returns the count or -errno.
 */
int fv_mnt_count_devno(dev_t devno);

/* fv_mnt_errno() - a libmount result as -errno: -MNT_ERR_* become the nearest -errno; others pass. */
int fv_mnt_errno(int r);

/*
 * fv_mnt_mount() - mount @source on @target with libmount.  @fstype may be
 * NULL for a bind mount; @options is a comma list (e.g. "ro", "bind,ro").
 * Mount helpers (/sbin/mount.<type>) are disabled unless @helpers; when a
 * helper may run, call this through fv_fork_call() so its output and
 * runtime are under our control.
 * Returns 0 or -errno / -FV_ERR_HELPER, with the message set (libmount's
 * own MNT_ERR_* codes are translated, see fv_mnt_errno()).
 */
int fv_mnt_mount(struct fv_ctx *cx, const char *source, const char *target, const char *fstype,
		 const char *options, bool helpers);

/*
 * fv_mnt_umount_all() - unmount @target until it is no longer a mount point
 * (mounts may be stacked).  Not mounted is success.
 * @lazy: fall back to MNT_DETACH when the target is busy.
 * Returns 0 or -errno with the message set.
 */
int fv_mnt_umount_all(struct fv_ctx *cx, const char *target, bool lazy);

/*
 * fv_prepare_dir() - make sure @path exists as a directory (mkdir -p, 0750)
 * and write its canonical form into @ret.  Returns 0 or -errno (message set).
 */
int fv_prepare_dir(struct fv_ctx *cx, const char *path, char *ret, size_t len);

/*
 * fv_canonical_dir() - realpath() of an existing @path into @ret.
 * Returns 0, 1 when it does not exist, or -errno.
 */
int fv_canonical_dir(const char *path, char *ret, size_t len);

/* Is @path an empty directory (or absent)?  Returns 1 yes, 0 no, -errno. */
int fv_dir_is_empty(const char *path);

#endif
