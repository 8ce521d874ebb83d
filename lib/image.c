/* SPDX-License-Identifier: Apache-2.0 */
/* Loop images in a node's loop root: see fv/image.h. */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fv/loop.h"
#include "fv/macro.h"
#include "fv/util.h"
#include "fv/image.h"

bool fv_image_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n < 9 || n >= FV_IMAGE_NAME_MAX || strncmp(name, "pvc-", 4) || strcmp(name + n - 4, ".img"))
		return false;
	for (size_t i = 4; i < n - 4; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '-'))
			return false;
	return true;
}

/*
 * The kernel is asked (LOOP_GET_STATUS64 on every loop device that has a
 * capacity: /proc/partitions lists exactly those), as the loop driver does.
 */
int fv_image_bound_to(const struct stat *st)
{
	FILE *f = fopen("/proc/partitions", "re");
	char line[256];
	int found = -1;

	if (!f)
		return -1;
	while (found < 0 && fgets(line, sizeof(line), f)) {
		struct loop_info64 info;
		unsigned int maj, min;
		unsigned long long blocks;
		char name[64], dev[80], *end;
		long nr;
		int fd;

		if (sscanf(line, "%u %u %llu %63s", &maj, &min, &blocks, name) != 4 ||
		    strncmp(name, "loop", 4))
			continue;
		nr = strtol(name + 4, &end, 10);
		if (end == name + 4 || *end)
			continue;
		snprintf(dev, sizeof(dev), "/dev/%s", name);
		fd = open(dev, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			continue;
		if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_device == st->st_dev &&
		    info.lo_inode == st->st_ino)
			found = (int)nr;
		close(fd);
	}
	fclose(f);
	return found;
}

int fv_image_owner(int fd, char *buf, size_t len)
{
	ssize_t n = fgetxattr(fd, FV_LOOP_OWNER_XATTR, buf, len - 1);

	if (n < 0)
		return NEG_ERRNO();
	buf[n] = '\0';
	return 0;
}

/* Record @owner on @fd unless it has one (XATTR_CREATE: never replaced): 0, -EEXIST, -errno. */
static int set_owner(int fd, const char *owner)
{
	if (fsetxattr(fd, FV_LOOP_OWNER_XATTR, owner, strlen(owner), XATTR_CREATE) == 0)
		return 0;
	return NEG_ERRNO();
}

