/* SPDX-License-Identifier: Apache-2.0 */
/* libblkid probing, mkfs/grow helpers, event-driven device waits (fv/blkutil.h). */
#include <blkid.h>
#include <fcntl.h>
#include <libudev.h>
#include <poll.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/blkutil.h"
#include "fv/exec.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/util.h"

static const char *const fs_known[] = { "ext2", "ext3", "ext4", "xfs" };

bool fv_fs_supported(const char *fstype)
{
	for (size_t i = 0; i < ARRAY_SIZE(fs_known); i++)
		if (fstype && streq(fstype, fs_known[i]))
			return true;
	return false;
}

int fv_fs_check_option(struct fv_ctx *cx, const char *fstype)
{
	if (fstype && !fv_fs_supported(fstype))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "kubernetes.io/fsType '%s' is not supported (ext2, ext3, ext4, xfs)",
			       fstype);
	return 0;
}

int fv_blk_lock(struct fv_ctx *cx, const char *dev)
{
	unsigned int t = cx->cfg.lock_timeout;
	struct stat st;
	int fd = open(dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY), r;

	if (fd < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot open '%s': %m", dev);
	if (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode)) {
		close(fd);
		return fv_fail(cx, -ENOTBLK, "'%s' is not a block device", dev);
	}
	r = fv_flock_deadline(fd, LOCK_EX, t * 1000U);
	if (r == 0)
		return fd;
	close(fd);
	if (r == -FV_ERR_TIMEOUT)
		return fv_fail(cx, r,
			       "%s is still locked by another process after %u s (an earlier mkfs "
			       "still writing it?); not touching it",
			       dev, t);
	return fv_fail(cx, r, "cannot lock '%s': %s", dev, strerror(-r));
}

/*
 * Did a mkfs.xfs stop half-way on @dev?  mkfs.xfs writes the primary
 * superblock early with sb_inprogress set and clears the flag as its very
 * last write; libblkid reports such a device as xfs, and the kernel refuses
 * to mount it ("Structure needs cleaning").  No data can live on it: the
 * filesystem never existed.  (mke2fs needs no such test: it writes the
 * primary superblock last, so a killed mke2fs leaves a device blkid calls
 * blank.)
 */
static bool xfs_mkfs_unfinished(const char *dev)
{
	unsigned char sb[128];
	_cleanup_close_ int fd = open(dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	/* struct xfs_dsb: sb_magicnum at 0, sb_inprogress at byte 126 */
	return fd >= 0 && pread(fd, sb, sizeof(sb), 0) == (ssize_t)sizeof(sb) &&
	       !memcmp(sb, "XFSB", 4) && sb[126] != 0;
}

int fv_blk_probe(struct fv_ctx *cx, const char *dev, char *type, size_t len)
{
	blkid_probe pr = blkid_new_probe_from_filename(dev);
	const char *v = NULL, *usage = NULL;
	int rc, r;

	if (!pr)
		return fv_fail(cx, NEG_ERRNO(), "cannot probe '%s': %m", dev);
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE);
	/* without the partition chain a GPT/DOS disk would look blank */
	blkid_probe_enable_partitions(pr, 1);
	rc = blkid_do_safeprobe(pr);
	if (rc == 1) {
		r = 1;
	} else if (rc == -2) {
		r = fv_fail(cx, -FV_ERR_NOTBLANK,
			    "'%s' carries several conflicting signatures; refusing to format", dev);
	} else if (rc < 0) {
		r = fv_fail(cx, -EIO, "probing '%s' failed", dev);
	} else if (blkid_probe_lookup_value(pr, "PTTYPE", &v, NULL) == 0) {
		r = fv_fail(cx, -FV_ERR_NOTBLANK,
			    "'%s' holds a '%s' partition table, not a filesystem; refusing to use it",
			    dev, v);
	} else if (blkid_probe_lookup_value(pr, "TYPE", &v, NULL) == 0 &&
		   blkid_probe_lookup_value(pr, "USAGE", &usage, NULL) == 0 &&
		   streq(usage, "filesystem")) {
		snprintf(type, len, "%s", v);
		r = streq(v, "xfs") && xfs_mkfs_unfinished(dev) ? 2 : 0;
	} else {
		r = fv_fail(cx, -FV_ERR_NOTBLANK, "'%s' holds '%s' (%s), not a filesystem", dev,
			    v ? v : "?", usage ? usage : "?");
	}
	blkid_free_probe(pr);
	return r;
}

int fv_fs_make(struct fv_ctx *cx, const char *dev, const char *fstype, int lockfd, bool again)
{
	struct fv_exec_opts o = fv_exec_opts_of(cx);
	char prog[32];
	const char *argv[6];
	int n = 0;

	if (!fv_fs_supported(fstype))
		return fv_fail(cx, -FV_ERR_BADOPT, "filesystem type '%s' is not supported", fstype);
	snprintf(prog, sizeof(prog), "mkfs.%s", fstype);
	argv[n++] = prog;
	if (streq(fstype, "xfs")) {
		argv[n++] = "-q";
		if (again)
			argv[n++] = "-f"; /* over the unfinished one: it would refuse otherwise */
	} else {
		argv[n++] = "-F"; /* a whole device, not a partition: do not ask */
		argv[n++] = "-q";
	}
	argv[n++] = dev;
	argv[n] = NULL;
	/*
	 * mkfs inherits the device lock: if it outlives us (a helper that
	 * forks, a write the kernel finishes first), the lock lasts as long
	 * as the writer, and the next call waits for it.
	 */
	o.keep_fd = lockfd;
	return fv_exec(cx, argv, &o, NULL);
}

