/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Directory arguments, taken literally (fv/dirarg.h): opened through their
 * verified parent, looked at, asked whether they are a mount point or
 * empty.  Nothing here mounts or unmounts (mountutil.c).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/dirarg.h"
#include "fv/mounttab.h"
#include "fv/util.h"

int fv_dir_open_self(const struct fv_dir *d)
{
	int fd = openat(d->parent, d->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return NEG_ERRNO();
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		int r = S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;

		close(fd);
		return r;
	}
	return fd;
}

int fv_dir_fail(struct fv_ctx *cx, int r, const char *path)
{
	switch (r) {
	case -EINVAL:
		return fv_fail(cx, r, "directory '%s' is not a plain absolute path", path);
	case -ELOOP:
		return fv_fail(cx, r,
			       "'%s' has a symlink or magic link in its path: refused (directory "
			       "arguments are taken literally)",
			       path);
	case -ENOENT:
		return fv_fail(cx, r, "directory '%s' does not exist (kubelet creates it first)",
			       path);
	case -ENOTDIR:
		return fv_fail(cx, r, "'%s' is not a directory", path);
	default:
		return fv_fail(cx, r, "cannot open directory '%s': %s", path, strerror(-r));
	}
}

void fv_dir_close(struct fv_dir *d)
{
	if (d->parent >= 0)
		close(d->parent);
	d->parent = -1;
}

/* fv_dir_arg() without messages: 0 or -errno (-ENOENT when absent). */
static int dir_open(const char *arg, unsigned int flags, struct fv_dir *d)
{
	int r, fd;

	d->parent = -1;
	d->path[0] = '\0';
	d->name = d->path;
	r = fv_dir_open(arg, FV_DIR_PARENT, d->path, sizeof(d->path));
	if (r < 0)
		return r;
	d->parent = r;
	d->name = fv_path_last(d->path);
	if (flags & FV_DIRARG_PARENT_ONLY)
		return 0;
	fd = fv_dir_open_self(d);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

int fv_dir_open_quiet(const char *arg, struct fv_dir *d)
{
	return dir_open(arg, 0, d);
}

int fv_dir_arg(struct fv_ctx *cx, const char *arg, unsigned int flags, struct fv_dir *d)
{
	int r = dir_open(arg, flags, d);

	if (r == -ENOENT && !(flags & FV_DIRARG_MUST_EXIST))
		return 1;
	return r < 0 ? fv_dir_fail(cx, r, d->path[0] ? d->path : arg) : 0;
}

int fv_dir_check(struct fv_ctx *cx, const struct fv_dir *d, unsigned int flags)
{
	int fd = fv_dir_open_self(d);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (fd == -ENOENT && !(flags & FV_DIRARG_MUST_EXIST))
		return 1;
	return fv_dir_fail(cx, fd, d->path);
}

int fv_dir_mounted(const struct fv_dir *d, struct fv_mntinfo *ret)
{
	int fd = fv_dir_open_self(d), r;

	if (fd == -ENOENT)
		return 1;
	if (fd < 0)
		return fd;
	r = fv_mnt_of_fd(fd, ret);
	close(fd);
	/* Linux < 5.8: the literal path names the mount */
	return r == -EOPNOTSUPP ? fv_mnt_find(d->path, ret) : r;
}

/* Does the open directory @dir hold nothing but "." and ".."?  1 yes, 0 no.  Closes @dir. */
static int read_empty(DIR *dir)
{
	struct dirent *e;
	int r = 1;

	while ((e = readdir(dir)))
		if (!streq(e->d_name, ".") && !streq(e->d_name, "..")) {
			r = 0;
			break;
		}
	closedir(dir);
	return r;
}

int fv_dir_is_empty(const struct fv_dir *d)
{
	int fd = openat(d->parent, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *dir;

	if (fd < 0)
		return errno == ENOENT ? 1 : errno == ENOTDIR ? -ENOTDIR : NEG_ERRNO();
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return NEG_ERRNO();
	}
	return read_empty(dir);
}

int fv_path_is_empty(const char *path)
{
	DIR *d = opendir(path);

	if (!d)
		return errno == ENOENT ? 1 : NEG_ERRNO();
	return read_empty(d);
}
