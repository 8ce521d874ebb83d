/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to the block-volume class (fv/blkvol.h): what its three files
 * share.  blkvol.c holds the class and controller mode, blkvol-node.c node
 * mode, blkvol-gc.c the collector.  Every function here sets the reply
 * message on failure (fv_fail()).
 */
#ifndef FV_BLKVOL_INTERNAL_H
#define FV_BLKVOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "internal.h"
#include "fv/blkvol.h"

struct fv_dir;
struct fv_mntinfo;

/* The backend steps of the driver being run. */
static inline const struct fv_blkvol_ops *blkvol_ops(const struct fv_ctx *cx)
{
	return cx->drv->blk;
}

/*
 * fv_blkvol_node_mode() - does this node run block drivers in node mode
 * (config attach_mode = node)?  Then init answers attach:false and kubelet
 * calls only mount and unmount, which do the whole node-side work.
 */
bool fv_blkvol_node_mode(const struct fv_ctx *cx);

/*
 * fv_blkvol_parse() - the options -> the backend's volume (malloc'ed, into
 * *@ret; free it with fv_blkvol_vol_freep(), which wipes it: it may hold
 * secrets).  The same validation for every op that carries options.
 */
int fv_blkvol_parse(struct fv_ctx *cx, const struct fv_opts *o, void **ret);
void fv_blkvol_vol_freep(void **p);

/* Take the lock of volume @name (fv_lock_volume_name()).  Returns the fd or <0. */
int fv_blkvol_lock_volume(struct fv_ctx *cx, const char *name);

/* The state key of the record waitforattach keeps under the options' volume name @hint. */
void fv_blkvol_hinted_key(const char *hint, char *buf, size_t len);

/* Release the node-side attach recorded under @key for volume @name; the record goes on success. */
int fv_blkvol_release_record(struct fv_ctx *cx, const char *name, const char *key, dev_t devno);

/*
 * Undo the node-side attach of the volume @name (a trusted name), whose
 * device mount was on @devno (0: unknown), then forget its records.
 */
int fv_blkvol_release_volume(struct fv_ctx *cx, const char *name, dev_t devno);

/*
 * The device mount @gd of volume @name goes, and the node-side attach with
 * it.  Call with the volume lock held.  1: left for other mounts (@busy_ok).
 * @ours: a mount that is not the volume's (fv_blkvol_owns()) is left alone,
 * -FV_ERR_CONFLICT.  @known: @gd's topmost mount, read already (NULL: read here).
 */
int fv_blkvol_unmount_and_release(struct fv_ctx *cx, const char *name, const struct fv_dir *gd,
				  const struct fv_mntinfo *known, bool busy_ok, bool ours);

/*
 * The node-side attach claimed for @name, the device formatted if blank and
 * mounted at @gd, the record written.  @kubelet_dev: the device kubelet
 * passed (mountdevice), or NULL.
 */
int fv_blkvol_attach_and_mount(struct fv_ctx *cx, const void *v, const struct fv_opts *o,
			       const char *name, const struct fv_dir *gd, const char *kubelet_dev);

/*
 * Volume @name is mounted on this node (@mi): the options must name that
 * very device (@found and @dev are the backend's find() answer).
 */
int fv_blkvol_require_named_device(struct fv_ctx *cx, const char *name, int found,
				   const char *dev, const struct fv_mntinfo *mi);

/*
 * fv_blkvol_writable() - make the device mount @gd of a volume read-write for
 * a read-write pod (read-only pods came first); a device that cannot be
 * written is -errno with a message that names the conflict.
 */
int fv_blkvol_writable(struct fv_ctx *cx, const struct fv_dir *gd);


/* Write the state record of volume @name (@dev its device, "" not yet known): 0 or <0. */
int fv_blkvol_save_record(struct fv_ctx *cx, const char *name, const void *v, const char *dev,
			  const struct fv_opts *o);

/*
 * blkvol-raw.c: raw block volumes (fv_opts.block), staged as their device's
 * node bound on the file BLKVOL_NODE_FILE in the stage directory, published
 * as binds of that node on the target file (docs/design.md, "Raw block").
 */
#define BLKVOL_NODE_FILE "device"

/* mountdevice of a raw block volume @name in the stage directory @gd (locked by the caller). */
int fv_blkvol_stage_block(struct fv_ctx *cx, const void *v, const struct fv_opts *o,
			  const char *name, const struct fv_dir *gd);

