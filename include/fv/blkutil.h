/* SPDX-License-Identifier: Apache-2.0 */
/* Block devices: libblkid probing, mkfs/resize, and event-driven waits on libudev (blkutil.c). */
#ifndef FV_BLKUTIL_H
#define FV_BLKUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fv_ctx;
struct udev_device;

/*
 * fv_blk_lock() - open block device @dev and take its BSD lock (LOCK_EX,
 * the block-device locking convention of systemd and udev: udev does not
 * probe a locked device) within the configured lock timeout.  Hold it from
 * the probe to the
 * mount: nothing else of ours probes, formats or mounts the device
 * meanwhile, and a mkfs that inherited it keeps it until it exits.
 * Returns the locked fd (close it to unlock), or -FV_ERR_TIMEOUT / -errno
 * (message set).
 */
int fv_blk_lock(struct fv_ctx *cx, const char *dev);

/*
 * fv_blk_probe() - what does @dev hold?  Superblocks and partition tables
 * are both probed (a partitioned disk is not blank).
 * Returns 0 and the filesystem type in @type (e.g. "ext4"), 1 when the
 * device is blank (safe to format), 2 and the type when it holds a
 * filesystem whose mkfs never finished (an xfs with sb_inprogress: a
 * killed mkfs; nothing to lose, format it again), -FV_ERR_NOTBLANK
 * (message set) for a partition table, a non-filesystem signature or
 * several signatures, -errno on I/O errors.  @src >= 0: read the bytes from
 * @src instead, a descriptor open on exactly what @dev holds (its first
 * BLKGETSIZE64 bytes are the device's; fv_blkvol_ops.probe_fd).
 */
int fv_blk_probe(struct fv_ctx *cx, const char *dev, int src, char *type, size_t len);

/* A filesystem type name as libblkid and the mount table give it ("ext4", "xfs"), and a NUL. */
#define FV_FSTYPE_MAX 64

/*
 * fv_blk_busy() - is block device @dev in use anywhere on the node: mounted
 * in any mount namespace, held by device-mapper, md or swap, or opened
 * exclusively?  An exclusive-open probe (stat first: only a block device is
 * opened).  Returns 1 busy, 0 not (or gone), -errno.
 */
int fv_blk_busy(const char *dev);

/* Is @fstype one we know how to make and grow?  (ext2, ext3, ext4, xfs) */
bool fv_fs_supported(const char *fstype);

/*
 * fv_fs_mount_options() - the options a volume's filesystem @fstype is mounted
 * with: "ro" or "rw", and for xfs "nouuid".  A restored snapshot or a clone
 * carries its origin's filesystem UUID, and xfs refuses to mount a UUID that
 * is already mounted ("Filesystem has duplicate UUID"): without it a loop
 * restore, always on its origin's node, would not mount while the origin is.
 */
const char *fv_fs_mount_options(const char *fstype, bool ro);

/* The kubernetes.io/fsType option (NULL: none asked) is one we support, or a Failure saying so. */
int fv_fs_check_option(struct fv_ctx *cx, const char *fstype);

/*
 * fv_fs_make() - mkfs.<fstype> on @dev, run as a helper under the helper
 * deadline.  @lockfd (fv_blk_lock(), or -1) is handed down to mkfs.
 * @again: over a filesystem whose mkfs never finished (probe result 2).
 */
int fv_fs_make(struct fv_ctx *cx, const char *dev, const char *fstype, int lockfd, bool again);

/*
 * fv_fs_grow() - grow the mounted filesystem on @dev (mounted at @mnt) to
 * fill the device: resize2fs for ext*, xfs_growfs for xfs.
 */
int fv_fs_grow(struct fv_ctx *cx, const char *dev, const char *mnt, const char *fstype);

/*
 * fv_fs_short() - is the @fstype filesystem on block device @dev smaller than
 * the device (by more than 64 KiB)?  Its size from its superblock in @fs, the
 * device's in @size.  A volume restored from a snapshot into a larger claim,
 * or grown while detached, is: its filesystem is grown when it is mounted.
 * Returns 1 short, 0 not, -EUCLEAN no @fstype superblock, -errno.
 */
int fv_fs_short(const char *dev, const char *fstype, uint64_t *fs, uint64_t *size);

/*
 * Waiting for a block device, event-driven.  Open the wait *before* doing
 * what makes the device appear, so no event is missed.  With udevd running
 * the "udev" monitor is used (the device is then fully processed: links
 * exist and udev's own probe is done), otherwise the "kernel" monitor.
 */
struct fv_devwait;

typedef bool (*fv_dev_match_fn)(struct udev_device *d, void *arg);

int fv_devwait_open(struct fv_ctx *cx, struct fv_devwait **ret);
/*
 * fv_devwait_run() - wait until @match accepts a device or @timeout_ms
 * passes.  @sysname, when the caller knows the device's kernel name
 * ("loop7", "sdb"), is looked at first: it may be ready already.  Only that
 * device is looked at, never the whole block subsystem, so the cost does not
 * grow with the node's devices; with @sysname NULL only events count (the
 * caller looked before opening the wait).  The device node is checked to be
 * a block device before success.
 * Returns 0 and the device node in @ret, or -FV_ERR_TIMEOUT / -errno (message set).
 */
int fv_devwait_run(struct fv_ctx *cx, struct fv_devwait *w, const char *sysname,
		   fv_dev_match_fn match, void *arg, unsigned int timeout_ms, char *ret, size_t len);
void fv_devwait_free(struct fv_devwait *w);

/* Is a udev daemon managing /dev on this node?  (/run/udev/control exists) */
bool fv_udev_running(void);

#endif
