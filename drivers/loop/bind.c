/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop: the kernel's loop devices (loop.h).  Every binding carries its tag
 * in lo_file_name (loop.c); this file binds, finds, claims and releases
 * them, and holds a device made here open until a mount holds it.
 *
 * The kernel's costs decide the shape: LOOP_CONFIGURE sets every
 * field of a free device at once, and LOOP_CLR_FD of an unused device is
 * free, but LOOP_SET_STATUS64 on a bound one drains and freezes its queue
 * (15-25 ms here, with or without a mount).  So the claim of mountdevice and
 * the release at the last umount (LO_FLAGS_AUTOCLEAR) are made at bind time
 * wherever the device can be held open until its mount: a binding no mount
 * uses is released and made again, claimed and self-releasing, rather than
 * changed in place; SET_STATUS64 is left for a device someone else holds.
 */
#include <dirent.h>
#include <fcntl.h>
#include <libudev.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <sys/stat.h>

#include "fv/blkutil.h"
#include "fv/config.h"
#include "fv/driver.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/util.h"
#include "loop.h"

/*
 * The device of a binding made (or claimed) with LO_FLAGS_AUTOCLEAR in this
 * process, open until a mount holds the device: the kernel releases such a
 * binding at its last close, and nothing else has it open before the mount.
 * The driver's exit closes it at the latest; a call that failed before its
 * mount thereby leaves nothing bound.  One per thread, closed when the
 * thread ends: flexvol-csi runs each call on a thread of its own
 * (csi/grpc.c), whose end is the call's as the process's is a FlexVolume
 * call's, and one call's hold must not close another's before its mount.
 */
static __thread int hold_fd = -1;
/*
 * Beside it, the image that binding was made of, opened anew (read-only, a
 * file of its own: the probe's read-ahead hints stay off the device's), and
 * the device's number: the bytes of a device bound a moment ago, whose own
 * page cache is still empty, for loop_probe_fd().
 */
static __thread int hold_image = -1;
static __thread dev_t hold_rdev;
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;
static pthread_key_t hold_key;
static bool hold_key_ok;

void loop_hold_drop(void)
{
	if (hold_fd >= 0)
		close(hold_fd);
	if (hold_image >= 0)
		close(hold_image);
	hold_fd = hold_image = -1;
}

static void hold_at_exit(void *unused)
{
	loop_hold_drop();
}

static void hold_key_make(void)
{
	hold_key_ok = pthread_key_create(&hold_key, hold_at_exit) == 0;
}

static void hold(int fd)
{
	loop_hold_drop();
	hold_fd = fd;
	/* any value but NULL: the key's destructor runs when the thread ends */
	if (pthread_once(&hold_once, hold_key_make) == 0 && hold_key_ok)
		(void)pthread_setspecific(hold_key, &hold_fd);
}

