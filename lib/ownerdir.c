/* SPDX-License-Identifier: Apache-2.0 */
/* Confined directory work below the root: see fv/ownerdir.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h> /* NAME_MAX: one path component */
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "fv/util.h"
#include "fv/ownerdir.h"

#define RESOLVE_CONFINED (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define DELETE_DEPTH_MAX 128
#define FVP_INSIDE_MAX 1100

static int openat2_dir(int dirfd, const char *name, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC),
		.resolve = RESOLVE_CONFINED,
	};
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));

	return fd < 0 ? NEG_ERRNO() : (int)fd;
}

int fv_ownerdir_open(int rootfd, const char *rel, int flags)
{
	return openat2_dir(rootfd, rel, flags);
}

int fv_ownerdir_root_open(const char *root)
{
	int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? NEG_ERRNO() : fd;
}

static int owner_read_at(int pfd, const char *name, struct fv_owner *ret);

/*
 * Split @rel into its parent (opened, confined) and last component.  With
 * @create, missing parents are made (0755).  With @inside, a parent that is
 * itself a volume directory (has an owner record) is -FV_OWNERDIR_E_NESTED, its path in
 * @inside.  Returns the parent fd or -errno.
 */
static int open_parent(int rootfd, const char *rel, bool create, char *last, size_t lastlen,
		       char *inside, size_t insidelen)
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
		char comp[NAME_MAX + 1];
		int next;

		if (!n || n >= sizeof(comp)) {
			close(fd);
			return -EINVAL;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (inside) {
			struct fv_owner o;

			if (owner_read_at(fd, comp, &o) != -ENOENT) {
				snprintf(inside, insidelen, "%.*s", (int)(p - rel + n), rel);
				close(fd);
				return -FV_OWNERDIR_E_NESTED;
			}
		}
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

/* --- owner records -------------------------------------------------------------------------- */

#define OWNER_MAX 4096

static void owner_name(const char *name, char *out, size_t len)
{
	snprintf(out, len, FV_OWNERDIR_PREFIX "%016llx", (unsigned long long)fv_hash64(name));
}

/* Read the record of @name in the open directory @pfd: 0, -ENOENT, -EBADMSG, -errno. */
static int owner_read_at(int pfd, const char *name, struct fv_owner *ret)
{
	char rec[64], buf[OWNER_MAX + 1];
	_cleanup_close_ int fd = -1;
	struct stat st;
	ssize_t n;
	bool magic = false;

	memset(ret, 0, sizeof(*ret));
	owner_name(name, rec, sizeof(rec));
	/* O_NONBLOCK: a FIFO planted under the name never blocks the open */
	fd = openat(pfd, rec, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno == ELOOP ? -EBADMSG : NEG_ERRNO();
	if (fstat(fd, &st) < 0)
		return NEG_ERRNO();
	if (!S_ISREG(st.st_mode) || st.st_size > OWNER_MAX)
		return -EBADMSG;
	n = read(fd, buf, OWNER_MAX);
	if (n < 0)
		return NEG_ERRNO();
	buf[n] = '\0';
	for (char *line = buf, *next; line && *line; line = next) {
		char *sp;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		sp = strchr(line, ' ');
		if (!sp)
			continue;
		*sp++ = '\0';
		if (streq(line, "flexvol-owner"))
			magic = streq(sp, "1");
		else if (streq(line, "claim"))
			snprintf(ret->claim, sizeof(ret->claim), "%s", sp);
		else if (streq(line, "pv"))
			snprintf(ret->pv, sizeof(ret->pv), "%s", sp);
		else if (streq(line, "name"))
			snprintf(ret->name, sizeof(ret->name), "%s", sp);
		else if (streq(line, "adopted"))
			ret->adopted = streq(sp, "yes");
		else if (streq(line, "size"))
			ret->size = strtoull(sp, NULL, 10);
	}
	/* the record is for this very name (a hash collision reads as someone else's) */
	if (!magic || !ret->claim[0])
		return -EBADMSG;
	if (!streq(ret->name, name))
		snprintf(ret->claim, sizeof(ret->claim), "(another directory: %.60s)", ret->name);
	return 0;
}

/*
 * Write the record of @name: a unique temporary file, then link(2) to the
 * record's name, which fails with EEXIST when another writer was first.
 * On NFS a link whose reply was lost is retried by the client and reports
 * EEXIST although it worked: the temporary file's link count tells.
 * @replace: rename(2) over the record instead (its owner changes hands).
 */
static int owner_write_at(int pfd, const char *name, const char *claim, const char *pv,
			  uint64_t size, bool adopted, bool replace)
{
	char rec[64], tmp[128], text[OWNER_MAX];
	struct timespec ts;
	struct stat st;
	int fd, n, r = 0;

	owner_name(name, rec, sizeof(rec));
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%lx", rec, (int)getpid(), (unsigned long)ts.tv_nsec);
	n = snprintf(text, sizeof(text),
		     "flexvol-owner 1\nclaim %s\npv %s\nname %s\nadopted %s\n", claim, pv, name,
		     adopted ? "yes" : "no");
	if (size && n > 0 && (size_t)n < sizeof(text))
		n += snprintf(text + n, sizeof(text) - (size_t)n, "size %llu\n",
			      (unsigned long long)size);
	if (n < 0 || (size_t)n >= sizeof(text))
		return -ENAMETOOLONG;
	fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return NEG_ERRNO();
	errno = 0;
	if (write(fd, text, (size_t)n) != n || fsync(fd) < 0)
		r = NEG_ERRNO(); /* -EIO for a short write */
	if (close(fd) < 0 && r == 0)
		r = NEG_ERRNO();
	if (r == 0 && replace) {
		if (renameat(pfd, tmp, pfd, rec) == 0)
			return 0;
		r = NEG_ERRNO();
	}
	if (r == 0 && linkat(pfd, tmp, pfd, rec, 0) < 0) {
		r = NEG_ERRNO();
		if (fstatat(pfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_nlink == 2)
			r = 0;
	}
	(void)unlinkat(pfd, tmp, 0);
	return r;
}

static int owner_remove_at(int pfd, const char *name)
{
	char rec[64];

	owner_name(name, rec, sizeof(rec));
	if (unlinkat(pfd, rec, 0) < 0 && errno != ENOENT)
		return NEG_ERRNO();
	return 0;
}

int fv_ownerdir_owner(int rootfd, const char *rel, struct fv_owner *ret)
{
	_cleanup_close_ int pfd = -1;
	char last[NAME_MAX + 1];

	pfd = open_parent(rootfd, rel, false, last, sizeof(last), NULL, 0);
	if (pfd < 0)
		return pfd;
	return owner_read_at(pfd, last, ret);
}

/*
 * The record of @last in @pfd must name @claim: 0 when it does, 1 when there
 * is neither record nor directory (nothing to do), -FV_OWNERDIR_E_UNOWNED for a directory
 * without a record, -FV_OWNERDIR_E_OWNED for another claim's (*@other), -errno.
 */
static int owned_by(int pfd, const char *last, const char *claim, struct fv_owner *other)
{
	struct fv_owner o;
	struct stat st;
	int r;

	r = owner_read_at(pfd, last, &o);
	if (r == -ENOENT) {
		if (fstatat(pfd, last, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return errno == ENOENT ? 1 : NEG_ERRNO();
		return -FV_OWNERDIR_E_UNOWNED;
	}
	if (r < 0)
		return r;
	if (!streq(o.claim, claim)) {
		if (other)
			*other = o;
		return -FV_OWNERDIR_E_OWNED;
	}
	return 0;
}

int fv_ownerdir_record(int rootfd, const char *rel, const char *claim, const char *pv,
		   struct fv_owner *other)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	char last[NAME_MAX + 1];
	int r;

	pfd = open_parent(rootfd, rel, false, last, sizeof(last), NULL, 0);
	if (pfd < 0)
		return pfd;
	r = owned_by(pfd, last, claim, other);
	if (r == 0)
		return 0;
	if (r > 0)
		return -ENOENT;
	if (r != -FV_OWNERDIR_E_UNOWNED)
		return r;
	/* a directory, reached without a symlink or another mount */
	fd = openat2_dir(pfd, last, O_RDONLY);
	if (fd < 0)
		return fd;
	r = owner_write_at(pfd, last, claim, pv, 0, true, false);
	if (r == -EEXIST)
		return owned_by(pfd, last, claim, other);
	return r < 0 ? r : 1;
}

int fv_ownerdir_transfer(int rootfd, const char *rel, const char *from, const char *to,
			 struct fv_owner *other)
{
	_cleanup_close_ int pfd = -1;
	char last[NAME_MAX + 1];
	struct fv_owner o;
	int r;

	pfd = open_parent(rootfd, rel, false, last, sizeof(last), NULL, 0);
	if (pfd < 0)
		return pfd;
	r = owned_by(pfd, last, to, &o);
	if (r <= 0 && r != -FV_OWNERDIR_E_OWNED)
		return r;
	if (r > 0)
		return -ENOENT;
	if (!streq(o.claim, from)) {
		if (other)
			*other = o;
		return -FV_OWNERDIR_E_OWNED;
	}
	r = owner_write_at(pfd, last, to, o.pv, o.size, o.adopted, true);
	return r < 0 ? r : 1;
}

/*
 * Does the directory @name in @pfd hold owner records, i.e. other volumes'
 * directories?  Adopting it would hand them to one claim.  (One level: a
 * volume deeper down is not looked for; a whole tree could be huge.)
 * 1 yes, 0 no, -errno.
 */
static int holds_volumes(int pfd, const char *name)
{
	int fd = openat2_dir(pfd, name, O_RDONLY), r = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return fd;
	d = fdopendir(fd);
	if (!d) {
		r = NEG_ERRNO();
		close(fd);
		return r;
	}
	while ((errno = 0, de = readdir(d)))
		if (!strncmp(de->d_name, FV_OWNERDIR_PREFIX, strlen(FV_OWNERDIR_PREFIX))) {
			r = 1;
			break;
		}
	if (!de && errno)
		r = NEG_ERRNO();
	closedir(d);
	return r;
}

int fv_ownerdir_make(int rootfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, const char *claim,
		 const char *pv, uint64_t size, bool adopt, enum fv_ownerdir_made *made,
		 struct fv_owner *other, char *inside, size_t insidelen)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	struct fv_owner o;
	char last[NAME_MAX + 1], where[FVP_INSIDE_MAX] = "";
	struct stat st;
	enum fv_ownerdir_made m = FV_OWNERDIR_NEW;
	int r;

	pfd = open_parent(rootfd, rel, true, last, sizeof(last), where, sizeof(where));
	if (pfd == -FV_OWNERDIR_E_NESTED && inside)
		snprintf(inside, insidelen, "%s", where);
	if (pfd < 0)
		return pfd;
	for (int tries = 0;; tries++) {
		r = owner_read_at(pfd, last, &o);
		if (r == 0) {
			if (!streq(o.claim, claim)) {
				if (other)
					*other = o;
				return -FV_OWNERDIR_E_OWNED;
			}
			m = o.adopted ? FV_OWNERDIR_ADOPTED : FV_OWNERDIR_OURS;
			break;
		}
		if (r != -ENOENT || tries > 0)
			return r == -ENOENT ? -EIO : r;
		/* no record: a directory there is someone else's unless adopted */
		if (fstatat(pfd, last, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (!adopt)
				return -FV_OWNERDIR_E_UNOWNED;
			if (!S_ISDIR(st.st_mode))
				return -ENOTDIR;
			r = holds_volumes(pfd, last);
			if (r != 0) {
				if (r > 0 && inside)
					snprintf(inside, insidelen, "%s", rel);
				return r > 0 ? -FV_OWNERDIR_E_HOLDS : r;
			}
			m = FV_OWNERDIR_ADOPTED;
		} else if (errno != ENOENT) {
			return NEG_ERRNO();
		}
		r = owner_write_at(pfd, last, claim, pv, size, m == FV_OWNERDIR_ADOPTED, false);
		if (r == 0)
			break;
		if (r != -EEXIST)
			return r;
		/* another writer was first: read what it wrote */
	}
	if (mkdirat(pfd, last, 0700) == 0)
		m = FV_OWNERDIR_NEW;
	else if (errno != EEXIST)
		return NEG_ERRNO();
	else if (m == FV_OWNERDIR_NEW)
		m = FV_OWNERDIR_OURS; /* a second replica made it for this claim meanwhile */
	/* not a symlink, not a file, not another mount: openat2 says so */
	fd = openat2_dir(pfd, last, O_RDONLY);
	if (fd < 0)
		return fd;
	if (m != FV_OWNERDIR_ADOPTED) {
		/* owner first: chown clears the set-id bits that the mode may carry */
		if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) < 0)
			return NEG_ERRNO();
		if (fchmod(fd, mode) < 0)
			return NEG_ERRNO();
	}
	if (made)
		*made = m;
	return 0;
}

int fv_ownerdir_remove_empty(int rootfd, const char *rel, const char *claim, struct fv_owner *other)
{
	_cleanup_close_ int pfd = -1;
	char last[NAME_MAX + 1];
	int r;

	pfd = open_parent(rootfd, rel, false, last, sizeof(last), NULL, 0);
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	r = owned_by(pfd, last, claim, other);
	if (r != 0)
		return r > 0 ? 0 : r;
	if (unlinkat(pfd, last, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return errno == EEXIST ? -ENOTEMPTY : NEG_ERRNO();
	return owner_remove_at(pfd, last);
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

int fv_ownerdir_delete(int rootfd, const char *rel, const char *claim, struct fv_owner *other)
{
	_cleanup_close_ int pfd = -1;
	char last[NAME_MAX + 1];
	int fd, r;

	pfd = open_parent(rootfd, rel, false, last, sizeof(last), NULL, 0);
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	r = owned_by(pfd, last, claim, other);
	if (r != 0)
		return r > 0 ? 0 : r;
	fd = openat2_dir(pfd, last, O_RDONLY);
	if (fd == -ENOTDIR || fd == -ELOOP) {
		/* a symlink or file where the directory was: remove the entry itself */
		if (unlinkat(pfd, last, 0) < 0 && errno != ENOENT)
			return NEG_ERRNO();
		return owner_remove_at(pfd, last);
	}
	if (fd < 0 && fd != -ENOENT)
		return fd;
	if (fd >= 0) {
		r = empty_dir(fd, 0);
		if (r < 0)
			return r;
		if (unlinkat(pfd, last, AT_REMOVEDIR) < 0 && errno != ENOENT)
			return NEG_ERRNO();
	}
	return owner_remove_at(pfd, last);
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

void fv_ownerdir_archive_name(const char *last, const char *stamp, char *out, size_t len)
{
	/* NAME_MAX is 255 on Linux filesystems and NFS alike */
	size_t suffix = stamp ? strlen(stamp) + 1 : 0, room = 255 - strlen("archived-") - suffix;

	if (strlen(last) <= room)
		snprintf(out, len, "archived-%s%s%s", last, stamp ? "-" : "", stamp ? stamp : "");
	else
		snprintf(out, len, "archived-%.*s-%016llx%s%s", (int)(room - 17), last,
			 (unsigned long long)fv_hash64(last), stamp ? "-" : "", stamp ? stamp : "");
}

int fv_ownerdir_archive(int rootfd, const char *rel, const char *claim, struct fv_owner *other,
		    char *ret, size_t len)
{
	_cleanup_close_ int pfd = -1;
	char last[NAME_MAX + 1], to[300];
	struct stat st;
	size_t plen;
	int r;

	if (ret && len)
		ret[0] = '\0';
	pfd = open_parent(rootfd, rel, false, last, sizeof(last), NULL, 0);
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	r = owned_by(pfd, last, claim, other);
	if (r != 0)
		return r > 0 ? 0 : r;
	if (fstatat(pfd, last, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return NEG_ERRNO();
		/* archived before, the record left by a crash */
		return owner_remove_at(pfd, last);
	}
	fv_ownerdir_archive_name(last, NULL, to, sizeof(to));
	r = rename_noreplace(pfd, last, to, S_ISDIR(st.st_mode));
	if (r == -EEXIST) {
		char stamp[32];
		time_t now = time(NULL);
		struct tm tm;

		gmtime_r(&now, &tm);
		strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
		fv_ownerdir_archive_name(last, stamp, to, sizeof(to));
		r = rename_noreplace(pfd, last, to, S_ISDIR(st.st_mode));
	}
	if (r == -ENOENT)
		return owner_remove_at(pfd, last); /* a concurrent archive (another replica) */
	if (r < 0)
		return r;
	plen = (size_t)(strrchr(rel, '/') ? strrchr(rel, '/') - rel + 1 : 0);
	if (ret)
		snprintf(ret, len, "%.*s%s", (int)plen, rel, to);
	return owner_remove_at(pfd, last);
}
