/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The op layer's boundary for the CSI service fuzz targets (op-stub.h,
 * tests/fuzz/README.md).  csi/'s service files are linked as they are; what
 * they call below them is defined here instead of src/ and lib/ (whose
 * objects stay out of the link), and answers from the fuzz input's script:
 * each call takes the script's next byte (0 when it is spent) and answers
 * success or one of the error codes its real counterpart gives, and the
 * figures, owners and names it reports likewise.  Nothing here mounts,
 * makes a file or runs a helper: a directory the handlers get is a
 * descriptor of a directory removed at start (empty for good, nothing can
 * be made in it), a file or lock one of /dev/null.
 *
 * It also checks what the services hand down, and aborts (a finding) when:
 * the runner gets an op the driver lacks, a call without its arguments, a
 * volume ID that is none of ours, or a call before the node configuration
 * was loaded; a driver's slot is called past the runner; a descriptor
 * given is not open; a lock is released that is not held, under another
 * name, or kept past the call (stub_end()).
 *
 * The few pure helpers the services use from src/ and lib/ objects that
 * also touch the node (fv_hash64, fv_image_name_ok, fv_fs_supported...)
 * are copied here as they are there.  src/opts.c (the options parser),
 * src/ctx.c (the messages) and src/version.c are linked as they are: they
 * touch nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "csi.h"
#include "op-stub.h"
#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/config.h"
#include "fv/copy.h"
#include "fv/ctx.h"
#include "fv/driver.h"
#include "fv/image.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/op.h"
#include "fv/ownerdir.h"
#include "fv/util.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define TiB (1ULL << 40)

void stub_die(const char *who, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

#define die(...) stub_die("op-stub", __VA_ARGS__)

/* --- the script ------------------------------------------------------------------------------ */

static const uint8_t *script;
static size_t script_n, script_at;

static unsigned int draw(void)
{
	return script_at < script_n ? script[script_at++] : 0;
}

static unsigned int pick(unsigned int n)
{
	return draw() % n;
}

/* errno values of the node's system calls (lib/, the runner's own checks) */
static const int sys_errs[] = {
	-EINVAL, -ENOENT,    -EEXIST, -EBUSY,	-EPERM,	  -EACCES,	 -EAGAIN,      -EIO,
	-ENOSPC, -EDQUOT,    -EFBIG,  -ENXIO,	-ENOTDIR, -ELOOP,	 -ENAMETOOLONG, -ENOTEMPTY,
	-EBADMSG, -EOPNOTSUPP, -ETIMEDOUT, -EROFS, -ENOMEM, -EMEDIUMTYPE, -ESTALE,	-EXDEV,
	-EMFILE, -ENODATA,
};
/* the op layer's own */
static const int op_errs[] = { -FV_ERR_BADOPT, -FV_ERR_TIMEOUT, -FV_ERR_HELPER, -FV_ERR_NOTBLANK,
			       -FV_ERR_CONFLICT };
/* lib/ownerdir.c's refusals */
static const int dir_errs[] = { -FV_OWNERDIR_E_UNOWNED, -FV_OWNERDIR_E_OWNED, -FV_OWNERDIR_E_NESTED,
				-FV_OWNERDIR_E_HOLDS };

enum { E_SYS = 0, E_OP = 1, E_DIR = 2 };

/* 0 (the script's 0, and a quarter of its other bytes) or an error of @kind. */
static int result(int kind)
{
	unsigned int b = draw(), n = ARRAY_SIZE(sys_errs), i;

	if (b == 0 || b >= 0xc0)
		return 0;
	n += kind == E_OP ? ARRAY_SIZE(op_errs) : kind == E_DIR ? ARRAY_SIZE(dir_errs) : 0;
	i = (b - 1) % n;
	if (i < ARRAY_SIZE(sys_errs))
		return sys_errs[i];
	i -= ARRAY_SIZE(sys_errs);
	return kind == E_OP ? op_errs[i] : dir_errs[i];
}

static const uint64_t sizes[] = {
	0, 1, 511, 512, 4096, MiB - 1, MiB, MiB + 1, 64 * MiB, GiB, GiB + 1,
	16 * TiB - MiB, 1ULL << 50, (1ULL << 50) + 1, INT64_MAX,
};

/* A file's size: @asked (the script's 0), or one of the sizes that test a bound. */
static uint64_t size_like(uint64_t asked)
{
	unsigned int k = draw();

	return k == 0 ? asked : sizes[(k - 1) % ARRAY_SIZE(sizes)];
}

/* A filesystem's bytes: no more than 2^56 (a loop root of 64 PiB). */
static uint64_t space_like(void)
{
	uint64_t v = size_like(0);

	return v > (1ULL << 56) ? 1ULL << 56 : v;
}

static char long_name[256]; /* 255 bytes: the longest name an owner record keeps */

/* The last component of @rel. */
static const char *last_of(const char *rel)
{
	const char *s = strrchr(rel, '/');

	return s ? s + 1 : rel;
}

/* --- descriptors ----------------------------------------------------------------------------- */

static int dead_dir = -1; /* a directory removed at start: empty, nothing can be made in it */
static int null_fd = -1;  /* /dev/null: a lock's, a regular file's */

static int new_fd(int from)
{
	int fd = fcntl(from, F_DUPFD_CLOEXEC, 3);

	if (fd < 0)
		die("dup: %s", strerror(errno));
	return fd;
}

static void check_fd(int fd, const char *what)
{
	if (fd < 0 || fcntl(fd, F_GETFD) < 0)
		die("%s: descriptor %d is not open", what, fd);
}

void stub_init(void)
{
	char dir[] = "/tmp/fuzz-csi-XXXXXX";

	if (!mkdtemp(dir))
		die("mkdtemp: %s", strerror(errno));
	dead_dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dead_dir < 0 || rmdir(dir) < 0)
		die("%s: %s", dir, strerror(errno));
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd < 0)
		die("/dev/null: %s", strerror(errno));
	memcpy(long_name, "pvc-", 4);
	memset(long_name + 4, 'a', sizeof(long_name) - 5);
}