int loop_status(int nr, struct loop_info64 *info)
{
	char dev[32];
	_cleanup_close_ int fd = -1;

	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	fd = open(dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return NEG_ERRNO();
	if (ioctl(fd, LOOP_GET_STATUS64, info) < 0)
		return NEG_ERRNO(); /* ENXIO: not bound */
	return 0;
}

long loop_nr(const char *name)
{
	char *end;
	long nr;

	if (strncmp(name, "loop", 4) != 0)
		return -1;
	nr = strtol(name + 4, &end, 10);
	if (end == name + 4 || *end || nr < 0 || nr > INT32_MAX)
		return -1;
	return nr;
}

/*
 * Ask loop device @nr for its status and call @fn when it is bound: 1 (stop)
 * or 0 from @fn, 0 when unbound (ENXIO) or gone, -errno when the status
 * cannot be read - never "not bound" for a device we could not ask.
 */
static int each_one(int nr, loop_binding_fn fn, void *arg)
{
	struct loop_info64 info;
	int r = loop_status(nr, &info);

	if (r == -ENXIO || r == -ENOENT || r == -ENODEV)
		return 0;
	if (r < 0)
		return r;
	return fn(nr, &info, arg) ? 1 : 0;
}

/* Without /proc: every loop device in sysfs, each asked (ENXIO: not bound). */
static int each_binding_sysfs(loop_binding_fn fn, void *arg)
{
	DIR *d = opendir("/sys/block");
	struct dirent *e;
	int stop = 0;

	if (!d)
		return NEG_ERRNO();
	while (!stop && (e = readdir(d))) {
		long nr = loop_nr(e->d_name);

		if (nr >= 0)
			stop = each_one((int)nr, fn, arg);
	}
	closedir(d);
	return stop;
}

/*
 * No kernel interface maps a file or a tag to its loop device, so this is
 * a walk, but only over bound devices: /proc/partitions lists block devices
 * with a non-zero capacity, which leaves out every free loop device (a node
 * may keep thousands).  One read of a kernel file, like mountinfo, instead
 * of a sysfs lookup and an open() per device (25 ms for 1,000 free devices).  We never bind an image under one sector (loop_bind), so none
 * of ours is left out.  The kernel still decides: LOOP_GET_STATUS64 answers
 * each listed device.
 */
int loop_each_binding(loop_binding_fn fn, void *arg)
{
	FILE *f = fopen("/proc/partitions", "re");
	char line[256];
	int stop = 0;

	if (!f)
		return each_binding_sysfs(fn, arg);
	while (!stop && fgets(line, sizeof(line), f)) {
		unsigned int maj, min;
		unsigned long long blocks;
		char name[64];
		long nr;

		if (sscanf(line, "%u %u %llu %63s", &maj, &min, &blocks, name) != 4)
			continue; /* the header, the blank line */
		nr = loop_nr(name);
		if (nr >= 0)
			stop = each_one((int)nr, fn, arg);
	}
	fclose(f);
	return stop;
}

void loop_fill_binding(struct binding *b, int nr, const struct loop_info64 *info)
{
	b->nr = nr;
	b->ro = info->lo_flags & LO_FLAGS_READ_ONLY;
	b->autoclear = info->lo_flags & LO_FLAGS_AUTOCLEAR;
	snprintf(b->tag, sizeof(b->tag), "%.*s", LO_NAME_SIZE - 1, (const char *)info->lo_file_name);
	snprintf(b->dev, sizeof(b->dev), "/dev/loop%d", nr);
}

struct find_file {
	const struct stat *st;
	struct binding *b;
};

static bool match_file(int nr, const struct loop_info64 *info, void *arg)
{
	struct find_file *f = arg;

	if (info->lo_device != f->st->st_dev || info->lo_inode != f->st->st_ino)
		return false;
	loop_fill_binding(f->b, nr, info);
	return true;
}

int loop_find_binding(struct fv_ctx *cx, const struct stat *st, struct binding *b)
{
	struct find_file f = { st, b };
	int r;

	b->nr = -1;
	r = loop_each_binding(match_file, &f);
	if (r < 0)
		return fv_fail(cx, r, "cannot read the loop devices' status: %s", strerror(-r));
	return r ? 0 : 1;
}

int loop_unbind(struct fv_ctx *cx, const struct binding *b)
{
	_cleanup_close_ int fd = open(b->dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	int n;

	if (fd < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot open %s: %m", b->dev);
	/* by device number: bind mounts of the filesystem count too */
	n = fstat(fd, &st) < 0 ? NEG_ERRNO() : fv_mnt_count_devno(st.st_rdev);
	if (n < 0)
		return fv_fail(cx, n, "cannot read the mount table: %s", strerror(-n));
	if (n > 0)
		return fv_fail(cx, -EBUSY, "%s is still mounted (%d mount%s); not releasing it",
			       b->dev, n, n == 1 ? "" : "s");
	if (ioctl(fd, LOOP_CLR_FD, 0) < 0 && errno != ENXIO)
		return fv_fail(cx, NEG_ERRNO(), "cannot release %s: %m", b->dev);
	fv_log("released %s (%s)", b->dev, b->tag);
	return 0;
}

struct diskseq_match {
	int nr;
	char seq[32];
};

static bool match_loop(struct udev_device *d, void *arg)
{
	const struct diskseq_match *m = arg;
	const char *seq = udev_device_get_property_value(d, "DISKSEQ");
	char name[32];

	snprintf(name, sizeof(name), "loop%d", m->nr);
	if (!streq(udev_device_get_sysname(d), name))
		return false;
	/* correlate on DISKSEQ: a stale event of the previous binding must not count */
	return !m->seq[0] || (seq && streq(seq, m->seq));
}

/* Wait for the node of the new binding @b (udev's event, else the kernel's). */
static int wait_node(struct fv_ctx *cx, struct fv_devwait *w, struct binding *b)
{
	struct diskseq_match m = { .nr = b->nr };
	char path[64];

	snprintf(path, sizeof(path), "/sys/block/loop%d/diskseq", b->nr);
	if (fv_read_line(path, m.seq, sizeof(m.seq)) < 0)
		m.seq[0] = '\0';
	snprintf(path, sizeof(path), "loop%d", b->nr);
	return fv_devwait_run(cx, w, path, match_loop, &m, fv_ctx_config(cx)->device_timeout * 1000,
			      b->dev, sizeof(b->dev));
}

/* Is @lfd, the node just bound, device loop@nr's (the kernel's number of the device it opened)? */
static bool same_node(int lfd, int nr)
{
	struct loop_info64 info;

	return ioctl(lfd, LOOP_GET_STATUS64, &info) == 0 && info.lo_number == (uint32_t)nr;
}

int loop_bind(struct fv_ctx *cx, const char *rel, bool ro, int fd, const char *tag, bool held,
	      struct binding *b)
{
	const struct fv_config *cfg = fv_ctx_config(cx);
	struct fv_devwait *w = NULL;
	struct loop_config lc = { .fd = (uint32_t)fd };
	struct stat st;
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	int r, nr = -1, lfd = -1;

	if (ctl < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot open /dev/loop-control: %m");
	/*
	 * A device of no capacity holds no filesystem, and loop_each_binding()
	 * could not find it again (/proc/partitions leaves it out).
	 */
	if (fstat(fd, &st) < 0 || st.st_size < 512)
		return fv_fail(cx, -EINVAL, "image '%s' is smaller than one 512-byte sector; "
			       "nothing to attach", rel);
	/*
	 * A binding no call holds is waited for: udevd's event when udevd runs
	 * (its links made, its own probe done, before anyone mounts it);
	 * listening before the bind, no event can be missed.  Without udevd
	 * the device's node is devtmpfs's, made with the device before
	 * LOOP_CTL_GET_FREE answers: the one we bind through is it
	 * (same_node()), and a kernel event would tell nothing more.
	 */
	if (!held && fv_udev_running()) {
		r = fv_devwait_open(cx, &w);
		if (r < 0)
			return r;
	}
	snprintf((char *)lc.info.lo_file_name, LO_NAME_SIZE, "%s", tag);
	lc.info.lo_flags = LO_FLAGS_DIRECT_IO | (ro ? LO_FLAGS_READ_ONLY : 0) |
			   (held ? LO_FLAGS_AUTOCLEAR : 0);
	/* Another process may grab the free device first (EBUSY): take the next one. */
	for (int tries = 0; tries < 32; tries++) {
		if (lfd >= 0)
			close(lfd);
		nr = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (nr < 0) {
			lfd = -1;
			r = fv_fail(cx, NEG_ERRNO(), "no free loop device: %m");
			goto out;
		}
		snprintf(b->dev, sizeof(b->dev), "/dev/loop%d", nr);
		lfd = open(b->dev, O_RDWR | O_CLOEXEC);
		if (lfd < 0) {
			r = fv_fail(cx, NEG_ERRNO(), "cannot open %s: %m", b->dev);
			goto out;
		}
		/*
		 * A read-only flag someone set with BLKROSET outlives the
		 * binding it was set on (the device's, not the disk's): cleared,
		 * so that only LO_FLAGS_READ_ONLY decides.
		 */
		(void)ioctl(lfd, BLKROSET, &(int){ 0 });
		r = ioctl(lfd, LOOP_CONFIGURE, &lc) < 0 ? NEG_ERRNO() : 0;
		if (r == -EINVAL && (lc.info.lo_flags & LO_FLAGS_DIRECT_IO)) {
			/* the backing filesystem cannot do direct I/O: buffered it is */
			lc.info.lo_flags &= ~(uint32_t)LO_FLAGS_DIRECT_IO;
			r = ioctl(lfd, LOOP_CONFIGURE, &lc) < 0 ? NEG_ERRNO() : 0;
		}
		if (r != -EBUSY)
			break;
	}
	if (r < 0) {
		r = fv_fail(cx, r, "cannot bind '%s' to %s: %s", rel, b->dev, strerror(-r));
		goto out;
	}
	fv_log("bound %s/%s to %s (%s%s%s)", cfg->loop_root, rel, b->dev,
	       (const char *)lc.info.lo_file_name, ro ? ", read-only" : "",
	       held ? ", released at its last close" : "");
	b->nr = nr;
	b->ro = ro;
	b->autoclear = held;
	snprintf(b->tag, sizeof(b->tag), "%s", tag);
	if (held) {
		char self[32];

		hold(lfd); /* from here on, our exit releases it unless a mount holds it */
		lfd = -1;
		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		hold_image = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
		hold_rdev = fstat(hold_fd, &st) == 0 ? st.st_rdev : 0;
	} else if (!w && same_node(lfd, nr)) {
		fv_debug("devwait: no udevd; %s, the node bound through, is loop%d's", b->dev, nr);
	} else {
		/* udevd's event; or, without it, a node of another device at that name: the wait */
		r = w ? 0 : fv_devwait_open(cx, &w);
		if (r == 0)
			r = wait_node(cx, w, b);
	}
out:
	if (lfd >= 0)
		close(lfd);
	fv_devwait_free(w);
	return r;
}

int loop_probe_fd(struct fv_ctx *cx, const char *dev)
{
	struct stat st;

	(void)cx;
	if (hold_image < 0 || !hold_rdev || stat(dev, &st) < 0 || !S_ISBLK(st.st_mode) ||
	    st.st_rdev != hold_rdev)
		return -1;
	return hold_image;
}

/* SET_STATUS64 on the open device @fd of @b: tag @tag, @flags added (a queue freeze). */
static int restatus(struct fv_ctx *cx, int fd, struct binding *b, const char *tag,
		    uint32_t flags)
{
	struct loop_info64 info;

	if (ioctl(fd, LOOP_GET_STATUS64, &info) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot read the status of %s: %m", b->dev);
	memset(info.lo_file_name, 0, sizeof(info.lo_file_name));
	snprintf((char *)info.lo_file_name, LO_NAME_SIZE, "%s", tag);
	info.lo_flags |= flags;
	if (ioctl(fd, LOOP_SET_STATUS64, &info) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot tag %s: %m", b->dev);
	if (!streq(b->tag, tag))
		fv_log("%s: %s is now %s", b->dev, b->tag, tag);
	snprintf(b->tag, sizeof(b->tag), "%s", tag);
	b->autoclear = b->autoclear || (flags & LO_FLAGS_AUTOCLEAR);
	return 0;
}

int loop_set_tag(struct fv_ctx *cx, struct binding *b, const char *tag)
{
	_cleanup_close_ int fd = open(b->dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot read the status of %s: %m", b->dev);
	return restatus(cx, fd, b, tag, 0);
}

int loop_claim_unused(struct fv_ctx *cx, struct binding *b, const char *tag)
{
	int fd = open(b->dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK), r;
	struct loop_info64 info;

	if (fd < 0)
		return errno == ENXIO ? 1 : fv_fail(cx, NEG_ERRNO(), "cannot open %s: %m", b->dev);
	/*
	 * LOOP_CLR_FD from the only opener puts the device in rundown at once
	 * (no new opener gets in) and releases it at our close; with other
	 * openers it only sets LO_FLAGS_AUTOCLEAR, and the device stays bound.
	 */
	if (ioctl(fd, LOOP_CLR_FD, 0) < 0 && errno != ENXIO) {
		r = fv_fail(cx, NEG_ERRNO(), "cannot release %s: %m", b->dev);
		close(fd);
		return r;
	}
	if (ioctl(fd, LOOP_GET_STATUS64, &info) < 0 && errno == ENXIO) {
		close(fd); /* the release itself */
		fv_log("released %s (%s): to be bound again, claimed", b->dev, b->tag);
		return 1;
	}
	/* someone else has it open: it stays, claimed in place, and held until mounted */
	hold(fd);
	r = restatus(cx, fd, b, tag, LO_FLAGS_AUTOCLEAR);
	if (r == 0)
		fv_log("%s is open elsewhere: claimed in place", b->dev);
	return r < 0 ? r : 0;
}

int loop_autoclear(struct fv_ctx *cx, const struct binding *b)
{
	_cleanup_close_ int fd = -1;
	struct binding c = *b;

	if (b->autoclear)
		return 0; /* set at bind time: nothing to do here */
	fd = open(b->dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return NEG_ERRNO();
	/* a binding of an older version: the queue freeze, once */
	return restatus(cx, fd, &c, b->tag, LO_FLAGS_AUTOCLEAR);
}
