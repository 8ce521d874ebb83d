/* SPDX-License-Identifier: Apache-2.0 */
/* Confined directory work below the root: see dir.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "dir.h"

#define RESOLVE_CONFINED (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define DELETE_DEPTH_MAX 128

static int openat2_dir(int dirfd, const char *name, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC),
		.resolve = RESOLVE_CONFINED,
	};
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));

	return fd < 0 ? NEG_ERRNO() : (int)fd;
}

int fvp_root_open(const char *root)
{
	int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? NEG_ERRNO() : fd;
}

/*
 * Split @rel into its parent (opened, confined) and last component.  With
 * @create, missing parents are made (0755).  Returns the parent fd or -errno.
 */
static int open_parent(int rootfd, const char *rel, bool create, char *last, size_t lastlen)
{
	const char *slash = strrchr(rel, '/');
	int fd = openat2_dir(rootfd, ".", O_RDONLY);

	if (fd < 0)
		return fd;
	if (strlen(slash ? slash + 1 : rel) >= lastlen) {
		close(fd);
		return -ENAMETOOLONG;
	}
	snprintf(last, lastlen, "%s", slash ? slash + 1 : rel);
	for (const char *p = rel; slash && p < slash;) {
		size_t n = strcspn(p, "/");
		char comp[256];
		int next;

		if (!n || n >= sizeof(comp)) {
			close(fd);
			return -EINVAL;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (create && mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
			int r = NEG_ERRNO();

			close(fd);
			return r;
		}
		next = openat2_dir(fd, comp, O_RDONLY);
		close(fd);
		if (next < 0)
			return next;
		fd = next;
		p += n + 1;
	}
	return fd;
}

int fvp_dir_make(int rootfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, bool *ret_created)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	char last[256];
	bool created = true;

	pfd = open_parent(rootfd, rel, true, last, sizeof(last));
	if (pfd < 0)
		return pfd;
	if (mkdirat(pfd, last, 0700) < 0) {
		if (errno != EEXIST)
			return NEG_ERRNO();
		created = false;
	}
	/* not a symlink, not a file, not another mount: openat2 says so */
	fd = openat2_dir(pfd, last, O_RDONLY);
	if (fd < 0)
		return fd;
	/* owner first: chown clears the set-id bits that the mode may carry */
	if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) < 0)
		return NEG_ERRNO();
	if (fchmod(fd, mode) < 0)
		return NEG_ERRNO();
	if (ret_created)
		*ret_created = created;
	return 0;
}

int fvp_dir_remove_empty(int rootfd, const char *rel)
{
	_cleanup_close_ int pfd = -1;
	char last[256];

	pfd = open_parent(rootfd, rel, false, last, sizeof(last));
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	if (unlinkat(pfd, last, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return NEG_ERRNO();
	return 0;
}

/* Empty the directory open at @fd (consumed), depth-first, never following a symlink. */
static int empty_dir(int fd, int depth)
{
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (depth > DELETE_DEPTH_MAX) {
		close(fd);
		return -ELOOP;
	}
	d = fdopendir(fd);
	if (!d) {
		r = NEG_ERRNO();
		close(fd);
		return r;
	}
	while (r == 0 && (errno = 0, de = readdir(d))) {
		struct stat st;

		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT) /* a concurrent delete (another replica) */
				r = NEG_ERRNO();
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = openat2_dir(dirfd(d), de->d_name, O_RDONLY);

			if (sub == -ENOENT)
				continue;
			if (sub < 0) {
				r = sub; /* -EXDEV: a mount inside: never descended into */
				break;
			}
			r = empty_dir(sub, depth + 1);
			if (r == 0 && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 &&
			    errno != ENOENT)
				r = NEG_ERRNO();
		} else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
			r = NEG_ERRNO();
		}
	}
	if (r == 0 && errno)
		r = NEG_ERRNO();
	closedir(d);
	return r;
}

int fvp_dir_delete(int rootfd, const char *rel)
{
	_cleanup_close_ int pfd = -1;
	char last[256];
	int fd, r;

	pfd = open_parent(rootfd, rel, false, last, sizeof(last));
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	fd = openat2_dir(pfd, last, O_RDONLY);
	if (fd == -ENOENT)
		return 0;
	if (fd == -ENOTDIR || fd == -ELOOP) {
		/* a symlink or file where the directory was: remove the entry itself */
		if (unlinkat(pfd, last, 0) < 0 && errno != ENOENT)
			return NEG_ERRNO();
		return 0;
	}
	if (fd < 0)
		return fd;
	r = empty_dir(fd, 0);
	if (r < 0)
		return r;
	if (unlinkat(pfd, last, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return NEG_ERRNO();
	return 0;
}

/*
 * rename without replacing.  renameat2(RENAME_NOREPLACE) where the filesystem
 * has it; NFS does not (EINVAL), so there the new name is reserved first with
 * mkdirat(), which fails with EEXIST if it is taken (by anyone, atomically on
 * the server), and the directory is then renamed over the empty reservation.
 */
static int rename_noreplace(int dfd, const char *from, const char *to, bool is_dir)
{
	if (renameat2(dfd, from, dfd, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return NEG_ERRNO();
	if (!is_dir)
		return -EINVAL;
	if (mkdirat(dfd, to, 0700) < 0)
		return NEG_ERRNO();
	if (renameat(dfd, from, dfd, to) < 0) {
		int r = NEG_ERRNO();

		(void)unlinkat(dfd, to, AT_REMOVEDIR);
		return r;
	}
	return 0;
}

int fvp_dir_archive(int rootfd, const char *rel, char *ret, size_t len)
{
	_cleanup_close_ int pfd = -1;
	char last[256], to[300];
	struct stat st;
	size_t plen;
	int r;

	pfd = open_parent(rootfd, rel, false, last, sizeof(last));
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	if (fstatat(pfd, last, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : NEG_ERRNO();
	snprintf(to, sizeof(to), "archived-%s", last);
	r = rename_noreplace(pfd, last, to, S_ISDIR(st.st_mode));
	if (r == -EEXIST) {
		char stamp[32];
		time_t now = time(NULL);
		struct tm tm;

		gmtime_r(&now, &tm);
		strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
		snprintf(to, sizeof(to), "archived-%s-%s", last, stamp);
		r = rename_noreplace(pfd, last, to, S_ISDIR(st.st_mode));
	}
	if (r == -ENOENT)
		return 0; /* a concurrent archive (another replica) */
	if (r < 0)
		return r;
	plen = (size_t)(strrchr(rel, '/') ? strrchr(rel, '/') - rel + 1 : 0);
	if (ret)
		snprintf(ret, len, "%.*s%s", (int)plen, rel, to);
	return 0;
}