/* --- locks ----------------------------------------------------------------------------------- */

static struct held {
	int fd;
	char name[PATH_MAX];
} held[8];
static size_t nheld;

static struct fv_owner made_rec; /* what the last fv_ownerdir_make() of the call recorded */
static char made_rel[PATH_MAX];

void stub_begin(const uint8_t *s, size_t n)
{
	script = s;
	script_n = n;
	script_at = 0;
	made_rel[0] = '\0';
	memset(&made_rec, 0, sizeof(made_rec));
}

void stub_end(void)
{
	if (nheld)
		die("lock '%s' is still held after the call", held[0].name);
}

static void check_cx(const struct fv_ctx *cx, const char *what)
{
	if (!cx->config_ok || cx->drv != csi_plugin.drv)
		die("%s without the node configuration loaded (csi_open())", what);
}

int fv_lock(struct fv_ctx *cx, const char *name)
{
	int r;

	check_cx(cx, "fv_lock");
	if (!*name)
		die("a lock without a name");
	r = result(E_SYS);
	if (r == -EINVAL)
		r = -FV_ERR_TIMEOUT;
	if (r < 0)
		return fv_fail(cx, r, "lock %s: %s", name, r == -FV_ERR_TIMEOUT ? "timed out after "
			       "10 s" : strerror(-r));
	if (nheld == ARRAY_SIZE(held))
		die("more than %zu locks at once", ARRAY_SIZE(held));
	held[nheld].fd = new_fd(null_fd);
	snprintf(held[nheld].name, sizeof(held[nheld].name), "%s", name);
	return held[nheld++].fd;
}

/* Release the lock @fd (taken as @name, when not NULL). */
static void release(int fd, const char *name)
{
	for (size_t i = 0; i < nheld; i++) {
		if (held[i].fd != fd)
			continue;
		if (name && !streq(name, held[i].name))
			die("lock '%s' released as '%s'", held[i].name, name);
		close(fd);
		held[i] = held[--nheld];
		return;
	}
	die("fv_unlock(%d): no lock is held on that descriptor", fd);
}

void fv_unlock(int fd)
{
	if (fd >= 0)
		release(fd, NULL);
}

void fv_unlock_remove(struct fv_ctx *cx, const char *name, int fd)
{
	if (fd >= 0)
		release(fd, name);
}

/* as src/lock.c's */
void fv_lock_volume_name(const struct fv_ctx *cx, const char *volume, char *buf, size_t len)
{
	snprintf(buf, len, "%s-vol-%s", cx->drv->name, volume);
}

/* --- the log, the configuration, pure helpers ------------------------------------------------ */

void fv_log(const char *fmt, ...)
{
	char line[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap); /* every argument read, none kept */
	va_end(ap);
}