/* Allocate every block of @fd up to its size (a no-op on a fully allocated file). */
static int allocate(int fd, const struct stat *st)
{
	if ((uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size)
		return 0;
	/* mode 0 allocates the holes only: data already written stays as it is */
	return fallocate(fd, 0, 0, st->st_size) < 0 ? NEG_ERRNO() : 0;
}

/*
 * The name record of image @fd (opened, of size @size) for a caller that
 * names its volumes (@name; NULL: none, nothing to check): set when
 * missing on an image that holds nothing yet or whose owner is @name
 * itself, else it must be @name.  0, or -EEXIST (why in @msg), or -errno.
 */
static int check_name(int fd, const char *img, const char *owner, const char *name, off_t size,
		      char *msg, size_t len)
{
	char have[256];
	ssize_t n;

	if (!name)
		return 0;
	n = fgetxattr(fd, FV_LOOP_NAME_XATTR, have, sizeof(have) - 1);
	if (n >= 0) {
		have[n] = '\0';
		if (streq(have, name))
			return 0;
		snprintf(msg, len, "image %s was made for the name '%s', not '%s'", img, have, name);
		return -EEXIST;
	}
	if (errno != ENODATA)
		return NEG_ERRNO();
	if (size != 0 && !streq(owner, name)) {
		snprintf(msg, len, "image %s has no name record: not made for the name '%s'", img,
			 name);
		return -EEXIST;
	}
	if (fsetxattr(fd, FV_LOOP_NAME_XATTR, name, strlen(name), XATTR_CREATE) == 0)
		return 0;
	if (errno == EEXIST) /* another call's, just now: it must be ours */
		return check_name(fd, img, owner, name, size, msg, len);
	return NEG_ERRNO();
}

int fv_image_ensure(int rootfd, const char *img, const char *owner, uint64_t size, bool prealloc,
		     uint64_t *ret_size, char *msg, size_t len)
{
	return fv_image_ensure_named(rootfd, img, owner, NULL, size, prealloc, ret_size, msg, len);
}

int fv_image_ensure_named(int rootfd, const char *img, const char *owner, const char *name,
			  uint64_t size, bool prealloc, uint64_t *ret_size, char *msg, size_t len)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	char have[256];
	int r;

	msg[0] = '\0';
	fd = openat(rootfd, img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		r = set_owner(fd, owner);
		/* the name before the size: an image killed before it holds nothing */
		if (r == 0)
			r = check_name(fd, img, owner, name, 0, msg, len);
		if (r == 0)
			r = (prealloc ? fallocate(fd, 0, 0, (off_t)size) : ftruncate(fd, (off_t)size)) < 0 ?
				    NEG_ERRNO() : 0;
		if (r < 0) {
			/* nothing half-made stays behind (an empty file holds no data) */
			(void)unlinkat(rootfd, img, 0);
			snprintf(msg, len, "cannot make image %s of %llu bytes: %s", img,
				 (unsigned long long)size, strerror(-r));
			return r;
		}
		snprintf(msg, len, "image %s for %s: made, %llu bytes, %s", img, owner,
			 (unsigned long long)size, prealloc ? "preallocated" : "sparse");
		if (ret_size)
			*ret_size = size;
		return 0;
	}
	if (errno != EEXIST) {
		r = NEG_ERRNO();
		snprintf(msg, len, "cannot make image %s: %s", img, strerror(-r));
		return r;
	}
	close(TAKE_FD(fd));
	fd = fv_open_regular_beneath(rootfd, img, O_RDWR, &st);
	if (fd < 0) {
		snprintf(msg, len, "image %s: %s", img,
			 fd == -EMEDIUMTYPE ? "not a regular file, left alone" : strerror(-fd));
		return fd;
	}
	/* made by the driver before us (or by us, killed before the owner record) */
	r = fv_image_owner(fd, have, sizeof(have));
	if (r == -ENODATA) {
		r = set_owner(fd, owner);
		if (r == 0)
			snprintf(msg, len, "image %s: owner record %s", img, owner);
		else if (r == -EEXIST)
			r = fv_image_owner(fd, have, sizeof(have));
	}
	if (r == 0 && !msg[0] && !streq(have, owner)) {
		snprintf(msg, len, "image %s belongs to %s", img, have);
		return -EEXIST;
	}
	if (r < 0) {
		snprintf(msg, len, "image %s: cannot record its owner %s: %s", img, owner, strerror(-r));
		return r;
	}
	r = check_name(fd, img, owner, name, st.st_size, msg, len);
	if (r < 0) {
		if (!msg[0])
			snprintf(msg, len, "image %s: cannot record its name: %s", img, strerror(-r));
		return r;
	}
	if (st.st_size == 0) {
		/* made and not sized yet (a kill in between): it holds no data */
		if (ftruncate(fd, (off_t)size) < 0 || fstat(fd, &st) < 0) {
			r = NEG_ERRNO();
			snprintf(msg, len, "cannot size image %s: %s", img, strerror(-r));
			return r;
		}
	}
	if (prealloc) {
		r = allocate(fd, &st);
		if (r < 0) {
			snprintf(msg, len, "image %s: cannot preallocate %lld bytes: %s", img,
				 (long long)st.st_size, strerror(-r));
			return r;
		}
	}
	if (ret_size)
		*ret_size = (uint64_t)st.st_size;
	return 0;
}

