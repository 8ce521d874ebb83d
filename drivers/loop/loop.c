/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop: block volumes backed by image files under a confined root
 * directory (FLEXVOL_LOOP_ROOT).  The lifecycle is the block-volume class's
 * (fv/blkvol.h); this file holds the backend steps:
 *
 *   parse    options -> image path (confined), size, read-only
 *   handle   "loop:<file>"
 *   attach   bind the image to exactly one loop device (reusing a binding of
 *            the same file, matched by device and inode); waitforattach
 *            waits for its node, a claim binds it released by the kernel
 *            with its last mount (bind.c)
 *   find     the binding of the image
 *   release  unbind every binding claimed for (or hinted with) a volume name
 *   grow     grow the file, LOOP_SET_CAPACITY
 *
 * Every binding carries a tag in lo_file_name, so teardown finds it from the
 * kernel alone, even with the state dir wiped: "flexvol:<volume>" once a
 * trusted op (mountdevice, node-mode mount) has claimed it for the volume
 * named by kubelet's directory argument, "flexvol?<hint>" while only
 * waitforattach has bound it (the hint is the options' volume name, which a
 * PV author can set to anything: it never makes a claim, see fv/blkvol.h).
 * The kernel side (status, walk, bind, claim, release) is in bind.c.
 */
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/config.h"
#include "fv/driver.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/loop.h"
#include "fv/mountutil.h"
#include "fv/state.h"
#include "fv/util.h"
#include "loop.h"

#define TAG_PREFIX "flexvol" /* then ':' (claimed) or '?' (hinted), then the name */
#define DEFAULT_FSTYPE "ext4"
#define MAX_LOOP_SIZE (1ULL << 50) /* 1 PiB: anything larger is a typo */

/* Options -> struct loopvol.  Lexical checks only: no node access (attach runs in the KCM). */
static int loop_parse(struct fv_ctx *cx, const struct fv_opts *o, void *vol)
{
	struct loopvol *v = vol;
	const struct fv_config *cfg = fv_ctx_config(cx);
	const char *file, *size, *prealloc;
	int r;

	memset(v, 0, sizeof(*v));
	r = fv_opt_required(cx, o, "file", &file);
	if (r < 0)
		return r;
	if (fv_path_confine(cfg->loop_root, file, v->rel, sizeof(v->rel)) < 0)
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'file' must name a file inside the loop root '%s': '%s'",
			       cfg->loop_root, file);
	r = fv_opt(cx, o, "size", &size);
	if (r < 0)
		return r;
	if (r == 0 && (fv_parse_quantity(size, &v->size) < 0 || v->size < 1024 * 1024 ||
		       v->size > MAX_LOOP_SIZE || v->size % 512))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'size' must be a quantity from 1Mi to 1Pi in whole 512-byte "
			       "sectors (e.g. 64Mi, 1Gi, 500M): '%s'",
			       size);
	/*
	 * Set by flexvol-provisioner for its node agent, which allocates the
	 * image's blocks (docs/loop-provisioning.md); the driver only checks it.
	 * Read here so that it is one of this driver's options, which the
	 * admission policy's key list is generated from (deploy/policy/gen-keys).
	 */
	r = fv_opt(cx, o, "preallocate", &prealloc);
	if (r < 0)
		return r;
	if (r == 0 && strcmp(prealloc, "true") != 0 && strcmp(prealloc, "false") != 0)
		return fv_fail(cx, -FV_ERR_BADOPT, "option 'preallocate' must be true or false: '%s'",
			       prealloc);
	v->fstype = o->fstype;
	v->ro = o->readonly;
	v->block = o->block;
	return 0;
}

/* @kind ':' (claimed) or '?' (hinted); @volume may be "" (waitforattach without a name) */
static void make_tag(char kind, const char *volume, char *tag)
{
	size_t n = strlen(volume);

	if (strlen(TAG_PREFIX) + 1 + n < LO_NAME_SIZE) {
		snprintf(tag, LO_NAME_SIZE, TAG_PREFIX "%c%s", kind, volume);
	} else {
		/* the hash keeps long PV names (up to 253 chars) distinct in 63 bytes */
		snprintf(tag, LO_NAME_SIZE, TAG_PREFIX "%c%.37s~%016llx", kind, volume,
			 (unsigned long long)fv_hash64(volume));
	}
}