/*
 * unmountdevice's raw block part: the node bound in @gd goes, then the
 * node-side attach.  @gd is no mount point (the caller looked: a
 * filesystem's files are never looked at here).  1: @gd holds no raw block
 * stage.
 */
int fv_blkvol_unstage_block(struct fv_ctx *cx, const char *name, const struct fv_dir *gd);

/* publish of a raw block volume: its staged node in @staged bound on the file @dir. */
int fv_blkvol_publish_block(struct fv_ctx *cx, const char *dir, const char *staged,
			    const struct fv_opts *o);

/*
 * A filesystem's @what ("stage", "publish") of the volume staged in @staged:
 * @err (with a message) when @staged holds a raw block stage, else 0.
 */
int fv_blkvol_staged_as_block(struct fv_ctx *cx, const char *staged, const char *what, int err);

/*
 * unpublish of what is not a directory: the node bound on the file @dir
 * unmounted (the file stays, for the runner to remove).  1: @dir is a
 * directory (the filesystem path runs).
 */
int fv_blkvol_unpublish_block(struct fv_ctx *cx, const char *dir);

/*
 * Is device @rdev (its node bound somewhere) volume @name's: the device its
 * record names, or without a record the kernel's word (a device of this
 * backend whose node is bound in a stage directory named @name)?  1, 0, <0.
 */
int fv_blkvol_owns_node(struct fv_ctx *cx, const char *name, dev_t rdev);

/*
 * A filesystem stage of volume @name on device @dev: refused while the
 * device's node is bound anywhere (a raw block stage or publish).  0 or <0.
 */
int fv_blkvol_no_node_binds(struct fv_ctx *cx, const char *dev, const char *name);

/* blkvol-node.c: node mode's mount and unmount (fv_blkvol_op_mount(), fv_blkvol_op_unmount()). */
int fv_blkvol_node_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o);
int fv_blkvol_node_unmount(struct fv_ctx *cx, const char *dir);

/* Node mode: the directory of the device mount of volume key @vkey, into @buf. */
int fv_blkvol_node_device_dir(struct fv_ctx *cx, const char *vkey, char *buf, size_t len);

/*
 * Node mode: when no pod of volume @vkey uses its device mount @path any
 * more, that mount and the node-side attach go.  Call with the volume lock held.
 */
int fv_blkvol_node_teardown(struct fv_ctx *cx, const char *vkey, const char *path,
			    dev_t was_devno);

/*
 * Node mode: call @fn for each volume key with a device mount directory of
 * the pod dir name @name, or (NULL) of every name.
 */
int fv_blkvol_node_each(struct fv_ctx *cx, const char *name,
			int (*fn)(struct fv_ctx *cx, const char *vkey, void *arg), void *arg);

/*
 * kubelet's global mount path for the pod volume dir @poddir:
 *   <root>/pods/<uid>/volumes/<vendor>~<driver>/<name>  ->
 *   <root>/plugins/kubernetes.io/flexvolume/<vendor>/<driver>/mounts/<name>
 * (docs/flexvolume-contract.md §2).  Returns false when @poddir has another shape.
 */
bool fv_blkvol_kubelet_path(const char *poddir, char *ret, size_t len);

/* The pod bind and its undo (blkvol-pod.c: mount and unmount, publish and unpublish, node mode). */
/*
 * fv_blkvol_bind() - bind the device mount at @src (a whole-filesystem
 * mount of a block device; a path we know, opened literally) into the pod
 * dir @dir (taken literally, must exist: kubelet creates it), read-only
 * when @ro.  Already bound from the same filesystem is success; anything
 * else mounted there is -FV_ERR_CONFLICT.  @strict: bound already in the
 * other mode is -EEXIST, nothing changed (CSI's publish of a target again
 * with another readonly); else a read-only pod's writable bind is made
 * read-only (kubelet never calls mount again for a mount point).
 */
int fv_blkvol_bind(struct fv_ctx *cx, const char *dir, const char *src, bool ro, bool strict);

/*
 * fv_blkvol_unmount() - unmount @dir (taken literally: a symlink or magic
 * link in it is refused) completely and check it is left empty (kubelet
 * removes it with rmdir).  A missing or unmounted dir is success.  @ret
 * (may be NULL) gets the topmost mount that was there, or an empty source
 * and devno 0 when nothing was mounted.
 */
int fv_blkvol_unmount(struct fv_ctx *cx, const char *dir, struct fv_mntinfo *ret);


#endif