int fv_config_load(struct fv_config *cfg, const char *driver, char *err, size_t errlen)
{
	static const char *const nodes[] = { "node-1", "ip-10-0-0-1.ec2.internal",
					     ("n23456789-123456789-123456789-123456789-123456789-"
					      "123456789-12") };
	int r = result(E_SYS);

	if (!streq(driver, csi_plugin.drv->name))
		die("configuration of driver %s loaded for %s", driver, csi_plugin.drv->name);
	if (r == -EINVAL)
		r = -FV_ERR_BADOPT;
	if (r < 0) {
		snprintf(err, errlen, "/etc/flexvol/flexvol.conf:3: unknown key 'lop_root'");
		return r;
	}
	memset(cfg, 0, sizeof(*cfg));
	switch (pick(4)) {
	case 2: /* a loop root that is not there (a controller without one) */
		snprintf(cfg->loop_root, sizeof(cfg->loop_root), "/nonexistent/flexvol-fuzz");
		break;
	case 3: /* not a directory */
		snprintf(cfg->loop_root, sizeof(cfg->loop_root), "/proc/self/fd/%d", null_fd);
		break;
	default:
		snprintf(cfg->loop_root, sizeof(cfg->loop_root), "/proc/self/fd/%d", dead_dir);
	}
	snprintf(cfg->state_dir, sizeof(cfg->state_dir), "/var/lib/flexvol/%s", driver);
	snprintf(cfg->run_dir, sizeof(cfg->run_dir), "/run/flexvol/%s", driver);
	snprintf(cfg->log_file, sizeof(cfg->log_file), "/var/log/flexvol/%s.log", driver);
	snprintf(cfg->node_name, sizeof(cfg->node_name), "%s", nodes[pick(ARRAY_SIZE(nodes))]);
	snprintf(cfg->helper_path, sizeof(cfg->helper_path), "/usr/sbin:/usr/bin:/sbin:/bin");
	snprintf(cfg->attach_mode, sizeof(cfg->attach_mode), pick(2) ? "node" : "controller");
	cfg->lock_timeout = 10;
	cfg->helper_timeout = 120;
	cfg->mount_timeout = 60;
	cfg->device_timeout = 30;
	return 0;
}

/* as src/util.c's */
uint64_t fv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t fv_hash64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

int fv_parse_u64(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	if (!s || !*s || (s[0] == '0' && s[1]))
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*ret = v;
	return 0;
}

/* as src/blkutil.c's */
bool fv_fs_supported(const char *fstype)
{
	static const char *const fs_known[] = { "ext2", "ext3", "ext4", "xfs" };

	for (size_t i = 0; i < ARRAY_SIZE(fs_known); i++)
		if (fstype && streq(fstype, fs_known[i]))
			return true;
	return false;
}

/* as lib/image.c's */
bool fv_image_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n < 9 || n >= FV_IMAGE_NAME_MAX || strncmp(name, "pvc-", 4) ||
	    strcmp(name + n - 4, ".img"))
		return false;
	for (size_t i = 4; i < n - 4; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '-'))
			return false;
	return true;
}

/* as src/op.c's */
const char *fv_op_errstr(int r)
{
	switch (-r) {
	case FV_ERR_BADOPT:
		return "invalid options";
	case FV_ERR_TIMEOUT:
		return "timed out";
	case FV_ERR_HELPER:
		return "helper program failed";
	case FV_ERR_NOTBLANK:
		return "device holds unexpected data";
	case FV_ERR_CONFLICT:
		return "conflicting state on the node";
	default:
		return strerror(r < 0 && r > -4096 ? -r : EIO);
	}
}

/* --- the op runner --------------------------------------------------------------------------- */

static const char *const op_names[FV_OP_N] = {
	[FV_OP_ATTACH] = "attach",	       [FV_OP_ISATTACHED] = "isattached",
	[FV_OP_DETACH] = "detach",	       [FV_OP_WAITFORATTACH] = "waitforattach",
	[FV_OP_MOUNTDEVICE] = "mountdevice",   [FV_OP_UNMOUNTDEVICE] = "unmountdevice",
	[FV_OP_MOUNT] = "mount",	       [FV_OP_UNMOUNT] = "unmount",
	[FV_OP_PUBLISH] = "publish",	       [FV_OP_UNPUBLISH] = "unpublish",
	[FV_OP_EXPANDFS] = "expandfs",	       [FV_OP_GC] = "gc",
};

