/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mount helpers on libmount (mountutil.c).  The mount table is always read
 * from the kernel (/proc/self/mountinfo), never from a cache, and fstab is
 * never consulted.  Directory arguments are taken literally (fv_dir_arg():
 * no symlink, no magic link, never created) and mounted and unmounted
 * through descriptors of the verified directories.
 */
#ifndef FV_MOUNTUTIL_H
#define FV_MOUNTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
 * One line of /proc/self/mountinfo, split in place (fv_mnt_parse_line()):
 * the strings point into the line, the kernel's \ooo escapes undone.
 */
struct fv_mntline {
	uint64_t id;
	dev_t devno;
	char *root, *target, *vfs_options, *fstype, *source;
};

/* Split the mountinfo line @line (no newline) in place.  0, or -EINVAL for a malformed line. */
int fv_mnt_parse_line(char *line, struct fv_mntline *ret);

/*
 * fv_mnt_find_source() - the first mount (in mount order) whose source is
 * @source and whose root is "/" - for a block device, the one that mounted
 * the whole filesystem first.  Targets equal to @exclude are skipped.
 * Returns 0 and the target in @ret, 1 if none, or -errno.
 */
int fv_mnt_find_source(const char *source, const char *exclude, char *ret, size_t len);

/* fv_mnt_find_source() skipping every target for which @skip(target, @arg) is true. */
int fv_mnt_find_source_skip(const char *source, bool (*skip)(const char *target, void *arg),
			    void *arg, char *ret, size_t len);

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
 * A directory argument (mount dir, global path), taken literally: its
 * parent directory open (O_PATH) after a walk from "/" that follows no
 * symlink and no magic link (fv_dir_open()), its last component only ever
 * looked up under that descriptor with O_NOFOLLOW.  Nothing is created.
 */
struct fv_dir {
	int parent;	     /* O_PATH fd of the parent, -1 when not open */
	char path[4096];     /* the argument, lexically normalised ("//", "/./") */
	const char *name;    /* its last component, inside @path */
};

#define FV_DIRARG_MUST_EXIST 1u	 /* absent is a Failure (mount, mountdevice), else it returns 1 */
#define FV_DIRARG_PARENT_ONLY 2u /* do not look at the last component (a possibly dead NFS mount) */

/*
 * fv_dir_arg() - open the directory argument @arg into @d (fv_dir_close()
 * it).  Returns 0, 1 when it (or a parent) does not exist and
 * FV_DIRARG_MUST_EXIST is not given, or -errno with the message set:
 * -ELOOP for a symlink or magic link anywhere, -ENOTDIR, -ENOENT, -EINVAL.
 */
int fv_dir_arg(struct fv_ctx *cx, const char *arg, unsigned int flags, struct fv_dir *d);
void fv_dir_close(struct fv_dir *d);

/* fv_dir_arg() for a path we found ourselves: must exist, no message.  0 or -errno. */
int fv_dir_open_quiet(const char *arg, struct fv_dir *d);

static inline void fv_dir_closep(struct fv_dir *d)
{
	fv_dir_close(d);
}

/* Check the last component of an open @d now: 0 a plain directory, 1 absent (see fv_dir_arg()). */
int fv_dir_check(struct fv_ctx *cx, const struct fv_dir *d, unsigned int flags);

/*
 * fv_dir_mounted() - is @d a mount point?  Asks the kernel about the
 * directory itself (statx: mount root, mount id), not a path string.
 * Walks into the directory: not for a possibly dead network mount.
 * Returns 0 and the topmost mount in @ret (may be NULL), 1 when not a
 * mount point (or absent), or -errno.
 */
int fv_dir_mounted(const struct fv_dir *d, struct fv_mntinfo *ret);

/* fv_dir_umount_all() - unmount @d until it is no mount point (stacked mounts); -errno, message set. */
int fv_dir_umount_all(struct fv_ctx *cx, const struct fv_dir *d, bool lazy);

/*
 * umount2(@flags|UMOUNT_NOFOLLOW) of @name under the directory @parent (an
 * fd), or of the literal @path (its parent walked as fv_dir_open() does;
 * the last component is never followed nor stat()ed).  0 or -errno.
 */
int fv_umount_at(int parent, const char *name, int flags);
int fv_umount_literal(const char *path, int flags);

/*
 * fv_dir_mount() - mount @source (a block device, fstype, options as for
 * fv_mnt_mount(), no helpers) on the directory @d itself: the target is
 * /proc/self/fd/N of the verified directory, so nothing swapped into its
 * path after the check is mounted on.  Message set on failure.
 */
int fv_dir_mount(struct fv_ctx *cx, const struct fv_dir *d, const char *source,
		 const char *fstype, const char *options);

/*
 * fv_dir_bind() - bind the directory @src on @dst (read-only when @ro), both
 * by descriptor.  A read-only bind is never writable, not even for one
 * syscall: it is made read-only before it becomes visible on @dst
 * (docs/design.md, "Read-only binds").
 */
int fv_dir_bind(struct fv_ctx *cx, const struct fv_dir *src, const struct fv_dir *dst, bool ro);

/*
 * fv_dir_remount_rw() - remount the filesystem mounted on @d read-write (the
 * superblock and that mount; other binds keep their own flags); message set.
 */
int fv_dir_remount_rw(struct fv_ctx *cx, const struct fv_dir *d);

/* fv_dir_make_ro() - make the topmost mount on @d read-only (that mount only); message set. */
int fv_dir_make_ro(struct fv_ctx *cx, const struct fv_dir *d);

/* Is @d an empty directory (or absent)?  Not followed if a symlink (-ELOOP).  1 yes, 0 no, -errno. */
int fv_dir_is_empty(const struct fv_dir *d);

/* Is the directory @path (sysfs, our own) empty or absent?  1 yes, 0 no, -errno. */
int fv_path_is_empty(const char *path);

#endif