int fv_fs_grow(struct fv_ctx *cx, const char *dev, const char *mnt, const char *fstype)
{
	const struct fv_exec_opts o = fv_exec_opts_of(cx);

	if (streq(fstype, "xfs")) {
		const char *argv[] = { "xfs_growfs", mnt, NULL };

		return fv_exec(cx, argv, &o, NULL);
	}
	if (!strncmp(fstype, "ext", 3)) {
		const char *argv[] = { "resize2fs", dev, NULL };

		return fv_exec(cx, argv, &o, NULL);
	}
	return fv_fail(cx, -ENOTSUP, "cannot grow a '%s' filesystem", fstype);
}

bool fv_udev_running(void)
{
	return access("/run/udev/control", F_OK) == 0;
}

struct fv_devwait {
	struct udev *udev;
	struct udev_monitor *mon;
	bool udevd;
};

void fv_devwait_free(struct fv_devwait *w)
{
	if (!w)
		return;
	udev_monitor_unref(w->mon);
	udev_unref(w->udev);
	free(w);
}

int fv_devwait_open(struct fv_ctx *cx, struct fv_devwait **ret)
{
	struct fv_devwait *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->udev = udev_new();
	if (!w->udev)
		goto fail;
	/*
	 * With udevd, wait for its event: the device is then fully processed
	 * (links made, its own blkid probe done).  Without udevd the "udev"
	 * monitor is silent, so listen to the kernel directly.
	 */
	w->udevd = fv_udev_running();
	w->mon = udev_monitor_new_from_netlink(w->udev, w->udevd ? "udev" : "kernel");
	if (!w->mon || udev_monitor_filter_add_match_subsystem_devtype(w->mon, "block", NULL) < 0 ||
	    udev_monitor_enable_receiving(w->mon) < 0)
		goto fail;
	fv_debug("devwait: listening to %s events", w->udevd ? "udev" : "kernel");
	*ret = w;
	return 0;
fail:
	fv_devwait_free(w);
	return fv_fail(cx, -EIO, "cannot listen for device events: %m");
}

static bool try_device(struct fv_devwait *w, struct udev_device *d, fv_dev_match_fn match,
		       void *arg, char *ret, size_t len)
{
	const char *node = udev_device_get_devnode(d);
	struct stat st;

	if (!node || !match(d, arg))
		return false;
	if (w->udevd && !udev_device_get_is_initialized(d))
		return false;
	if (stat(node, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != udev_device_get_devnum(d))
		return false;
	snprintf(ret, len, "%s", node);
	return true;
}

int fv_devwait_run(struct fv_ctx *cx, struct fv_devwait *w, const char *sysname,
		   fv_dev_match_fn match, void *arg, unsigned int timeout_ms, char *ret, size_t len)
{
	uint64_t t0 = fv_now_ms(), deadline = t0 + timeout_ms;
	bool found = false;

	/*
	 * The one device we wait for may be there already (an earlier call, or
	 * its event came before the monitor was open): look at it, and only
	 * at it.  Enumerating the block subsystem instead costs a sysfs read
	 * per block device on the node (100 ms with 1,000 loop devices).
	 */
	if (sysname) {
		struct udev_device *d = udev_device_new_from_subsystem_sysname(w->udev, "block",
									       sysname);

		if (d)
			found = try_device(w, d, match, arg, ret, len);
		udev_device_unref(d);
	}

	while (!found) {
		struct pollfd p = { .fd = udev_monitor_get_fd(w->mon), .events = POLLIN };
		uint64_t now = fv_now_ms();
		struct udev_device *d;
		const char *action;
		int n;

		if (now >= deadline)
			return fv_fail(cx, -FV_ERR_TIMEOUT, "the device did not appear within %u ms",
				       timeout_ms);
		n = poll(&p, 1, (int)(deadline - now));
		if (n < 0 && errno != EINTR)
			return fv_fail(cx, NEG_ERRNO(), "waiting for device events: %m");
		if (n <= 0)
			continue;
		d = udev_monitor_receive_device(w->mon);
		if (!d)
			continue;
		action = udev_device_get_action(d);
		if (!action || !streq(action, "remove"))
			found = try_device(w, d, match, arg, ret, len);
		udev_device_unref(d);
	}
	fv_log("device %s ready after %llu ms (%s events)", ret,
	       (unsigned long long)(fv_now_ms() - t0), w->udevd ? "udev" : "kernel");
	return 0;
}

int fv_blk_busy(const char *dev)
{
	struct stat st;
	int fd;

	if (stat(dev, &st) < 0)
		return errno == ENOENT ? 0 : NEG_ERRNO();
	if (!S_ISBLK(st.st_mode))
		return -ENOTBLK;
	/*
	 * O_EXCL on a block device claims it the way a mount, a device-mapper
	 * or md holder and swapon do: EBUSY if any of them has it, in any mount
	 * namespace (blkdev_open(), bd_prepare_to_claim()).  Our claim lasts
	 * only until the close.
	 */
	fd = open(dev, O_RDONLY | O_EXCL | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno == EBUSY)
		return 1;
	return errno == ENOENT || errno == ENXIO || errno == ENODEV ? 0 : NEG_ERRNO();
}