bool fv_op_served(const struct fv_driver *d, enum fv_op op)
{
	switch (op) {
	case FV_OP_ATTACH:
		return d->attach;
	case FV_OP_ISATTACHED:
		return d->isattached;
	case FV_OP_DETACH:
		return d->detach;
	case FV_OP_WAITFORATTACH:
		return d->waitforattach;
	case FV_OP_MOUNTDEVICE:
		return d->mountdevice;
	case FV_OP_UNMOUNTDEVICE:
		return d->unmountdevice;
	case FV_OP_MOUNT:
		return d->mount;
	case FV_OP_UNMOUNT:
		return d->unmount;
	case FV_OP_PUBLISH:
		return d->publish;
	case FV_OP_UNPUBLISH:
		return d->unpublish;
	case FV_OP_EXPANDFS:
		return d->expandfs;
	case FV_OP_GC:
		return d->gc;
	case FV_OP_N:
		break;
	}
	return false;
}

/* A volume the op layer is asked to act on: one of ours by the services' own rule. */
static void check_volume(const char *name, const char *what)
{
	if (!name || !csi_volume_id_ok(name))
		die("%s: volume '%s' is no volume ID of ours", what, name ? name : "(null)");
}

/* Every option and secret the op layer would read: strings that are there. */
static void check_opts(const struct fv_opts *o, const char *what)
{
	if (!o)
		die("%s without options", what);
	for (size_t i = 0; i < o->n; i++)
		if (!o->pairs[i].key || strlen(o->pairs[i].key) > (1u << 20) ||
		    (o->pairs[i].value && strlen(o->pairs[i].value) > (1u << 20)))
			die("%s: option %zu is no string", what, i);
	for (size_t i = 0; i < o->nsecrets; i++)
		if (!o->secrets[i].key || !o->secrets[i].value)
			die("%s: secret %zu is no string", what, i);
}

static void check_dir(const struct fv_op_call *c)
{
	if (!c->dir || !*c->dir)
		die("%s without a directory", op_names[c->op]);
}

/* The message the runner (or the driver) leaves with error @r of @c. */
static int op_fail(struct fv_ctx *cx, const struct fv_op_call *c, int r)
{
	switch (pick(3)) {
	case 0:
		return fv_fail(cx, r, "%s failed: %s", op_names[c->op], fv_op_errstr(r));
	case 1:
		return fv_fail(cx, r, "'%s': %s", c->dir ? c->dir : c->name ? c->name : "-",
			       fv_op_errstr(r));
	default:
		fv_fail(cx, r, "mount of '%s' failed", c->dir ? c->dir : "-");
		fv_ctx_add_detail(cx, "mount.nfs: Connection timed out");
		return r;
	}
}

int fv_op_run(struct fv_ctx *cx, struct fv_op_call *c)
{
	const char *op;
	int r;

	check_cx(cx, "fv_op_run");
	if (c->op >= FV_OP_N)
		die("op %d", (int)c->op);
	op = op_names[c->op];
	if (!fv_op_served(cx->drv, c->op))
		die("%s asked of %s, which has none (the profile and the service disagree)", op,
		    cx->drv->name);
	if (c->ret_device)
		die("%s: ret_device set before the call", op);
	switch (c->op) {
	case FV_OP_MOUNTDEVICE:
		check_dir(c);
		check_volume(last_of(c->dir), op);
		check_opts(c->opts, op);
		if (!c->device)
			die("%s without a device argument", op);
		break;
	case FV_OP_UNMOUNTDEVICE:
		check_dir(c);
		check_volume(last_of(c->dir), op);
		break;
	case FV_OP_PUBLISH:
		check_dir(c);
		check_opts(c->opts, op);
		if (!c->staged != !csi_plugin.stages)
			die("%s: a staged path %s, the profile %s", op,
			    c->staged ? "given" : "missing",
			    csi_plugin.stages ? "stages" : "does not stage");
		if (c->staged)
			check_volume(last_of(c->staged), op);
		break;
	case FV_OP_UNPUBLISH:
		check_dir(c);
		check_volume(c->name, op);
		break;
	case FV_OP_EXPANDFS:
		check_dir(c);
		check_volume(c->name, op);
		if (!c->device)
			die("%s without a device argument", op);
		break;
	case FV_OP_ATTACH:
	case FV_OP_ISATTACHED:
		check_opts(c->opts, op);
		if (!c->node)
			die("%s without a node", op);
		break;
	case FV_OP_DETACH:
		check_volume(c->name, op);
		if (!c->node)
			die("%s without a node", op);
		break;
	default:
		die("%s is no op of a CSI call", op);
	}
	if (c->dir) {
		snprintf(c->norm, sizeof(c->norm), "%s", c->dir);
		c->dir = c->norm;
	}
	if (c->node)
		c->remote = !fv_ctx_node_is_local(cx, c->node);
	r = result(E_OP);
	if (r < 0)
		return op_fail(cx, c, r);
	if (c->op == FV_OP_ATTACH) {
		c->ret_device = strdup(pick(2) ? "/dev/disk/by-path/ip-192.0.2.7:3260-iscsi-"
						 "iqn.2003-01.org.linux-iscsi.t:sn.1-lun-1" :
						 "/dev/loop3");
		if (!c->ret_device)
			die("out of memory");
	} else if (c->op == FV_OP_ISATTACHED) {
		c->has_attached = true;
		c->attached = pick(2);
	}
	return 0;
}