/* Is @tag one of ours?  Then its kind (':' or '?') goes to *kind; the name follows it. */
static bool our_tag(const char *tag, char *kind)
{
	size_t n = strlen(TAG_PREFIX);

	if (strncmp(tag, TAG_PREFIX, n) || (tag[n] != ':' && tag[n] != '?'))
		return false;
	*kind = tag[n];
	return true;
}

/*
 * Open the image below the loop root, taken literally: no symlink, no "..",
 * nothing but a regular file is ever open()ed (a FIFO or a device node planted
 * in the root is only looked at through O_PATH: no hang, no driver side
 * effect).  With @create and a size, a missing file is made sparse.
 */
static int open_image(struct fv_ctx *cx, const struct loopvol *v, bool create, int *ret_fd,
		      struct stat *st)
{
	const char *root = fv_ctx_config(cx)->loop_root;
	_cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int flags = v->ro ? O_RDONLY : O_RDWR;
	int fd;

	if (rootfd < 0)
		return fv_fail(cx, NEG_ERRNO(), "loop root '%s' is not usable: %m", root);
	fd = fv_open_regular_beneath(rootfd, v->rel, flags, st);
	if (fd == -ENOENT && create) {
		if (v->ro)
			return fv_fail(cx, -ENOENT,
				       "image '%s' does not exist; a read-only volume cannot create it",
				       v->rel);
		if (!v->size)
			return fv_fail(cx, -ENOENT,
				       "image '%s' does not exist and option 'size' is not set",
				       v->rel);
		/* O_EXCL: a new regular file, or nothing (whatever appeared meanwhile is checked) */
		fd = fv_open_beneath(rootfd, v->rel, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
		if (fd >= 0 && fstat(fd, st) < 0) {
			close(fd);
			fd = -EIO;
		}
		if (fd == -EEXIST)
			fd = fv_open_regular_beneath(rootfd, v->rel, flags, st);
	}
	if (fd == -EMEDIUMTYPE)
		return fv_fail(cx, -EINVAL, "image '%s' is not a regular file: it is %s", v->rel,
			       fv_file_type(st->st_mode));
	if (fd == -ELOOP)
		return fv_fail(cx, -EPERM,
			       "image '%s' is or passes through a symlink: refused (the file "
			       "option is taken literally)",
			       v->rel);
	if (fd == -EXDEV)
		return fv_fail(cx, -EPERM, "image '%s' resolves outside the loop root '%s'", v->rel,
			       root);
	if (!v->ro && (fd == -EROFS || fd == -EACCES || fd == -EPERM))
		return fv_fail(cx, -FV_ERR_CONFLICT, "image '%s' cannot be written on this node (%s): "
			       "the volume is read-only here; a pod asking for read-write cannot "
			       "use it, pods asking for read-only can", v->rel, strerror(-fd));
	if (fd < 0)
		return fv_fail(cx, fd, "cannot open image '%s' in '%s': %s", v->rel, root,
			       strerror(-fd));
	/* A file we created but did not size yet (killed in between) holds no data. */
	if (create && st->st_size == 0 && v->size && !v->ro) {
		if (ftruncate(fd, (off_t)v->size) < 0 || fstat(fd, st) < 0) {
			int r = NEG_ERRNO();

			close(fd);
			return fv_fail(cx, r, "cannot size image '%s': %s", v->rel, strerror(-r));
		}
		fv_log("created sparse image %s/%s of %llu bytes", root, v->rel,
		       (unsigned long long)v->size);
	}
	*ret_fd = fd;
	return 0;
}

/*
 * The owner record of an image: the name of the first volume a trusted op
 * (mountdevice, node-mode mount) claimed it for, in a "trusted." extended
 * attribute of the file (only CAP_SYS_ADMIN reads or writes that namespace:
 * no tenant of the loop root forges or clears it).  Images belong to
 * nobody otherwise, and any options author could name another tenant's
 * image while it is not in use.  An operator hands an image to another
 * volume by removing it: setfattr -x trusted.flexvol.owner <image>
 * (docs/design.md, "Image owners").  A node-mode claim "<name>@<ident>"
 * records its name only.  Called with the image lock held.
 */
#define OWNER_XATTR FV_LOOP_OWNER_XATTR

static int check_owner(struct fv_ctx *cx, const struct loopvol *v, int fd, const char *claim,
		       bool record)
{
	char have[256], want[256];
	size_t n = strcspn(claim, "@");
	ssize_t len;

	snprintf(want, sizeof(want), "%.*s", (int)n, claim);
	len = fgetxattr(fd, OWNER_XATTR, have, sizeof(have) - 1);
	if (len >= 0) {
		have[len] = '\0';
		if (streq(have, want))
			return 0;
		return fv_fail(cx, -FV_ERR_CONFLICT, "image '%s' belongs to another volume ('%s', "
			       "recorded in its " OWNER_XATTR " attribute); refusing it for '%s'",
			       v->rel, have, want);
	}
	if (errno == ENOTSUP || errno == EOPNOTSUPP) {
		fv_log("image '%s': its filesystem keeps no owner record (%m)", v->rel);
		return 0;
	}
	if (errno != ENODATA)
		return fv_fail(cx, NEG_ERRNO(), "cannot read the owner of image '%s': %m", v->rel);
	if (!record)
		return 0;
	if (fsetxattr(fd, OWNER_XATTR, want, strlen(want), XATTR_CREATE) < 0) {
		if (errno == ENOTSUP || errno == EOPNOTSUPP || errno == EROFS) {
			fv_log("image '%s': cannot record its owner (%m)", v->rel);
			return 0;
		}
		return fv_fail(cx, NEG_ERRNO(), "cannot record the owner of image '%s': %m", v->rel);
	}
	fv_log("image '%s' now belongs to '%s'", v->rel, want);
	return 0;
}

/*
 * A read-only request still binds the image read-write when it can be
 * written here: the loop device is shared by every pod of the volume on
 * this node, and read-only is a property of each pod's bind (see
 * docs/design.md "Read-only and read-write pods of one volume").  A
 * read-only binding could never be made writable while a read-only pod
 * uses it, so a read-write pod coming second would wait forever.  The
 * image, open read-only in @fd, is reopened read-write through its
 * descriptor (the very file checked, no new lookup); when that fails (a
 * read-only filesystem, an immutable file) the binding is read-only.
 */
static void writable_if_possible(const struct loopvol *v, int *fd, struct loopvol *dv)
{
	char p[32];
	int rw;

	*dv = *v;
	/* a raw block volume has no per-pod binds to carry the mode: its device does */
	if (!v->ro || v->block)
		return;
	snprintf(p, sizeof(p), "/proc/self/fd/%d", *fd);
	rw = open(p, O_RDWR | O_CLOEXEC | O_NONBLOCK); /* the magic link: followed on purpose */
	if (rw < 0) {
		int err = errno;

		fv_log("image %s cannot be written here (%s): binding it read-only", v->rel,
		       strerror(err));
		return;
	}
	close(*fd);
	*fd = rw;
	dv->ro = false;
}

/*
 * The claim of a trusted op (mountdevice, node-mode mount) on the binding
 * @b of the image: 1 to bind the image anew (@b released), 0 to use @b as
 * it is, <0 refused.  A binding no mount uses is released and bound again,
 * claimed and released by the kernel with its last user (loop_claim_unused():
 * no queue freeze, and a kill before the mount leaves nothing bound); a
 * mounted one is re-tagged in place if it must be (a freeze: rare, a
 * binding someone mounted under another tag).
 */
static int claim(struct fv_ctx *cx, const struct loopvol *v, const struct loopvol *dv,
		 struct binding *b, const char *tag)
{
	struct stat st;
	int n = stat(b->dev, &st) < 0 ? NEG_ERRNO() : fv_mnt_count_devno(st.st_rdev);

