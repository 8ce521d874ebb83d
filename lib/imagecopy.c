/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copies of loop images in the loop root (fv/image.h): snapshots
 * ("<id>.snap"), restores and clones, each a point in time of its source,
 * made whole in an unnamed file and linked in only when complete.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fv/copy.h"
#include "fv/image.h"
#include "fv/loop.h"
#include "fv/macro.h"
#include "fv/mounttab.h"
#include "fv/util.h"

bool fv_snapshot_file_ok(const char *file)
{
	size_t n = file ? strlen(file) : 0;

	if (n < 6 || n >= FV_IMAGE_NAME_MAX || strcmp(file + n - 5, ".snap"))
		return false;
	for (size_t i = 0; i < n - 5; i++)
		if (!((file[i] >= 'a' && file[i] <= 'z') || (file[i] >= '0' && file[i] <= '9') ||
		      file[i] == '-'))
			return false;
	return true;
}

/* An extended attribute of @fd as a string ("" when it has none): 0 or -errno. */
static int get_attr(int fd, const char *attr, char *buf, size_t len)
{
	ssize_t n = fgetxattr(fd, attr, buf, len - 1);

	if (n < 0 && errno == ENODATA)
		n = 0;
	if (n < 0)
		return NEG_ERRNO();
	buf[n] = '\0';
	return 0;
}

static int info_of(int fd, const struct stat *st, struct fv_image_info *ret)
{
	int r;

	ret->size = (uint64_t)st->st_size;
	ret->created = st->st_mtim.tv_sec;
	r = get_attr(fd, FV_LOOP_OWNER_XATTR, ret->owner, sizeof(ret->owner));
	if (r == 0)
		r = get_attr(fd, FV_LOOP_NAME_XATTR, ret->name, sizeof(ret->name));
	if (r == 0)
		r = get_attr(fd, FV_LOOP_SOURCE_XATTR, ret->source, sizeof(ret->source));
	return r;
}

int fv_image_info(int rootfd, const char *file, struct fv_image_info *ret)
{
	_cleanup_close_ int fd = -1;
	struct stat st;

	fd = fv_open_regular_beneath(rootfd, file, O_RDONLY, &st);
	return fd < 0 ? fd : info_of(fd, &st, ret);
}

/* The whole-filesystem mount of the loop device the image @st is bound to: 0 and @dir, 1 none. */
static int mounted_at(const struct stat *st, char *dir, size_t len)
{
	char dev[32];
	int nr = fv_image_bound_to(st);

	if (nr < 0)
		return 1;
	snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
	return fv_mnt_find_source(dev, NULL, dir, len);
}

/* The records of a copy: its owner, its name, its source. */
static int set_records(int fd, const char *owner, const char *name, const char *source)
{
	if (fsetxattr(fd, FV_LOOP_OWNER_XATTR, owner, strlen(owner), 0) < 0 ||
	    fsetxattr(fd, FV_LOOP_NAME_XATTR, name, strlen(name), 0) < 0 ||
	    fsetxattr(fd, FV_LOOP_SOURCE_XATTR, source, strlen(source), 0) < 0)
		return NEG_ERRNO();
	return 0;
}

/* @dst there already: the same copy (a retry) is 0 with its size, another's -EEXIST. */
static int there_already(int rootfd, const char *dst, const char *owner, const char *name,
			 const char *source, uint64_t *ret_size, char *msg, size_t len)
{
	struct fv_image_info have;
	int r = fv_image_info(rootfd, dst, &have);

	if (r < 0) {
		snprintf(msg, len, "%s: %s", dst, r == -EMEDIUMTYPE ? "not a regular file" :
							      strerror(-r));
		return r;
	}
	if (!streq(have.owner, owner) || !streq(have.name, name) || !streq(have.source, source)) {
		snprintf(msg, len, "%s exists, made for '%s' ('%s' from %s), not this copy", dst,
			 have.owner, have.name, have.source[0] ? have.source : "nothing");
		return -EEXIST;
	}
	if (ret_size)
		*ret_size = have.size;
	return 0;
}

/* The unnamed copy @tmp linked in as @dst, and the root's entry made durable. */
static int link_in(int rootfd, int tmp, const char *dst)
{
	char proc[64];

	if (fsync(tmp) < 0)
		return NEG_ERRNO();
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", tmp);
	if (linkat(AT_FDCWD, proc, rootfd, dst, AT_SYMLINK_FOLLOW) < 0)
		return NEG_ERRNO();
	return fsync(rootfd) < 0 && errno != EINVAL ? NEG_ERRNO() : 0;
}