int fv_op_owns(struct fv_ctx *cx, const char *name, const char *path)
{
	int r;

	check_cx(cx, "fv_op_owns");
	check_volume(name, "fv_op_owns");
	if (!path)
		die("fv_op_owns without a path");
	r = result(E_OP);
	if (r < 0)
		return r == -ENOENT ? r : fv_fail(cx, r, "'%s': %s", path, fv_op_errstr(r));
	if (pick(2))
		return 1;
	fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds tmpfs (tmpfs), not a mount of volume '%s': left "
		"alone", path, name);
	return 0;
}

int fv_op_stats(struct fv_ctx *cx, const char *name, const char *path, struct fv_volstats *ret)
{
	static const char *const why[] = {
		"image 'pvc-1.img' was deleted while /dev/loop3 is bound to it",
		"the NFS server of 192.0.2.10:/export/k8s did not answer within 15 s",
		("the iSCSI session 3 to iqn.2003-01.org.linux-iscsi.t:sn.1 at 192.0.2.7:3260 is "
		 "FAILED"),
		"",
	};
	int r;

	memset(ret, 0, sizeof(*ret));
	check_cx(cx, "fv_op_stats");
	check_volume(name, "fv_op_stats");
	if (!path || !*path)
		die("fv_op_stats without a path");
	r = result(E_OP);
	if (r < 0)
		return pick(2) ? r : fv_fail(cx, r, "'%s' holds tmpfs, not a mount of volume '%s'",
					     path, name);
	ret->block = pick(2);
	ret->has_usage = pick(4) != 0;
	if (ret->has_usage) {
		ret->bytes_total = space_like();
		ret->bytes_avail = space_like();
		ret->bytes_used = space_like();
		ret->inodes_total = space_like();
		ret->inodes_avail = space_like();
		ret->inodes_used = space_like();
	}
	ret->abnormal = pick(2);
	if (ret->abnormal)
		snprintf(ret->message, sizeof(ret->message), "%s", why[pick(ARRAY_SIZE(why))]);
	return 0;
}

/* --- lib/: loop images ----------------------------------------------------------------------- */

/* An owner record's text for @file ("<id>.img", "<id>.snap"): its ID, none, another's. */
static void owner_for(const char *file, char *buf, size_t len)
{
	const char *dot = strrchr(file, '.');

	switch (pick(4)) {
	case 0:
		snprintf(buf, len, "%.*s", (int)(dot ? dot - file : (ptrdiff_t)strlen(file)), file);
		break;
	case 1:
		buf[0] = '\0';
		break;
	case 2:
		snprintf(buf, len, "pvc-someone-else");
		break;
	default:
		snprintf(buf, len, "%s", long_name);
	}
}

static void check_name(const char *s, const char *what)
{
	if (!s || !*s)
		die("%s without a name", what);
}

static int lib_fail(int r, char *msg, size_t len, const char *what, const char *name)
{
	snprintf(msg, len, "%s %s: %s", what, name, fv_op_errstr(r));
	return r;
}

int fv_open_regular_beneath(int rootfd, const char *rel, int flags, struct stat *st)
{
	int r;

	check_fd(rootfd, "fv_open_regular_beneath");
	check_name(rel, "fv_open_regular_beneath");
	memset(st, 0, sizeof(*st));
	r = result(E_SYS);
	if (r == -EMEDIUMTYPE)
		st->st_mode = S_IFIFO | 0644;
	if (r < 0)
		return r;
	st->st_mode = S_IFREG | 0600;
	st->st_size = (off_t)size_like(0);
	return new_fd(null_fd);
}

