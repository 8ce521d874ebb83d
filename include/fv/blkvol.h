/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block-volume class (blkvol.c): one implementation of the generic
 * lifecycle of attachable block volumes - waitforattach, mountdevice,
 * mount, unmount, unmountdevice, detach, isattached, expandfs - with the
 * state record, the locking keys and the empty-directory rule, in both
 * attach modes (docs/design.md, "Two attach modes").  A driver (loop, iscsi)
 * supplies only its backend steps in a struct fv_blkvol_ops and fills its
 * op table with FV_BLKVOL_OPS(&ops).
 *
 * Identity.  The volume an op acts on comes from kubelet's arguments, never
 * from an option (kubernetes.io/pvOrVolumeName is an ordinary map entry a
 * PV author can override, contract §2):
 *
 *   mountdevice, unmountdevice   the last component of the global mount path
 *   mount, unmount, expandfs     the last component of the pod volume dir
 *   detach                       its PV-name argument
 *
 * These "names" key the per-volume lock (<driver>-vol-<name>), the state
 * record and every claim a backend makes on a device (loop tags).  In node
 * mode the pod dir's name is a pod author's choice for inline volumes, so
 * there the key is "<name>@<ident>", the backend object's identity added
 * (ops->ident(); docs/design.md, "Node mode keys").
 *
 * waitforattach gets no directory, only the handle attach returned and the
 * options.  What identifies the volume there is the backend object the
 * options name (the image file, the target and LUN): waitforattach only
 * creates or reuses the node-side attachment of that object and returns its
 * device.  It claims nothing and takes no volume lock; the options' volume
 * name is a hint only: loop keeps it in an unclaimed tag, and the class a
 * record under "?<hint>" (apart from the trusted names' records), so that a
 * detach of that name still finds an attach nobody mounted - which can only
 * widen what that detach releases to something unmounted, never redirect
 * it; loop also refuses an image already bound under another name.  The
 * claim is made by mountdevice (or node-mode mount), under the trusted
 * name, before anything is mounted; a device claimed by or mounted for
 * another volume is refused there.
 *
 * Messages are set on failure (fv_fail).
 */
#ifndef FV_BLKVOL_H
#define FV_BLKVOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fv_caps;
struct fv_ctx;
struct fv_mntinfo;
struct fv_dir;
struct fv_opts;
struct fv_volstats;
struct json_object;

/*
 * The backend steps of a block driver.  @vol is the driver's own parsed
 * volume (vol_size bytes, filled by parse), always passed back as-is.
 */
struct fv_blkvol_ops {
	size_t vol_size;
	const char *default_fstype; /* made on a blank device when fsType is not set */

	/*
	 * parse() - options -> @vol; lexical checks only (attach and isattached
	 * run in the controller-manager: no node access).  The class has
	 * checked kubernetes.io/fsType already.
	 */
	int (*parse)(struct fv_ctx *cx, const struct fv_opts *o, void *vol);

	/* handle() - the attach answer: a deterministic device handle. */
	int (*handle)(struct fv_ctx *cx, const void *vol, char **ret_handle);

	/*
	 * attach() - the node-side attach: make the volume's device exist
	 * (bind the image, log in to the LUN) or find it, and write its node
	 * into @dev.  @name is the trusted volume name to claim the device for
	 * (mountdevice, node-mode mount), or NULL in waitforattach, where @hint
	 * (the options' volume name, may be NULL) is all there is.  A device
	 * claimed for another name is -FV_ERR_CONFLICT.  On success *ret_lock
	 * is a lock (fd, or -1) the class holds until the device is mounted
	 * and releases with fv_unlock(): the backend's own serialisation
	 * (one image, one target) against concurrent release decisions.  A
	 * claim may leave the device open in the backend until the driver
	 * exits or release()/release_on_umount() runs (loop: a binding the
	 * kernel releases at its last close, held until the mount holds it).
	 */
	int (*attach)(struct fv_ctx *cx, const void *vol, const char *name, const char *hint,
		      char *dev, size_t len, int *ret_lock);

	/* find() - the device of @vol if it is attached on this node: 0 found, 1 not, <0. */
	int (*find)(struct fv_ctx *cx, const void *vol, char *dev, size_t len);

	/*
	 * release() - undo the node-side attach of the volume @name: @devno is
	 * the device its mount was on (0: unknown), @rec its state record (NULL
	 * when there is none: state wiped, never mounted).  Works from the
	 * kernel first; a device still mounted is -EBUSY; what other volumes
	 * still use (a shared iSCSI session) stays.  Nothing to release is 0.
	 */
	int (*release)(struct fv_ctx *cx, const char *name, dev_t devno, struct json_object *rec);

	/*
	 * release_on_umount() - optional: device @devno, mounted for volume
	 * @name, is about to be unmounted for good (unmountdevice, the last
	 * pod in node mode).  Arrange, where the backend can, that the kernel
	 * undoes the attach when its last mount goes (loop: LO_FLAGS_AUTOCLEAR,
	 * set at bind time by attach(); here only on an older version's
	 * binding), so a SIGKILL between the umount and release() leaks
	 * nothing.  A failure here is logged, never fatal: release() still runs.
	 */
	int (*release_on_umount)(struct fv_ctx *cx, const char *name, dev_t devno);

	/* record() - add the backend's fields to @rec, the state record of @vol. */
	int (*record)(struct fv_ctx *cx, const void *vol, struct json_object *rec);

	/*
	 * grow() - make device @dev of @vol at least @new_size bytes (loop: the
	 * file and LOOP_SET_CAPACITY; iscsi: a rescan).  The class grows the
	 * filesystem afterwards.  NULL: expandfs is not supported.
	 */
	int (*grow)(struct fv_ctx *cx, const void *vol, const char *dev, uint64_t new_size);

	/*
	 * ident() - a stable identity of the backend object @vol names, the
	 * same for every volume that names it (loop: the image's device and
	 * inode; iscsi: the target and LUN).  Node mode keys a volume on it
	 * together with the pod dir's name (docs/design.md, "Node mode keys").
	 * May make what attach() would make (a sparse image).  0 or <0.
	 */
	int (*ident)(struct fv_ctx *cx, const void *vol, char *buf, size_t len);

	/*
	 * ident_of() - the ident() of the backend object behind block device
	 * @devno: 0 (in @buf), 1 when @devno is none of this backend's, <0.
	 */
	int (*ident_of)(struct fv_ctx *cx, dev_t devno, char *buf, size_t len);

	/*
	 * health() - optional: is the backend behind device @devno, attached for
	 * a volume whose state record is @rec (NULL: none), well?  From the
	 * kernel, without I/O (loop: the image file still the one bound; iscsi:
	 * the session and the disk's state in sysfs).  0 well, 1 not (why in
	 * @msg), <0 cannot tell.  The class reads from the device afterwards
	 * (its own bounded probe), so I/O errors need no backend step.
	 */
	int (*health)(struct fv_ctx *cx, dev_t devno, struct json_object *rec, char *msg,
		      size_t len);

	/*
	 * probe_fd() - optional: a descriptor open on exactly the bytes of block
	 * device @dev, which the class's probe before a first mount reads
	 * instead of the device, or -1 (probe the device).  Borrowed: valid
	 * until the call ends.  loop: the image a binding made in this call
	 * was made of; its device's page cache is empty, so every probe read
	 * through the device is I/O through the loop queue, about 0.7 ms of a
	 * stage on an image in page cache (docs/benchmarks.md), where the
	 * file's pages are at hand.
	 */
	int (*probe_fd)(struct fv_ctx *cx, const char *dev);
};

/* The generic ops, with the signatures of struct fv_driver's slots. */
int fv_blkvol_op_attach(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			char **ret_device);
int fv_blkvol_op_isattached(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			    bool *ret_attached);
int fv_blkvol_op_detach(struct fv_ctx *cx, const char *volume, const char *node);
int fv_blkvol_op_waitforattach(struct fv_ctx *cx, const char *device, const struct fv_opts *o,
			       char **ret_device);
int fv_blkvol_op_mountdevice(struct fv_ctx *cx, const char *dir, const char *device,
			     const struct fv_opts *o);
int fv_blkvol_op_unmountdevice(struct fv_ctx *cx, const char *dir);
int fv_blkvol_op_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o);
int fv_blkvol_op_unmount(struct fv_ctx *cx, const char *dir);
int fv_blkvol_op_expandfs(struct fv_ctx *cx, const struct fv_opts *o, const char *device,
			  const char *dir, const char *name, uint64_t new_size, uint64_t old_size);