int fv_image_copy(int rootfd, const char *src, const char *dst, const char *owner,
		  const char *name, const char *source, uint64_t min_size, unsigned int freeze_ms,
		  uint64_t *ret_size, char *msg, size_t len)
{
	_cleanup_close_ int in = -1, tmp = -1;
	struct fv_freeze f = { .pid = -1 };
	char mnt[4096];
	bool frozen = false, reflink = false;
	struct stat st;
	int r, t;

	msg[0] = '\0';
	r = there_already(rootfd, dst, owner, name, source, ret_size, msg, len);
	if (r != -ENOENT)
		return r;
	msg[0] = '\0'; /* its "No such file", the copy's to make: the message is the copy's own */
	in = fv_open_regular_beneath(rootfd, src, O_RDONLY, &st);
	if (in < 0) {
		snprintf(msg, len, "%s: %s", src, in == -EMEDIUMTYPE ? "not a regular file" :
							  strerror(-in));
		return in;
	}
	tmp = openat(rootfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (tmp < 0 || set_records(tmp, owner, name, source) < 0) {
		r = NEG_ERRNO();
		snprintf(msg, len, "cannot make the copy of %s: %s", src, strerror(-r));
		return r;
	}
	/* mounted: its filesystem frozen while the copy is made (a point in time) */
	if (mounted_at(&st, mnt, sizeof(mnt)) == 0) {
		r = fv_freeze(&f, mnt, freeze_ms, msg, len);
		if (r < 0)
			return r;
		frozen = true;
	}
	r = fv_copy_file(in, tmp, fv_now_ms() + freeze_ms, &reflink);
	t = frozen ? fv_thaw(&f) : 0;
	if (r == 0 && t == -ETIMEDOUT)
		r = -ETIMEDOUT; /* thawed by the bound before the copy was whole */
	if (r < 0) {
		snprintf(msg, len, "cannot copy %s%s: %s", src, frozen ? " (frozen)" : "",
			 r == -ETIMEDOUT ? "it took longer than the bound" : strerror(-r));
		return r;
	}
	if (t < 0) /* thawed, if late: the copy is whole and a point in time */
		snprintf(msg, len, "thaw of %s: %s; ", mnt, strerror(-t));
	if ((uint64_t)st.st_size < min_size && ftruncate(tmp, (off_t)min_size) < 0) {
		r = NEG_ERRNO();
		snprintf(msg, len, "cannot grow the copy of %s: %s", src, strerror(-r));
		return r;
	}
	r = link_in(rootfd, tmp, dst);
	if (r == -EEXIST) /* another call's, just now */
		return there_already(rootfd, dst, owner, name, source, ret_size, msg, len);
	if (r < 0) {
		snprintf(msg, len, "cannot link the copy %s in: %s", dst, strerror(-r));
		return r;
	}
	if (ret_size)
		*ret_size = (uint64_t)st.st_size < min_size ? min_size : (uint64_t)st.st_size;
	snprintf(msg + strlen(msg), len - strlen(msg), "%s: %s of %s%s", dst,
		 reflink ? "a reflink copy" : "a sparse copy", src,
		 frozen ? ", its filesystem frozen meanwhile" : "");
	return 0;
}

int fv_snapshot_each(int rootfd, int (*fn)(const char *file, const struct fv_image_info *i,
					   void *arg), void *arg)
{
	struct fv_image_info info;
	struct dirent *e;
	DIR *d;
	int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return NEG_ERRNO();
	d = fdopendir(fd);
	if (!d) {
		r = NEG_ERRNO();
		close(fd);
		return r;
	}
	while (r == 0 && (e = readdir(d)))
		if (fv_snapshot_file_ok(e->d_name) && fv_image_info(rootfd, e->d_name, &info) == 0)
			r = fn(e->d_name, &info, arg);
	closedir(d);
	return r;
}

int fv_image_space(int rootfd, struct fv_image_space *ret)
{
	struct statvfs sv;
	struct dirent *e;
	struct stat st;
	DIR *d;
	int fd, r = 0;

	memset(ret, 0, sizeof(*ret));
	if (fstatvfs(rootfd, &sv) < 0)
		return NEG_ERRNO();
	ret->free = (uint64_t)sv.f_bavail * sv.f_frsize;
	fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NEG_ERRNO();
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	while ((e = readdir(d))) {
		if (!fv_image_name_ok(e->d_name) && !fv_snapshot_file_ok(e->d_name))
			continue;
		/* lstat: a symlink is no image of ours, and is never followed */
		if (fstatat(rootfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		ret->images++;
		if ((uint64_t)st.st_size > (uint64_t)st.st_blocks * 512)
			ret->unbacked += (uint64_t)st.st_size - (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return r;
}