int fv_image_info(int rootfd, const char *file, struct fv_image_info *ret)
{
	static const int64_t when[] = { 1765000000, 0, -1, INT64_MAX };
	int r;

	check_fd(rootfd, "fv_image_info");
	check_name(file, "fv_image_info");
	memset(ret, 0, sizeof(*ret));
	r = result(E_SYS);
	if (r < 0)
		return r;
	ret->size = size_like(0);
	ret->created = when[pick(ARRAY_SIZE(when))];
	owner_for(file, ret->owner, sizeof(ret->owner));
	snprintf(ret->name, sizeof(ret->name), "%s", pick(2) ? "pvc-name-a" : "");
	snprintf(ret->source, sizeof(ret->source), "%s", pick(3) == 2 ? long_name : "pvc-1");
	return 0;
}

int fv_image_ensure_named(int rootfd, const char *img, const char *owner, const char *name,
			  uint64_t size, bool prealloc, uint64_t *ret_size, char *msg, size_t len)
{
	int r;

	check_fd(rootfd, "fv_image_ensure_named");
	check_name(img, "fv_image_ensure_named");
	check_name(owner, "fv_image_ensure_named");
	msg[0] = '\0';
	r = result(E_SYS);
	if (r < 0)
		return lib_fail(r, msg, len, "image", img);
	if (ret_size)
		*ret_size = size_like(size);
	if (pick(2))
		snprintf(msg, len, "image %s made: %llu bytes, %s", img, (unsigned long long)size,
			 prealloc ? "allocated" : "sparse");
	return 0;
}

int fv_image_max_size(int rootfd, uint64_t limit, uint64_t *ret)
{
	uint64_t v;
	int r;

	check_fd(rootfd, "fv_image_max_size");
	r = result(E_SYS);
	if (r < 0)
		return r;
	v = size_like(limit);
	*ret = v > limit ? limit : v / MiB * MiB;
	return 0;
}

int fv_image_remove(int rootfd, const char *img, const char *owner, char *msg, size_t len)
{
	int r;

	check_fd(rootfd, "fv_image_remove");
	check_name(img, "fv_image_remove");
	check_name(owner, "fv_image_remove");
	msg[0] = '\0';
	r = result(E_SYS);
	if (r < 0)
		return lib_fail(r, msg, len, "image", img);
	if (pick(2))
		snprintf(msg, len, "image %s removed", img);
	return 0;
}

int fv_image_grow(int rootfd, const char *img, const char *owner, uint64_t size, char *msg,
		  size_t len)
{
	int r;

	check_fd(rootfd, "fv_image_grow");
	check_name(img, "fv_image_grow");
	check_name(owner, "fv_image_grow");
	msg[0] = '\0';
	r = result(E_SYS);
	if (r < 0)
		return lib_fail(r, msg, len, "image", img);
	if (pick(2))
		snprintf(msg, len, "image %s grown to %llu bytes", img, (unsigned long long)size);
	return 0;
}

int fv_image_copy(int rootfd, const char *src, const char *dst, const char *owner,
		  const char *name, const char *source, uint64_t min_size, unsigned int freeze_ms,
		  uint64_t *ret_size, char *msg, size_t len)
{
	int r;

	check_fd(rootfd, "fv_image_copy");
	check_name(src, "fv_image_copy");
	check_name(dst, "fv_image_copy");
	check_name(owner, "fv_image_copy");
	check_name(source, "fv_image_copy");
	msg[0] = '\0';
	r = result(E_SYS);
	if (r < 0)
		return lib_fail(r, msg, len, "copy of", src);
	if (ret_size)
		*ret_size = size_like(min_size);
	if (pick(2))
		snprintf(msg, len, "%s copied to %s (reflink; frozen for 12 ms)", src, dst);
	return 0;
}

int fv_snapshot_each(int rootfd, int (*fn)(const char *file, const struct fv_image_info *i,
					   void *arg), void *arg)
{
	unsigned int n;
	int r;

	check_fd(rootfd, "fv_snapshot_each");
	r = result(E_SYS);
	if (r < 0)
		return r;
	n = pick(7);
	for (unsigned int i = 0; i < n; i++) {
		struct fv_image_info info = { .created = 1765000000 + i };
		char file[FV_IMAGE_NAME_MAX + 8];

		if (pick(4) == 3) /* the longest ID csi_snapshot_id_ok() takes */
			snprintf(file, sizeof(file), "%.*s%02u.snap", 61, long_name + 4, i);
		else
			snprintf(file, sizeof(file), "snapshot-%02u.snap", i);
		info.size = size_like(0);
		owner_for(file, info.owner, sizeof(info.owner));
		snprintf(info.source, sizeof(info.source), "pvc-%u", pick(3));
		r = fn(file, &info, arg);
		if (r)
			return r;
	}
	return 0;
}