/*
 * owns (fv/driver.h): the mount's device is the one volume @name's record
 * names; with no record (the state dir wiped), the kernel's word: a device
 * of this backend whose whole-filesystem mount is at a directory named
 * @name (the volume's device mount).
 */
int fv_blkvol_owns(struct fv_ctx *cx, const char *name, const char *path,
		   const struct fv_mntinfo *mi);
/*
 * stats (fv/driver.h): a filesystem volume's statvfs, a raw block volume's
 * size, and the condition: the backend's health(), then a read of the
 * device's first block in a child under the probe deadline (blkvol-stats.c).
 */
int fv_blkvol_stats(struct fv_ctx *cx, const char *name, const char *path,
		    struct fv_volstats *ret);
/* publish and unpublish (fv/driver.h): mount and unmount with the device mount named */
int fv_blkvol_op_publish(struct fv_ctx *cx, const char *dir, const char *staged,
			 const struct fv_opts *o);
int fv_blkvol_op_unpublish(struct fv_ctx *cx, const char *dir, const char *name);
int fv_blkvol_op_gc(struct fv_ctx *cx);

/*
 * fv_blkvol_gc_maybe() - the opportunistic garbage collection of a node-side
 * op, after its own work: at most one pass per gc_interval per driver (a
 * stamp file, a try-lock: never waits), looking at a bounded number of
 * records and releasing at most one.  Leaves the op's reply message alone.
 */
