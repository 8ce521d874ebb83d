/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Directory arguments, taken literally (dirarg.c): no symlink, no magic
 * link, never created; their last component only ever looked up under the
 * verified parent.  Asking whether one is a mount point or empty; mounting
 * on one is fv/mountutil.h's.
 */
#ifndef FV_DIRARG_H
#define FV_DIRARG_H

#include <stdbool.h>

struct fv_ctx;
struct fv_mntinfo;

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
 * fv_dir_open_self() - the directory @d itself, O_PATH, looked up under its
 * parent and checked a plain directory (a symlink is -ELOOP): fd or -errno.
 */
int fv_dir_open_self(const struct fv_dir *d);

/*
 * fv_dir_mounted() - is @d a mount point?  Asks the kernel about the
 * directory itself (statx: mount root, mount id), not a path string.
 * Walks into the directory: not for a possibly dead network mount.
 * Returns 0 and the topmost mount in @ret (may be NULL), 1 when not a
 * mount point (or absent), or -errno.
 */
int fv_dir_mounted(const struct fv_dir *d, struct fv_mntinfo *ret);

/* Is @d an empty directory (or absent)?  Not followed if a symlink (-ELOOP).  1 yes, 0 no, -errno. */
int fv_dir_is_empty(const struct fv_dir *d);

/* Is the directory @path (sysfs, our own) empty or absent?  1 yes, 0 no, -errno. */
int fv_path_is_empty(const char *path);

#endif