/* Open @img for a change of @owner's while no loop device holds it: fd, or <0 as image.h says. */
static int open_unbound(int rootfd, const char *img, const char *owner, int flags, struct stat *st,
			char *msg, size_t len)
{
	_cleanup_close_ int fd = fv_open_regular_beneath(rootfd, img, flags, st);
	char have[256];
	int r, nr;

	msg[0] = '\0';
	if (fd == -ENOENT)
		return fd;
	if (fd < 0) {
		snprintf(msg, len, "image %s is %s", img,
			 fd == -EMEDIUMTYPE ? "not a regular file" : strerror(-fd));
		return fd;
	}
	r = fv_image_owner(fd, have, sizeof(have));
	if (r < 0 || !streq(have, owner)) {
		snprintf(msg, len, "image %s: its owner record (%s) %s%s%s", img, FV_LOOP_OWNER_XATTR,
			 r == -ENODATA ? "is missing" : r < 0 ? "cannot be read: " : "names ",
			 r == -ENODATA ? "" : r < 0 ? strerror(-r) : have, r < 0 ? "" : ", not it");
		return -EPERM;
	}
	nr = fv_image_bound_to(st);
	if (nr >= 0) {
		snprintf(msg, len, "image %s is still bound to /dev/loop%d", img, nr);
		return -EBUSY;
	}
	return TAKE_FD(fd);
}

int fv_image_remove(int rootfd, const char *img, const char *owner, char *msg, size_t len)
{
	struct stat st, now;
	int fd = open_unbound(rootfd, img, owner, O_RDONLY, &st, msg, len);

	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	close(fd);
	/* the name still the same file (nothing swapped in between), then gone */
	if (fstatat(rootfd, img, &now, AT_SYMLINK_NOFOLLOW) < 0 || now.st_ino != st.st_ino ||
	    now.st_dev != st.st_dev) {
		snprintf(msg, len, "image %s changed files meanwhile", img);
		return -EAGAIN;
	}
	if (unlinkat(rootfd, img, 0) < 0 && errno != ENOENT) {
		int r = NEG_ERRNO();

		snprintf(msg, len, "image %s: %s", img, strerror(-r));
		return r;
	}
	snprintf(msg, len, "image %s removed", img);
	return 0;
}

int fv_image_grow(int rootfd, const char *img, const char *owner, uint64_t size, char *msg,
		   size_t len)
{
	struct stat st;
	_cleanup_close_ int fd = open_unbound(rootfd, img, owner, O_RDWR, &st, msg, len);

	if (fd == -ENOENT)
		snprintf(msg, len, "image %s does not exist", img);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size >= size)
		return 0;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = NEG_ERRNO();

		snprintf(msg, len, "cannot grow image %s: %s", img, strerror(-r));
		return r;
	}
	snprintf(msg, len, "image %s grown from %lld to %llu bytes", img, (long long)st.st_size,
		 (unsigned long long)size);
	return 0;
}

/*
 * No interface tells a filesystem's largest file (ext4's depends on its
 * block size: 16 TiB less a block with 4 KiB blocks; xfs and btrfs go far
 * past 1 PiB): an unnamed file in the root (O_TMPFILE: it vanishes with its
 * descriptor, nothing is left behind) is truncated, sparse, to sizes in
 * whole MiB, halving the step, about 30 ftruncate() calls.
 */
int fv_image_max_size(int rootfd, uint64_t limit, uint64_t *ret)
{
	const uint64_t mib = 1 << 20;
	_cleanup_close_ int fd = openat(rootfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	uint64_t lo = 1, hi = limit / mib;

	if (fd < 0)
		return NEG_ERRNO();
	if (ftruncate(fd, (off_t)(hi * mib)) == 0) {
		*ret = hi * mib;
		return 0;
	}
	if (errno != EFBIG && errno != EINVAL)
		return NEG_ERRNO();
	/* lo MiB fits, hi MiB does not */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (ftruncate(fd, (off_t)(mid * mib)) == 0)
			lo = mid;
		else if (errno == EFBIG || errno == EINVAL)
			hi = mid;
		else
			return NEG_ERRNO();
	}
	*ret = lo * mib;
	return 0;
}