void fv_blkvol_gc_maybe(struct fv_ctx *cx);

/* fv_blkvol_init_caps() - init's capabilities on this node: attach is false in node mode. */
void fv_blkvol_init_caps(const struct fv_ctx *cx, struct fv_caps *caps);

/*
 * The capabilities and op slots of a block driver (inside its struct
 * fv_driver initialiser).  Every capability holds for a filesystem on a
 * block device; attach is answered false in node mode (fv_blkvol_init_caps()).
 */
#define FV_BLKVOL_OPS(ops)                                        \
	.caps = { .attach = true, .selinux_relabel = true,        \
		  .supports_metrics = true, .fsgroup = true,      \
		  .requires_fs_resize = true },                   \
	.blk = (ops), .attach = fv_blkvol_op_attach,              \
	.isattached = fv_blkvol_op_isattached,                    \
	.detach = fv_blkvol_op_detach,                            \
	.waitforattach = fv_blkvol_op_waitforattach,              \
	.mountdevice = fv_blkvol_op_mountdevice,                  \
	.unmountdevice = fv_blkvol_op_unmountdevice,              \
	.mount = fv_blkvol_op_mount, .unmount = fv_blkvol_op_unmount, \
	.publish = fv_blkvol_op_publish,                          \
	.unpublish = fv_blkvol_op_unpublish,                      \
	.owns = fv_blkvol_owns, .stats = fv_blkvol_stats,         \
	.raw_block = true,                                        \
	.expandfs = fv_blkvol_op_expandfs, .gc = fv_blkvol_op_gc,  \
	.init_caps = fv_blkvol_init_caps, .after_node_op = fv_blkvol_gc_maybe

#endif