	if (n < 0)
		return fv_fail(cx, n, "cannot tell whether %s is mounted: %s", b->dev, strerror(-n));
	if (n == 0) {
		int r = loop_claim_unused(cx, b, tag);

		if (r != 0)
			return r;
	} else if (!streq(b->tag, tag)) {
		int r = loop_set_tag(cx, b, tag);

		if (r < 0)
			return r;
	}
	/* bound read-only and in use: it still serves read-only pods */
	if (b->ro && !dv->ro && !v->ro)
		return fv_fail(cx, -FV_ERR_CONFLICT, "image '%s' is bound read-only to %s and in "
			       "use by read-only pods; a pod asking for read-write can use it once "
			       "they are gone", v->rel, b->dev);
	fv_log("reusing %s for %s", b->dev, v->rel);
	return 0;
}

/*
 * The claim of a raw block stage on the binding @b of the image (block.c of
 * the class: nothing is ever mounted on it, so nothing may release it at a
 * last close): 1 to bind anew (@b released: it was unused and of the wrong
 * mode), 0 to use @b, <0 refused.  A binding to be released at its last
 * close is a filesystem stage's (held by its mount, or by its stage call):
 * never taken for a raw block device.
 */
static int claim_block(struct fv_ctx *cx, const struct loopvol *v, struct binding *b,
		       const char *tag)
{
	struct stat st;
	int n = stat(b->dev, &st) < 0 ? NEG_ERRNO() : fv_mnt_count_devno(st.st_rdev);

	if (n < 0)
		return fv_fail(cx, n, "cannot tell whether %s is in use: %s", b->dev, strerror(-n));
	if (b->autoclear)
		return fv_fail(cx, -FV_ERR_CONFLICT, "image '%s' is bound to %s for a filesystem "
			       "(released with its last mount); refusing it as a raw block device",
			       v->rel, b->dev);
	if (n == 0 && b->ro != v->ro) /* unused, of the other mode: bound again as asked */
		return loop_unbind(cx, b) < 0 ? -EBUSY : 1;
	if (b->ro && !v->ro)
		return fv_fail(cx, -FV_ERR_CONFLICT, "image '%s' is bound read-only to %s and in "
			       "use; a read-write stage can use it once that is gone", v->rel, b->dev);
	if (!streq(b->tag, tag)) {
		int r = loop_set_tag(cx, b, tag);

		if (r < 0)
			return r;
	}
	fv_log("reusing %s for %s", b->dev, v->rel);
	return 0;
}

/*
 * waitforattach on an existing binding @b: 1 to bind anew (@b released), 0
 * to reuse it, <0 refused.  Bound read-only (by an older version, or while
 * the image could not be written) and writable now: rebound if idle.  In
 * use, it still serves a read-only pod; a read-write one is told why not.
 */
static int reuse(struct fv_ctx *cx, const struct loopvol *v, const struct loopvol *dv,
		 struct binding *b)
{
	if (b->ro && !dv->ro) {
		if (loop_unbind(cx, b) == 0)
			return 1;
		fv_ctx_reset_message(cx);
		if (!v->ro)
			return fv_fail(cx, -FV_ERR_CONFLICT, "image '%s' is bound read-only to %s "
				       "and in use by read-only pods; a pod asking for read-write "
				       "can use it once they are gone", v->rel, b->dev);
	}
	fv_log("reusing %s for %s", b->dev, v->rel);
	return 0;
}

/*
 * The node-local attach: the image bound to exactly one loop device,
 * read-write whenever the image can be written (writable_if_possible()).
 * Never makes a second binding.  @name (trusted) claims the binding, made
 * to be released by the kernel with its last mount (claim()); without it
 * @hint only labels a new one, or an existing one is reused.  Returns with
 * the image lock held in *ret_lock.
 */
static int loop_attach(struct fv_ctx *cx, const void *vol, const char *name, const char *hint,
		       char *dev, size_t len, int *ret_lock)
{
	const struct loopvol *v = vol;
	struct loopvol dv;
	_cleanup_close_ int fd = -1;
	char tag[LO_NAME_SIZE], lockname[96], kind;
	const char *want = name ? name : hint ? hint : "";
	struct binding b;
	struct stat st;
	int r, lock;

	r = open_image(cx, v, true, &fd, &st);
	if (r < 0)
		return r;
	writable_if_possible(v, &fd, &dv);
	/* one lock per image file, whatever volume names it */
	snprintf(lockname, sizeof(lockname), "loop-image-%llx-%llx", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	lock = fv_lock(cx, lockname);
	if (lock < 0)
		return lock;
	/* the owner first: a refused volume changes nothing (a hint is checked, never recorded) */
	if (name || (hint && *hint)) {
		r = check_owner(cx, v, fd, name ? name : hint, name != NULL);
		if (r < 0)
			goto fail;
	}
	make_tag(name ? ':' : '?', want, tag);
	r = loop_find_binding(cx, &st, &b);
	if (r < 0)
		goto fail;
	if (r == 0) {
		char mine[LO_NAME_SIZE];

		/* the same name, claimed or hinted, is this volume's binding */
		make_tag(b.tag[strlen(TAG_PREFIX)] == ':' ? ':' : '?', want, mine);
		if (!our_tag(b.tag, &kind) ||
		    (!streq(b.tag, mine) && (kind == ':' || !name))) {
			r = fv_fail(cx, -FV_ERR_CONFLICT,
				    "image '%s' is already bound to %s for another volume ('%s')",
				    v->rel, b.dev, b.tag);
			goto fail;
		}
		r = !name ? reuse(cx, v, &dv, &b) : v->block ? claim_block(cx, v, &b, tag)
							      : claim(cx, v, &dv, &b, tag);
		if (r < 0)
			goto fail;
		if (r == 0)
			goto done;
	}
	/* a claim is released with its last mount; a raw block device has none */
	r = loop_bind(cx, v->rel, dv.ro, fd, tag, name && !v->block, &b);
	if (r < 0)
		goto fail;
done:
	snprintf(dev, len, "%s", b.dev);
	*ret_lock = lock;
	return 0;
fail:
	fv_unlock(lock);
	return r;
}

static int loop_handle(struct fv_ctx *cx, const void *vol, char **ret_handle)
{
	const struct loopvol *v = vol;

	return asprintf(ret_handle, "loop:%s", v->rel) < 0 ? -ENOMEM : 0;
}

static int loop_find(struct fv_ctx *cx, const void *vol, char *dev, size_t len)
{
	struct loopvol v = *(const struct loopvol *)vol;
	_cleanup_close_ int fd = -1;
	struct binding b;
	struct stat st;
	int r;

	v.ro = true; /* looking only */
	r = open_image(cx, &v, false, &fd, &st);
	if (r == -ENOENT) {
		fv_ctx_reset_message(cx);
		return 1;
	}
	if (r < 0)
		return r;
	r = loop_find_binding(cx, &st, &b);
	if (r != 0)
		return r;
	snprintf(dev, len, "%s", b.dev);
	return 0;
}

/* The identity of an image file: its device and inode, as the kernel reports a binding's. */
static void image_ident(uint64_t dev, uint64_t ino, char *buf, size_t len)
{
	snprintf(buf, len, "%llx-%llx", (unsigned long long)dev, (unsigned long long)ino);
}

static int loop_ident(struct fv_ctx *cx, const void *vol, char *buf, size_t len)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r = open_image(cx, vol, true, &fd, &st); /* what attach would make, if missing */

	if (r < 0)
		return r;
	image_ident(st.st_dev, st.st_ino, buf, len);
	return 0;
}

/* The loop device behind @devno, by the kernel's name (loop minors depend on max_part): -1 none. */
static long loop_of_devno(dev_t devno)
{
	char link[64], target[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(devno), minor(devno));
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -1;
	target[n] = '\0';
	return loop_nr(fv_path_last(target));
}

static int loop_ident_of(struct fv_ctx *cx, dev_t devno, char *buf, size_t len)
{
	struct loop_info64 info;
	long nr = loop_of_devno(devno);
	int r;

	if (nr < 0)
		return 1;
	r = loop_status((int)nr, &info);
	if (r == -ENXIO)
		return 1;
	if (r < 0)
		return fv_fail(cx, r, "cannot read the status of /dev/loop%ld: %s", nr, strerror(-r));
	image_ident(info.lo_device, info.lo_inode, buf, len);
	return 0;
}

/*
 * Is the image behind loop device @devno still the file the volume names?
 * From the kernel: the binding's backing file (its device and inode) must
 * be what the image's path names (the record's, confined to the loop root,
 * looked up without following anything): a path gone or naming another
 * file is abnormal, the same inode under its name again (a hard link put
 * back) is well.  sysfs's backing_file ends in " (deleted)" once the name
 * the binding was made through is removed: the message says so, and
 * without a record it is all there is.  No I/O.
 */
static int loop_health(struct fv_ctx *cx, dev_t devno, json_object *rec, char *msg, size_t len)
{
	const char *root = fv_ctx_config(cx)->loop_root;
	char path[96], backing[PATH_MAX] = "", rel[PATH_MAX] = "";
	struct loop_info64 info;
	json_object *f;
	struct stat st;
	long nr = loop_of_devno(devno);
	int r, fd, rootfd;
	bool deleted;
	size_t n;

	if (nr < 0) {
		snprintf(msg, len, "device %u:%u is no loop device any more", major(devno),
			 minor(devno));
		return 1;
	}
	r = loop_status((int)nr, &info);
	if (r == -ENXIO) {
		snprintf(msg, len, "/dev/loop%ld is not bound to an image any more", nr);
		return 1;
	}
	if (r < 0)
		return fv_fail(cx, r, "cannot read the status of /dev/loop%ld: %s", nr, strerror(-r));
	snprintf(path, sizeof(path), "/sys/block/loop%ld/loop/backing_file", nr);
	(void)fv_read_line(path, backing, sizeof(backing));
	if (rec && json_object_object_get_ex(rec, "file", &f) &&
	    json_object_is_type(f, json_type_string))
		snprintf(rel, sizeof(rel), "%s", json_object_get_string(f));
	n = strlen(backing);
	deleted = n > 10 && streq(backing + n - 10, " (deleted)");
	if (deleted)
		backing[n - 10] = '\0';
	if (!rel[0] && !deleted)
		return 0; /* no record: the kernel's word is all there is */
	if (!rel[0]) {
		snprintf(msg, len, "image '%s' was deleted while /dev/loop%ld is bound to it: the "
			 "volume's data lives only as long as that binding", backing, nr);
		return 1;
	}
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return fv_fail(cx, NEG_ERRNO(), "loop root '%s' is not usable: %m", root);
	fd = fv_open_beneath(rootfd, rel, O_PATH | O_NOFOLLOW, 0);
	close(rootfd);
	if (fd < 0 && fd != -ENOENT)
		return fv_fail(cx, fd, "cannot look at image '%s': %s", rel, strerror(-fd));
	if (fd < 0 && deleted) {
		snprintf(msg, len, "image '%s' was deleted while /dev/loop%ld is bound to it: the "
			 "volume's data lives only as long as that binding", rel, nr);
		return 1;
	}
	if (fd < 0) {
		snprintf(msg, len, "image '%s' is gone from the loop root (/dev/loop%ld still reads "
			 "the file it was bound to)", rel, nr);
		return 1;
	}
	r = fstat(fd, &st) < 0 ? NEG_ERRNO() : 0;
	close(fd);
	if (r < 0)
		return fv_fail(cx, r, "cannot look at image '%s': %s", rel, strerror(-r));
	if (st.st_dev != info.lo_device || st.st_ino != info.lo_inode) {
		snprintf(msg, len, "image '%s' was replaced: /dev/loop%ld still reads the file it "
			 "was bound to (inode %llu), the path names inode %llu", rel, nr,
			 (unsigned long long)info.lo_inode, (unsigned long long)st.st_ino);
		return 1;
	}
	return 0;
}

static int loop_record(struct fv_ctx *cx, const void *vol, json_object *rec)
{
	const struct loopvol *v = vol;

	json_object_object_add(rec, "file", json_object_new_string(v->rel));
	return 0;
}

struct release_ctx {
	struct fv_ctx *cx;
	char claimed[LO_NAME_SIZE], hinted[LO_NAME_SIZE];
	dev_t devno;
	int r;
};

static bool release_one(int nr, const struct loop_info64 *info, void *arg)
{
	struct release_ctx *x = arg;
	struct binding b;
	struct stat st;
	char kind;
	int k;

	loop_fill_binding(&b, nr, info);
	if (!our_tag(b.tag, &kind))
		return false; /* never anybody else's device */
	if (!streq(b.tag, x->claimed) && !streq(b.tag, x->hinted) &&
	    !(x->devno && stat(b.dev, &st) == 0 && st.st_rdev == x->devno))
		return false;
	/* (a count that fails is not 0: release() asks again and fails) */
	if (kind == '?' && stat(b.dev, &st) == 0 && fv_mnt_count_devno(st.st_rdev) > 0) {
		/* only hinted with this name by some PV's options: not ours to fail on */
		fv_log("leaving %s (%s): it is mounted", b.dev, b.tag);
		return false;
	}
	k = loop_unbind(x->cx, &b);
	if (k < 0 && x->r == 0)
		x->r = k;
	return false;
}

/*
 * Release every binding claimed for @name, hinted with it (waitforattach
 * only, nobody mounted it), and the device @devno its mount was on if it
 * is one of ours.  Found from the kernel alone: the record is not needed.
 */
static int loop_release(struct fv_ctx *cx, const char *name, dev_t devno, json_object *rec)
{
	struct release_ctx x = { .cx = cx, .devno = devno };
	int r;

	loop_hold_drop(); /* a device this process bound: released here, not at our exit */
	make_tag(':', name, x.claimed);
	make_tag('?', name, x.hinted);
	r = loop_each_binding(release_one, &x);
	if (r < 0 && x.r == 0)
		x.r = fv_fail(cx, r, "cannot read the loop devices' status: %s", strerror(-r));
	return x.r;
}

struct autoclear_ctx {
	struct fv_ctx *cx;
	char claimed[LO_NAME_SIZE];
	dev_t devno;
	int r;
};

static bool autoclear_one(int nr, const struct loop_info64 *info, void *arg)
{
	struct autoclear_ctx *x = arg;
	struct binding b;
	struct stat st;

	loop_fill_binding(&b, nr, info);
	if (!streq(b.tag, x->claimed) || stat(b.dev, &st) < 0 || st.st_rdev != x->devno)
		return false;
	x->r = loop_autoclear(x->cx, &b);
	if (x->r == 0)
		fv_log("%s (%s): released by the kernel when its last mount goes", b.dev, b.tag);
	return true;
}

/*
 * The binding claimed for @name on @devno is released by the kernel at its
 * last close (LO_FLAGS_AUTOCLEAR): from the umount on, no SIGKILL can leave
 * it behind.  Set when it was bound (claim()); only an older version's
 * binding gets it here.
 */
static int loop_release_on_umount(struct fv_ctx *cx, const char *name, dev_t devno)
{
	struct autoclear_ctx x = { .cx = cx, .devno = devno };
	int r;

	loop_hold_drop(); /* a device this process bound: the umount is its last user */
	make_tag(':', name, x.claimed);
	r = loop_each_binding(autoclear_one, &x);
	return r < 0 ? r : x.r;
}

static int loop_grow(struct fv_ctx *cx, const void *vol, const char *dev, uint64_t new_size)
{
	struct loopvol v = *(const struct loopvol *)vol;
	_cleanup_close_ int fd = -1, lfd = -1;
	struct stat st;
	int r;

	if (new_size > MAX_LOOP_SIZE || new_size % 512)
		return fv_fail(cx, -EINVAL, "new size %llu is not a whole number of sectors up to 1Pi",
			       (unsigned long long)new_size);
	v.ro = false;
	r = open_image(cx, &v, false, &fd, &st);
	if (r < 0)
		return r;
	if ((uint64_t)st.st_size < new_size) {
		if (ftruncate(fd, (off_t)new_size) < 0)
			return fv_fail(cx, NEG_ERRNO(), "cannot grow image '%s': %m", v.rel);
		fv_log("grew %s from %llu to %llu bytes", v.rel, (unsigned long long)st.st_size,
		       (unsigned long long)new_size);
	}
	lfd = open(dev, O_RDONLY | O_CLOEXEC);
	if (lfd < 0 || ioctl(lfd, LOOP_SET_CAPACITY, 0) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot refresh the capacity of %s: %m", dev);
	return 0;
}

static const struct fv_blkvol_ops loop_ops = {
	.vol_size = sizeof(struct loopvol),
	.default_fstype = DEFAULT_FSTYPE,
	.parse = loop_parse,
	.handle = loop_handle,
	.attach = loop_attach,
	.find = loop_find,
	.release = loop_release,
	.release_on_umount = loop_release_on_umount,
	.record = loop_record,
	.grow = loop_grow,
	.ident = loop_ident,
	.ident_of = loop_ident_of,
	.health = loop_health,
	.probe_fd = loop_probe_fd,
};

const struct fv_driver fv_driver_loop = {
	.name = "loop",
	.node_local = true, /* an image file in this node's loop root */
	FV_BLKVOL_OPS(&loop_ops),
};