int fv_image_space(int rootfd, struct fv_image_space *ret)
{
	int r;

	check_fd(rootfd, "fv_image_space");
	r = result(E_SYS);
	if (r < 0)
		return r;
	ret->free = space_like();
	ret->unbacked = space_like();
	ret->images = pick(8);
	return 0;
}

/* --- lib/: owner-recorded directories, tree copies ------------------------------------------- */

static void other_owner(struct fv_owner *o, const char *rel)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->claim, sizeof(o->claim), "pvc-someone-else");
	snprintf(o->pv, sizeof(o->pv), "pvc-name-b");
	snprintf(o->name, sizeof(o->name), "%s", last_of(rel));
}

int fv_ownerdir_root_open(const char *root)
{
	int r;

	if (!root || !csi_plugin.root || !streq(root, csi_plugin.root))
		die("fv_ownerdir_root_open(%s): not --root", root ? root : "(null)");
	r = result(E_SYS);
	return r < 0 ? r : new_fd(dead_dir);
}

int fv_ownerdir_open(int rootfd, const char *rel, int flags)
{
	int r;

	check_fd(rootfd, "fv_ownerdir_open");
	check_name(rel, "fv_ownerdir_open");
	r = result(E_SYS);
	return r < 0 ? r : new_fd(dead_dir);
}

int fv_ownerdir_owner(int rootfd, const char *rel, struct fv_owner *ret)
{
	int r;

	check_fd(rootfd, "fv_ownerdir_owner");
	check_name(rel, "fv_ownerdir_owner");
	memset(ret, 0, sizeof(*ret));
	r = result(E_SYS);
	if (r < 0)
		return r;
	/* the record made in this call, mostly */
	if (streq(made_rel, rel) && pick(4)) {
		*ret = made_rec;
		return 0;
	}
	switch (pick(3)) {
	case 0:
		snprintf(ret->claim, sizeof(ret->claim), "%s", last_of(rel));
		break;
	case 1:
		snprintf(ret->claim, sizeof(ret->claim), "pvc-someone-else");
		break;
	default:
		snprintf(ret->claim, sizeof(ret->claim), "%s", long_name);
	}
	switch (pick(3)) {
	case 0:
		snprintf(ret->pv, sizeof(ret->pv), "%s", made_rec.pv);
		break;
	case 1:
		snprintf(ret->pv, sizeof(ret->pv), "pvc-name-b");
		break;
	default:
		snprintf(ret->pv, sizeof(ret->pv), "%s", long_name);
	}
	snprintf(ret->name, sizeof(ret->name), "%s", last_of(rel));
	/* a record's size is what strtoull() read from it */
	ret->size = pick(8) == 7 ? UINT64_MAX : size_like(made_rec.size);
	return 0;
}

int fv_ownerdir_make(int rootfd, const char *rel, mode_t mode, uid_t uid, gid_t gid,
		     const char *claim, const char *pv, uint64_t size, bool adopt,
		     enum fv_ownerdir_made *made, struct fv_owner *other, char *inside,
		     size_t insidelen)
{
	int r;

	check_fd(rootfd, "fv_ownerdir_make");
	check_name(rel, "fv_ownerdir_make");
	check_name(claim, "fv_ownerdir_make");
	if (!pv)
		die("fv_ownerdir_make without a pv");
	r = result(E_DIR);
	if (r == -FV_OWNERDIR_E_OWNED && other)
		other_owner(other, rel);
	if (r == -FV_OWNERDIR_E_NESTED && inside)
		snprintf(inside, insidelen, "pvc-outer");
	if (r < 0)
		return r;
	*made = (enum fv_ownerdir_made)pick(3);
	snprintf(made_rel, sizeof(made_rel), "%s", rel);
	memset(&made_rec, 0, sizeof(made_rec));
	snprintf(made_rec.claim, sizeof(made_rec.claim), "%s", claim);
	snprintf(made_rec.pv, sizeof(made_rec.pv), "%s", pv);
	snprintf(made_rec.name, sizeof(made_rec.name), "%s", last_of(rel));
	made_rec.size = size;
	return 0;
}

static int owned_call(int rootfd, const char *rel, const char *claim, struct fv_owner *other,
		      const char *what)
{
	int r;

	check_fd(rootfd, what);
	check_name(rel, what);
	check_name(claim, what);
	r = result(E_DIR);
	if (r == -FV_OWNERDIR_E_NESTED || r == -FV_OWNERDIR_E_HOLDS)
		r = -FV_OWNERDIR_E_UNOWNED; /* make's own refusals */
	if (r == -FV_OWNERDIR_E_OWNED && other)
		other_owner(other, rel);
	return r;
}

