/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loop images in a node's loop root (lib/image.c), made and removed by
 * whoever provisions them on the node: flexvol-provisioner's loop node
 * agent and flexvol-csi's Controller service.  No API server here: the
 * callers decide which image to make or remove, and log what these report.
 *
 * Confinement: only names fv_image_name_ok() accepts, directly
 * in the root, through the root's descriptor; made with O_EXCL|O_NOFOLLOW,
 * opened with fv_open_regular_beneath() (never a FIFO, device or symlink).
 * An image is removed only when its owner record (FV_LOOP_OWNER_XATTR, in the
 * trusted namespace: only CAP_SYS_ADMIN writes it) names the caller's owner,
 * and only while no loop device is bound to it (a mounted image is bound).
 */
#ifndef FV_IMAGE_H
#define FV_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* The longest image name, its NUL included. */
#define FV_IMAGE_NAME_MAX 96

/* Is @name an image name we make ("pvc-" [a-z0-9-]+ ".img": one component, no dot file)? */
bool fv_image_name_ok(const char *name);

/* The loop device bound to the file @st: its number, or -1 (none, or it cannot be told). */
int fv_image_bound_to(const struct stat *st);

/* The owner record of @fd into @buf: 0, -ENODATA (none), or -errno. */
int fv_image_owner(int fd, char *buf, size_t len);

/*
 * Make image @img of @size bytes owned by @owner when missing (allocated
 * when @prealloc, else sparse); an existing one is adopted when it has no
 * owner record, sized when empty (a kill between make and size) and
 * allocated when @prealloc.  Never shrinks, never takes another owner's.
 * 0: made now or there (what was done in @msg, "" when nothing), -EEXIST:
 * another owner's (named in @msg), or -errno (in @msg).  *@ret_size: the
 * image's size afterwards (may be NULL).
 */
int fv_image_ensure(int rootfd, const char *img, const char *owner, uint64_t size, bool prealloc,
		     uint64_t *ret_size, char *msg, size_t len);

/*
 * fv_image_ensure() for a caller whose volumes have names besides their
 * owners (CSI's CreateVolume name, whose ID owns the image): @name is
 * recorded with a new image (FV_LOOP_NAME_XATTR, before it is sized), and
 * an existing image made for another name is -EEXIST, so two names never
 * share an image.  An image without the record is taken only when its
 * owner is @name itself (made for that name by the driver or the agent).
 */
int fv_image_ensure_named(int rootfd, const char *img, const char *owner, const char *name,
			  uint64_t size, bool prealloc, uint64_t *ret_size, char *msg, size_t len);

/*
 * fv_image_max_size() - the largest image, in whole MiB and at most @limit
 * bytes, that the filesystem of the root @rootfd holds: 0 and *@ret, or
 * -errno (-EOPNOTSUPP: it cannot tell, no O_TMPFILE).
 */
int fv_image_max_size(int rootfd, uint64_t limit, uint64_t *ret);

/*
 * Remove image @img when its owner record names @owner and no loop device
 * holds it.  0: removed or absent (-ENOENT is 0), -EBUSY: bound (the device
 * in @msg), -EPERM: not @owner's (why in @msg), -EAGAIN: the name changed
 * files meanwhile, or -errno (in @msg).
 */
int fv_image_remove(int rootfd, const char *img, const char *owner, char *msg, size_t len);

/* Grow image @img (@owner's, not bound) to at least @size bytes: 0, or as fv_image_remove. */
int fv_image_grow(int rootfd, const char *img, const char *owner, uint64_t size, char *msg,
		   size_t len);

/*
 * Snapshots and copies (lib/imagecopy.c).  A snapshot is the file
 * "<id>.snap" in the loop root ("[a-z0-9-]+.snap"), with the records of an
 * image: owner (its ID), name, source (the volume's ID).
 */
bool fv_snapshot_file_ok(const char *file);

struct fv_image_info {
	uint64_t size;
	int64_t created; /* seconds since the epoch: when the copy was made whole */
	char owner[256], name[256], source[256]; /* "" where there is no record */
};

/* The records of the regular file @file in the root: 0, -ENOENT, -EMEDIUMTYPE, -errno. */
int fv_image_info(int rootfd, const char *file, struct fv_image_info *ret);

/*
 * fv_image_copy() - make @dst a point-in-time copy of the image or snapshot
 * @src (both in the root), owned by @owner, named @name, from @source, of
 * at least @min_size bytes (a larger volume restored from a snapshot).
 * The copy is filled unnamed (O_TMPFILE) and linked in whole: a kill leaves
 * nothing.  When @src is bound to a loop device that is mounted, the
 * filesystem is frozen around the copy (fv_freeze(), at most @freeze_ms:
 * past it the copy is refused, not a point in time).  @dst there already as
 * the same copy is 0 (a retry); another's is -EEXIST.  What was done, or
 * why not, in @msg.  *@ret_size: the copy's size.  0 or -errno.
 */
int fv_image_copy(int rootfd, const char *src, const char *dst, const char *owner,
		  const char *name, const char *source, uint64_t min_size, unsigned int freeze_ms,
		  uint64_t *ret_size, char *msg, size_t len);

/* Call @fn on each snapshot file of the root, with its records, until it returns nonzero. */
int fv_snapshot_each(int rootfd, int (*fn)(const char *file, const struct fv_image_info *i,
					   void *arg), void *arg);

/*
 * The loop root's space (lib/imagecopy.c): what its filesystem has free
 * for new blocks, and what its sparse images and snapshots may still claim
 * (their sizes less the blocks they hold: space promised, not yet taken).
 */
struct fv_image_space {
	uint64_t free;	   /* bytes the filesystem has for new blocks (statvfs f_bavail) */
	uint64_t unbacked; /* sum of size - allocated over the images and snapshots */
	unsigned int images;
};

int fv_image_space(int rootfd, struct fv_image_space *ret);

#endif
