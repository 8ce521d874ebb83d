/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block class's NodeGetVolumeStats (fv/blkvol.h, fv_blkvol_stats()): the
 * usage of a volume's mount or a raw block volume's size, and the volume's
 * condition (docs/design.md, "Volume health").  It looks only: no lock, no
 * change; every probe under a deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "blkvol-internal.h"
#include "fv/blkvol.h"
#include "fv/exec.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/state.h"
#include "fv/util.h"

unsigned int fv_probe_timeout(const struct fv_ctx *cx)
{
	unsigned int t = fv_ctx_config(cx)->mount_timeout / 4;

	return t < 2 ? 2 : t > 15 ? 15 : t;
}

#define PROBE_BYTES 4096

/*
 * In the child: the device's first block read past the page cache, so the
 * read reaches the backing (loop: the image file; iscsi: the target).  The
 * node is opened O_PATH and checked to be the device first: nothing else is
 * ever opened for I/O.  Only system calls: the child of a threaded
 * flexvol-csi must take no lock another thread may have held at the fork.
 * Exit status: 0, or the errno.
 */
struct read_probe {
	char node[PATH_MAX];
	dev_t devno;
};

static int child_read(void *arg)
{
	static char buf[PROBE_BYTES] __attribute__((aligned(PROBE_BYTES)));
	const struct read_probe *p = arg;
	char self[32];
	struct stat st;
	int pfd = open(p->node, O_PATH | O_NOFOLLOW | O_CLOEXEC), fd;

	if (pfd < 0 || fstat(pfd, &st) < 0)
		return errno;
	if (!S_ISBLK(st.st_mode) || st.st_rdev != p->devno)
		return ENODEV;
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	fd = open(self, O_RDONLY | O_DIRECT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (pread(fd, buf, sizeof(buf), 0) < 0)
		return errno;
	return 0;
}

/*
 * Does device @devno answer a read within the probe deadline?  0 yes, 1 no
 * (why in @msg).  A read stuck in the kernel leaves its child behind
 * (fv_fork_call()), never this call.
 */
static int read_probe(struct fv_ctx *cx, dev_t devno, char *msg, size_t len)
{
	struct fv_exec_opts o = fv_exec_opts_of(cx);
	struct fv_saved_message saved;
	struct read_probe p = { .devno = devno };
	char link[64], target[PATH_MAX];
	ssize_t n;
	int r;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(devno), minor(devno));
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0) {
		snprintf(msg, len, "device %u:%u is gone", major(devno), minor(devno));
		return 1;
	}
	target[n] = '\0';
	snprintf(p.node, sizeof(p.node), "/dev/%s", fv_path_last(target));
	for (char *c = p.node + 5; *c; c++)
		if (*c == '!')
			*c = '/';
	o.timeout_s = fv_probe_timeout(cx);
	o.flags |= FV_EXEC_QUIET_OK; /* a look, every minute per volume: only its failures logged */
	fv_ctx_save_message(cx, &saved);
	r = fv_fork_call(cx, "read probe", child_read, &p, &o, NULL);
	fv_ctx_restore_message(cx, &saved, true);
	if (r == 0)
		return 0;
	if (r == -FV_ERR_TIMEOUT)
		snprintf(msg, len, "a read of %s did not finish within %u s", p.node, o.timeout_s);
	else
		snprintf(msg, len, "reading %s fails: %s", p.node, strerror(r > 0 ? r : -r));
	return 1;
}

/* The condition of the volume @name on device @devno into @ret. */
static void condition(struct fv_ctx *cx, const char *name, dev_t devno, struct fv_volstats *ret)
{
	const struct fv_blkvol_ops *ops = blkvol_ops(cx);
	json_object *rec = NULL;
	int r = 0;

	if (fv_state_read(cx, name, &rec) != 0)
		rec = NULL;
	if (ops->health)
		r = ops->health(cx, devno, rec, ret->message, sizeof(ret->message));
	json_object_put(rec);
	if (r < 0) {
		/* cannot tell is no verdict: the read below still asks the device */
		fv_log("health of '%s': %s", name, cx->message[0] ? cx->message : strerror(-r));
		fv_ctx_reset_message(cx);
		r = 0;
	}
	if (r == 0)
		r = read_probe(cx, devno, ret->message, sizeof(ret->message));
	ret->abnormal = r == 1;
	if (!ret->abnormal)
		ret->message[0] = '\0';
	else
		fv_log("volume '%s' is not well: %s", name, ret->message);
}

/* The figures of the filesystem mounted at @path (ours: a local mount, looked into). */
static int fs_usage(struct fv_ctx *cx, const char *path, struct fv_volstats *ret)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	_cleanup_close_ int fd = -1;
	struct statvfs sv;

	if (fv_dir_open_quiet(path, &d) == 0)
		fd = openat(d.parent, d.name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstatvfs(fd, &sv) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot read the filesystem at '%s': %m", path);
	ret->bytes_total = sv.f_blocks * sv.f_frsize;
	ret->bytes_avail = sv.f_bavail * sv.f_frsize;
	ret->bytes_used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize;
	ret->inodes_total = sv.f_files;
	ret->inodes_avail = sv.f_favail;
	ret->inodes_used = sv.f_files - sv.f_ffree;
	ret->has_usage = true;
	return 0;
}

/* A raw block volume's size, from sysfs (512-byte sectors): no open of the device. */
static int block_size(struct fv_ctx *cx, dev_t devno, struct fv_volstats *ret)
{
	char p[64], v[32];
	uint64_t sectors;

	snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/size", major(devno), minor(devno));
	if (fv_read_line(p, v, sizeof(v)) < 0 || fv_parse_u64(v, &sectors) < 0)
		return fv_fail(cx, -ENXIO, "cannot read the size of device %u:%u", major(devno),
			       minor(devno));
	ret->block = true;
	ret->bytes_total = sectors * 512;
	ret->has_usage = true;
	return 0;
}

int fv_blkvol_stats(struct fv_ctx *cx, const char *name, const char *path,
		    struct fv_volstats *ret)
{
	char node[PATH_MAX];
	struct fv_mntinfo mi;
	dev_t devno;
	int r = fv_mnt_find(path, &mi);

	/* a stage directory that is no mount point: a raw block stage's node in it */
	if (r == 1 && (size_t)snprintf(node, sizeof(node), "%s/" BLKVOL_NODE_FILE, path) <
			      sizeof(node) &&
	    fv_mnt_find(node, &mi) == 0) {
		path = node;
		r = 0;
	}
	if (r < 0)
		return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
	if (r == 1)
		return fv_fail(cx, -ENOENT, "'%s' holds no mount of volume '%s'", path, name);
	r = fv_blkvol_owns(cx, name, path, &mi);
	if (r < 0)
		return r;
	if (r == 0)
		return fv_fail(cx, -ENOENT, "'%s' holds %s (%s), not a mount of volume '%s'", path,
			       mi.source, mi.fstype, name);
	if (fv_mnt_node_devno(&mi, &devno) == 0)
		r = block_size(cx, devno, ret);
	else
		r = fs_usage(cx, path, ret), devno = mi.devno;
	if (r < 0)
		return r;
	condition(cx, name, devno, ret);
	return 0;
}