int fv_ownerdir_delete(int rootfd, const char *rel, const char *claim, struct fv_owner *other)
{
	return owned_call(rootfd, rel, claim, other, "fv_ownerdir_delete");
}

int fv_ownerdir_remove_empty(int rootfd, const char *rel, const char *claim,
			     struct fv_owner *other)
{
	return owned_call(rootfd, rel, claim, other, "fv_ownerdir_remove_empty");
}

int fv_copy_tree(int from, int to, uint64_t deadline_ms, uint64_t *ret_bytes,
		 unsigned int *ret_skipped)
{
	int r;

	check_fd(from, "fv_copy_tree");
	check_fd(to, "fv_copy_tree");
	r = result(E_SYS);
	if (r < 0)
		return r;
	*ret_bytes = size_like(0);
	*ret_skipped = pick(3);
	return 0;
}

/* --- the drivers' tables: the profile reads which slots there are ---------------------------- */

static _Noreturn void slot(const char *name)
{
	die("the driver's %s slot was called past the runner", name);
}

static int d_attach(struct fv_ctx *cx, const struct fv_opts *o, const char *node, char **ret)
{
	slot("attach");
}

static int d_isattached(struct fv_ctx *cx, const struct fv_opts *o, const char *node, bool *ret)
{
	slot("isattached");
}

static int d_detach(struct fv_ctx *cx, const char *volume, const char *node)
{
	slot("detach");
}

static int d_waitforattach(struct fv_ctx *cx, const char *device, const struct fv_opts *o,
			   char **ret)
{
	slot("waitforattach");
}

static int d_mountdevice(struct fv_ctx *cx, const char *dir, const char *device,
			 const struct fv_opts *o)
{
	slot("mountdevice");
}

static int d_unmount(struct fv_ctx *cx, const char *dir)
{
	slot("unmount");
}

static int d_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o)
{
	slot("mount");
}

static int d_expandfs(struct fv_ctx *cx, const struct fv_opts *o, const char *device,
		      const char *dir, const char *name, uint64_t new_size, uint64_t old_size)
{
	slot("expandfs");
}

static int d_publish(struct fv_ctx *cx, const char *dir, const char *staged,
		     const struct fv_opts *o)
{
	slot("publish");
}

static int d_unpublish(struct fv_ctx *cx, const char *dir, const char *name)
{
	slot("unpublish");
}

static int d_owns(struct fv_ctx *cx, const char *name, const char *path,
		  const struct fv_mntinfo *mi)
{
	slot("owns");
}

static int d_stats(struct fv_ctx *cx, const char *name, const char *path, struct fv_volstats *ret)
{
	slot("stats");
}

static int d_gc(struct fv_ctx *cx)
{
	slot("gc");
}

static void d_init_caps(const struct fv_ctx *cx, struct fv_caps *caps)
{
	slot("init_caps");
}

static void d_after(struct fv_ctx *cx)
{
	slot("after_node_op");
}

static const struct fv_blkvol_ops stub_blk;

/* the slots FV_BLKVOL_OPS fills (fv/blkvol.h) */
#define STUB_BLOCK_CLASS                                                                           \
	.blk = &stub_blk, .raw_block = true, .attach = d_attach, .isattached = d_isattached,       \
	.detach = d_detach, .waitforattach = d_waitforattach, .mountdevice = d_mountdevice,        \
	.unmountdevice = d_unmount, .mount = d_mount, .unmount = d_unmount,                        \
	.publish = d_publish, .unpublish = d_unpublish, .owns = d_owns, .stats = d_stats,          \
	.expandfs = d_expandfs, .gc = d_gc, .init_caps = d_init_caps, .after_node_op = d_after

/* as drivers/loop/loop.c's, drivers/nfs/nfs.c's and drivers/iscsi/ops.c's tables */
const struct fv_driver stub_driver_loop = { .name = "loop", .node_local = true, STUB_BLOCK_CLASS };
const struct fv_driver stub_driver_iscsi = { .name = "iscsi", STUB_BLOCK_CLASS };
const struct fv_driver stub_driver_nfs = {
	.name = "nfs", .mount = d_mount, .unmount = d_unmount, .publish = d_publish,
	.unpublish = d_unpublish, .owns = d_owns, .stats = d_stats,
};
