/* SPDX-License-Identifier: Apache-2.0 */
/* libblkid probing, mkfs/grow helpers, event-driven device waits (fv/blkutil.h). */
#include <blkid.h>
#include <endian.h>
#include <fcntl.h>
#include <libudev.h>
#include <linux/fs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/ioctl.h>
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

const char *fv_fs_mount_options(const char *fstype, bool ro)
{
	/* What the xfs drivers of the cloud CSI drivers do too; ext4 makes no such check. */
	if (fstype && streq(fstype, "xfs"))
		return ro ? "ro,nouuid" : "rw,nouuid";
	return ro ? "ro" : "rw";
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
 * Did a mkfs.xfs stop half-way on the device open in @fd?  mkfs.xfs writes
 * the primary superblock early with sb_inprogress set and clears the flag
 * as its very last write; libblkid reports such a device as xfs, and the
 * kernel refuses to mount it ("Structure needs cleaning").  No data can
 * live on it: the filesystem never existed.  (mke2fs needs no such test: it
 * writes the primary superblock last, so a killed mke2fs leaves a device
 * blkid calls blank.)  The probe's own descriptor: its page cache.
 */
static bool xfs_mkfs_unfinished(int fd)
{
	unsigned char sb[128];

	/* struct xfs_dsb: sb_magicnum at 0, sb_inprogress at byte 126 */
	return fd >= 0 && pread(fd, sb, sizeof(sb), 0) == (ssize_t)sizeof(sb) &&
	       !memcmp(sb, "XFSB", 4) && sb[126] != 0;
}

/*
 * The two signatures libblkid reads in 256 KiB pieces, looked for here in
 * small reads instead.  Its zfs_member prober reads each of a device's four
 * 256 KiB ZFS labels whole, and xfs_external_log the first 256 KiB, each into
 * a fresh buffer: 1.25 MiB of page faults and copies, nearly all of a
 * probe's time (4.9 ms of CPU against 0.16 ms without the two),
 * to look at 8 bytes in every KiB of each label's second half and 4 bytes
 * of every sector.  Here they go through one 16 KiB buffer.
 *
 * What is counted is what libblkid counts: uberblock magics in either byte
 * order in the labels (two at the start, two at the end aligned down to
 * 256 KiB, as ZFS puts them), stopping at ZFS_WANT; XFS log record headers
 * (magic, version, length, format) at the start of the first 512 sectors of
 * a device that does not start with an XFS superblock.  The caller is
 * stricter on a device libblkid calls blank: one magic of either is enough
 * to refuse to format it.
 */
#define ZFS_LABEL_SIZE (256 * 1024)
#define ZFS_UBERBLOCKS (128 * 1024) /* the second half of a label: 128 uberblocks of 1 KiB */
#define ZFS_UBERBLOCK_MAGIC 0x00bab10cULL
#define ZFS_WANT 4
#define ZFS_MIN_SIZE (64ULL << 20) /* libblkid's minimum for zfs_member */
#define XLOG_MAGIC 0xfeedbabeU
#define XLOG_MIN_SIZE (10ULL << 20) /* ... and for xfs_external_log */

struct odd_signs {
	int zfs_magics;	   /* uberblock magics found, up to ZFS_WANT */
	bool xlog_magic;   /* an XFS log record magic at a sector start */
	bool xlog_header;  /* ... in a header libblkid calls valid */
};

static uint32_t be32_at(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* xlog_rec_header: h_magicno at 0, h_version at 8, h_len at 12, h_fmt at 300 */
static void xlog_sector(const unsigned char *s, struct odd_signs *o)
{
	uint32_t version = be32_at(s + 8), len = be32_at(s + 12), fmt = be32_at(s + 300);

	if (be32_at(s) != XLOG_MAGIC)
		return;
	o->xlog_magic = true;
	if (version && !(version & ~3U) && len > 0 && len <= INT32_MAX && fmt >= 1 && fmt <= 3)
		o->xlog_header = true;
}

static int odd_signs_read(int fd, uint64_t size, struct odd_signs *o)
{
	uint64_t end = size - size % ZFS_LABEL_SIZE, label[4];
	unsigned char buf[16 * 1024];
	int nlabels = end >= 2 * ZFS_LABEL_SIZE ? 4 : 0;
	bool xfs = false;

	memset(o, 0, sizeof(*o));
	/* the first 256 KiB: XFS log records (and ZFS's first label, whose uberblocks follow) */
	for (uint64_t off = 0; off < ZFS_LABEL_SIZE && off < size; off += sizeof(buf)) {
		ssize_t n = pread(fd, buf, sizeof(buf), (off_t)off);

		if (n < 0)
			return NEG_ERRNO();
		if (off == 0)
			xfs = n >= 4 && !memcmp(buf, "XFSB", 4);
		for (ssize_t sec = 0; !xfs && sec + 512 <= n; sec += 512)
			xlog_sector(buf + sec, o);
		if (n < (ssize_t)sizeof(buf))
			break;
	}
	label[0] = 0;
	label[1] = ZFS_LABEL_SIZE;
	label[2] = end - 2 * ZFS_LABEL_SIZE;
	label[3] = end - ZFS_LABEL_SIZE;
	for (int i = 0; i < nlabels && o->zfs_magics < ZFS_WANT; i++) {
		for (uint64_t off = 0; off < ZFS_UBERBLOCKS; off += sizeof(buf)) {
			ssize_t n = pread(fd, buf, sizeof(buf), (off_t)(label[i] + ZFS_UBERBLOCKS + off));

			if (n < 0)
				return NEG_ERRNO();
			if (n != (ssize_t)sizeof(buf))
				return -EIO;
			for (size_t u = 0; u < sizeof(buf); u += 1024) {
				uint64_t m;

				memcpy(&m, buf + u, sizeof(m));
				if (m == ZFS_UBERBLOCK_MAGIC || m == __builtin_bswap64(ZFS_UBERBLOCK_MAGIC))
					o->zfs_magics++;
			}
		}
	}
	if (o->zfs_magics > ZFS_WANT)
		o->zfs_magics = ZFS_WANT;
	return 0;
}

/*
 * Ask the kernel to read, all at once, the two ends of the device that
 * the probe then reads piece by piece: the first 512 KiB (the superblocks
 * and partition tables near the start, the XFS log records, the first two
 * ZFS labels) and the last 512 KiB past the last 256 KiB boundary (the
 * labels and signatures at the end).  libblkid reads in small synchronous
 * pieces without read-ahead; on an image on a disk each was a round trip.
 * Only a hint: what is read and decided is the same without it.
 */
static void prefetch(int fd, uint64_t size)
{
	uint64_t end = size - size % ZFS_LABEL_SIZE, head = 2 * ZFS_LABEL_SIZE;

	if (fd < 0 || size == 0)
		return;
	(void)posix_fadvise(fd, 0, (off_t)(head < size ? head : size), POSIX_FADV_WILLNEED);
	if (end > 2 * head)
		(void)posix_fadvise(fd, (off_t)(end - head), (off_t)(size - (end - head)),
				    POSIX_FADV_WILLNEED);
}

/*
 * A probe of @src standing in for block device @dev: its size is the
 * device's (a loop device ends at the last whole sector of its file).
 */
static blkid_probe probe_for(const char *dev, int src)
{
	_cleanup_close_ int fd = -1;
	blkid_probe pr;
	uint64_t size;
	struct stat st;

	if (src < 0)
		return blkid_new_probe_from_filename(dev);
	fd = open(dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode) ||
	    ioctl(fd, BLKGETSIZE64, &size) < 0)
		return blkid_new_probe_from_filename(dev);
	pr = blkid_new_probe();
	if (pr && blkid_probe_set_device(pr, src, 0, (blkid_loff_t)size) < 0) {
		blkid_free_probe(pr);
		return blkid_new_probe_from_filename(dev);
	}
	return pr;
}

int fv_blk_probe(struct fv_ctx *cx, const char *dev, int src, char *type, size_t len)
{
	blkid_probe pr = probe_for(dev, src);
	const char *v = NULL, *usage = NULL;
	static char zfs_member[] = "zfs_member", xfs_log[] = "xfs_external_log";
	char *odd[] = { zfs_member, xfs_log, NULL };
	struct odd_signs o;
	uint64_t size;
	int rc, r;

	if (!pr)
		return fv_fail(cx, NEG_ERRNO(), "cannot probe '%s': %m", dev);
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE);
	/* every signature libblkid knows, the two it reads in 256 KiB pieces by odd_signs_read() */
	blkid_probe_filter_superblocks_type(pr, BLKID_FLTR_NOTIN, odd);
	/* without the partition chain a GPT/DOS disk would look blank */
	blkid_probe_enable_partitions(pr, 1);
	size = (uint64_t)blkid_probe_get_size(pr);
	prefetch(blkid_probe_get_fd(pr), size);
	rc = blkid_do_safeprobe(pr);
	if (rc >= 0) {
		r = odd_signs_read(blkid_probe_get_fd(pr), size, &o);
		if (r < 0) {
			r = fv_fail(cx, r, "probing '%s' failed: %s", dev, strerror(-r));
			goto out;
		}
	}
	if (rc == 1 && (o.zfs_magics || o.xlog_magic)) {
		/* libblkid saw nothing: one magic of either is enough not to format */
		r = fv_fail(cx, -FV_ERR_NOTBLANK, "'%s' holds %s, not a filesystem; refusing to "
			    "use it", dev, o.zfs_magics ? "a ZFS label (zfs_member)" :
			    "an XFS log record (xfs_external_log)");
	} else if (rc == 1) {
		r = 1;
	} else if (rc == -2 || (rc == 0 && ((o.zfs_magics >= ZFS_WANT && size >= ZFS_MIN_SIZE) ||
					    (o.xlog_header && size >= XLOG_MIN_SIZE)))) {
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
		r = streq(v, "xfs") && xfs_mkfs_unfinished(blkid_probe_get_fd(pr)) ? 2 : 0;
	} else {
		r = fv_fail(cx, -FV_ERR_NOTBLANK, "'%s' holds '%s' (%s), not a filesystem", dev,
			    v ? v : "?", usage ? usage : "?");
	}
out:
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

/*
 * The size a filesystem claims in its superblock, from the first 4 KiB of the
 * device: ext2/3/4 at 1 KiB (s_blocks_count, the high half with the 64bit
 * feature, blocks of 1 KiB << s_log_block_size), xfs at 0 (sb_dblocks of
 * sb_blocksize, big-endian).  libblkid reports sizes only from 2.39 on
 * (FSSIZE); Debian 12 has 2.38.  0: not a superblock of @fstype.
 */
static uint64_t sb_bytes(const unsigned char *b, const char *fstype)
{
	uint32_t u32;
	uint64_t u64;

	if (streq(fstype, "xfs")) {
		if (memcmp(b, "XFSB", 4))
			return 0;
		memcpy(&u32, b + 4, 4);
		memcpy(&u64, b + 8, 8);
		u32 = be32toh(u32);
		return u32 >= 512 && u32 <= 65536 ? be64toh(u64) * u32 : 0;
	}
	if (strncmp(fstype, "ext", 3))
		return 0;
	b += 1024;
	if (b[0x38] != 0x53 || b[0x39] != 0xef)
		return 0;
	memcpy(&u32, b + 0x18, 4); /* s_log_block_size */
	if (le32toh(u32) > 6)
		return 0;
	u64 = 1024ull << le32toh(u32);
	memcpy(&u32, b + 0x60, 4); /* s_feature_incompat: 0x80 is 64bit */
	if (le32toh(u32) & 0x80) {
		uint32_t hi;

		memcpy(&hi, b + 0x150, 4);
		memcpy(&u32, b + 0x04, 4);
		return u64 * ((uint64_t)le32toh(hi) << 32 | le32toh(u32));
	}
	memcpy(&u32, b + 0x04, 4);
	return u64 * le32toh(u32);
}

int fv_fs_short(const char *dev, const char *fstype, uint64_t *fs, uint64_t *size)
{
	_cleanup_close_ int fd = -1;
	struct stat st, fst;
	unsigned char *b = NULL;
	ssize_t n;
	int r;

	if (stat(dev, &st) < 0)
		return NEG_ERRNO();
	if (!S_ISBLK(st.st_mode))
		return -ENOTBLK;
	/*
	 * xfs direct: a mounted xfs writes its superblock from its own buffers,
	 * not the device's page cache, which may still hold the one from before
	 * xfs_growfs.  ext2/3/4 through that cache: its superblock lives there
	 * (mount reads it with sb_bread(), resize2fs's change goes through it),
	 * so the read is a copy, not I/O through the loop queue (40 us a stage).
	 */
	fd = open(dev, O_RDONLY | O_CLOEXEC | O_NOCTTY | (streq(fstype, "xfs") ? O_DIRECT : 0));
	if (fd < 0)
		return NEG_ERRNO();
	if (fstat(fd, &fst) < 0 || !S_ISBLK(fst.st_mode) || fst.st_rdev != st.st_rdev)
		return -ENOTBLK;
	if (ioctl(fd, BLKGETSIZE64, size) < 0)
		return NEG_ERRNO();
	if (posix_memalign((void **)&b, 4096, 4096))
		return -ENOMEM;
	n = pread(fd, b, 4096, 0);
	r = n < 0 ? NEG_ERRNO() : n != 4096 ? -EIO : 0;
	if (r == 0) {
		*fs = sb_bytes(b, fstype);
		r = *fs == 0 ? -EUCLEAN : 0;
	}
	free(b);
	if (r < 0)
		return r;
	/* as mount-utils, a tail shorter than a block (64 KiB: the largest) is no reason to grow */
	return *size > *fs + 65536 ? 1 : 0;
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
