/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mount actions (mountutil.c): mount, bind, remount, unmount, on libmount
 * and the new mount API.  Directory arguments are taken literally
 * (fv/dirarg.h) and mounted and unmounted through descriptors of the
 * verified directories; what is mounted is asked of the kernel's table
 * (fv/mounttab.h).  Split the way systemd keeps mount queries apart from
 * mount actions; this header includes both others for the callers of all
 * three.
 */
#ifndef FV_MOUNTUTIL_H
#define FV_MOUNTUTIL_H

#include <stdbool.h>

#include "fv/dirarg.h"
#include "fv/mounttab.h"

struct fv_ctx;

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
 * fv_node_bind() - bind the node @sfd (an O_PATH descriptor of a block
 * device's node, @src in messages) onto the file @name under the directory
 * @parent (a regular file, else -EEXIST; @dst in messages), read-only when
 * @ro.  A read-only bind records the mode asked; it does not make the device
 * read-only (the kernel checks a mount's flag for a filesystem's files, not
 * for a device node's I/O: docs/design.md, "Raw block volumes").
 */
int fv_node_bind(struct fv_ctx *cx, int sfd, const char *src, int parent, const char *name,
		 const char *dst, bool ro);

/*
 * fv_dir_remount_rw() - remount the filesystem mounted on @d read-write (the
 * superblock and that mount; other binds keep their own flags); message set.
 */
int fv_dir_remount_rw(struct fv_ctx *cx, const struct fv_dir *d);

/* fv_dir_make_ro() - make the topmost mount on @d read-only (that mount only); message set. */
int fv_dir_make_ro(struct fv_ctx *cx, const struct fv_dir *d);

#endif
