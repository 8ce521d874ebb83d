/* SPDX-License-Identifier: Apache-2.0 */
/* Point-in-time copies: the freezer, a file, a tree (fv/copy.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fv/copy.h"
#include "fv/macro.h"
#include "fv/util.h"

/* How long the freezer may take to answer (FIFREEZE flushes the filesystem first). */
#define FREEZE_ANSWER_MS 30000
/* A tree deeper than this is refused rather than walked (the recursion's bound). */
#define TREE_DEPTH_MAX 256

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * The freezer, in the forked child: only async-signal-safe calls (the
 * caller has threads).  Its descriptors: 0 the directory, 1 the caller's
 * pipe (EOF or a byte: thaw), 2 its answers (an int each: the freeze's
 * errno, then the thaw's, or ETIMEDOUT when the bound came first).
 */
static _Noreturn void freezer(unsigned int max_ms)
{
	uint64_t end = mono_ms() + max_ms;
	struct pollfd p = { .fd = 1, .events = POLLIN };
	int r = ioctl(0, FIFREEZE, 0) < 0 ? errno : 0, k;
	bool told = false;

	(void)!write(2, &r, sizeof(r));
	if (r)
		_exit(1);
	for (;;) {
		uint64_t now = mono_ms();

		if (now >= end)
			break;
		k = poll(&p, 1, (int)(end - now));
		if (k > 0) {
			told = true;
			break;
		}
		if (k < 0 && errno != EINTR)
			break;
	}
	r = ioctl(0, FITHAW, 0) < 0 ? errno : 0;
	if (r == 0 && !told)
		r = ETIMEDOUT;
	(void)!write(2, &r, sizeof(r));
	_exit(0);
}

/* One int from the freezer within @ms: 0 and *ret, or -ETIMEDOUT / -EPIPE (it is gone). */
static int hear(int fd, unsigned int ms, int *ret)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t end = mono_ms() + ms;
	ssize_t n;

	for (;;) {
		uint64_t now = mono_ms();
		int k = now >= end ? 0 : poll(&p, 1, (int)(end - now));

		if (k == 0)
			return -ETIMEDOUT;
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return NEG_ERRNO();
		n = read(fd, ret, sizeof(*ret));
		if (n == (ssize_t)sizeof(*ret))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return -EPIPE;
	}
}

int fv_freeze(struct fv_freeze *f, const char *dir, unsigned int max_ms, char *msg, size_t len)
{
	int tell[2] = { -1, -1 }, ans[2] = { -1, -1 }, pathfd, r, answer;
	pid_t pid;

	f->pid = -1;
	f->tell = f->hear = f->dirfd = -1;
	pathfd = fv_dir_open(dir, 0, NULL, 0);
	if (pathfd < 0) {
		snprintf(msg, len, "cannot open '%s': %s", dir, strerror(-pathfd));
		return pathfd;
	}
	/* ioctl() wants a real open: the directory itself, through its checked O_PATH handle */
	f->dirfd = openat(pathfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = f->dirfd < 0 ? NEG_ERRNO() : 0;
	close(pathfd);
	if (r == 0 && (pipe2(tell, O_CLOEXEC) < 0 || pipe2(ans, O_CLOEXEC) < 0))
		r = NEG_ERRNO();
	if (r < 0) {
		snprintf(msg, len, "cannot prepare the freeze of '%s': %s", dir, strerror(-r));
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		r = NEG_ERRNO();
		snprintf(msg, len, "cannot start the freezer: %s", strerror(-r));
		goto fail;
	}
	if (pid == 0) {
		/* nothing of the caller's is held by the freezer but these three */
		if (dup2(f->dirfd, 0) < 0 || dup2(tell[0], 1) < 0 || dup2(ans[1], 2) < 0)
			_exit(1);
		syscall(SYS_close_range, 3U, ~0U, 0U);
		freezer(max_ms);
	}
	close(tell[0]);
	close(ans[1]);
	f->pid = pid;
	f->tell = tell[1];
	f->hear = ans[0];
	r = hear(f->hear, FREEZE_ANSWER_MS, &answer);
	if (r == 0 && answer == 0)
		return 0;
	if (r == 0)
		r = -answer;
	snprintf(msg, len, "cannot freeze the filesystem at '%s': %s", dir, strerror(-r));
	fv_thaw(f);
	return r;
fail:
	for (int i = 0; i < 2; i++) {
		if (tell[i] >= 0)
			close(tell[i]);
		if (ans[i] >= 0)
			close(ans[i]);
	}
	if (f->dirfd >= 0)
		close(f->dirfd);
	f->dirfd = -1;
	return r;
}

int fv_thaw(struct fv_freeze *f)
{
	int r = 0, answer = 0, k;

	if (f->pid < 0)
		return 0;
	close(f->tell); /* EOF: the freezer thaws */
	k = hear(f->hear, FREEZE_ANSWER_MS, &answer);
	if (k == 0 && answer == ETIMEDOUT)
		r = -ETIMEDOUT;
	else if (k == 0 && answer)
		r = -answer;
	else if (k < 0 && ioctl(f->dirfd, FITHAW, 0) < 0 && errno != EINVAL)
		r = NEG_ERRNO(); /* the freezer died before thawing: ours to do (EINVAL: not frozen) */
	if (k < 0)
		kill(f->pid, SIGKILL);
	while (waitpid(f->pid, NULL, 0) < 0 && errno == EINTR)
		;
	close(f->hear);
	close(f->dirfd);
	f->pid = f->tell = f->hear = f->dirfd = -1;
	return r;
}

/* @n bytes at @off of @src into @dst at the same offset. */
static int copy_range(int src, int dst, off_t off, off_t n)
{
	off_t in = off, out = off;

	while (n > 0) {
		ssize_t k = copy_file_range(src, &in, dst, &out, (size_t)n, 0);

		if (k > 0) {
			n -= k;
			continue;
		}
		if (k == 0)
			return -EIO; /* the source is shorter than it said */
		if (errno == EINTR)
			continue;
		if (errno != EXDEV && errno != ENOSYS && errno != EOPNOTSUPP && errno != EINVAL)
			return NEG_ERRNO();
		/* no copy_file_range between these: plain reads and writes */
		while (n > 0) {
			char b[1 << 16];
			ssize_t rd = pread(src, b, (size_t)(n < (off_t)sizeof(b) ? n : (off_t)sizeof(b)), in);

			if (rd < 0 && errno == EINTR)
				continue;
			if (rd <= 0)
				return rd < 0 ? NEG_ERRNO() : -EIO;
			for (ssize_t w = 0; w < rd;) {
				ssize_t k2 = pwrite(dst, b + w, (size_t)(rd - w), out + w);

				if (k2 < 0 && errno == EINTR)
					continue;
				if (k2 < 0)
					return NEG_ERRNO();
				w += k2;
			}
			in += rd;
			out += rd;
			n -= rd;
		}
	}
	return 0;
}

int fv_copy_file(int src, int dst, uint64_t deadline_ms, bool *ret_reflink)
{
	struct stat st;
	off_t off = 0;
	int r;

	if (ret_reflink)
		*ret_reflink = false;
	if (fstat(src, &st) < 0)
		return NEG_ERRNO();
	if (ioctl(dst, FICLONE, src) == 0) {
		if (ret_reflink)
			*ret_reflink = true;
		return 0;
	}
	/* no shared blocks here (ext4, tmpfs, another filesystem): the data, holes kept */
	while (off < st.st_size) {
		off_t data = lseek(src, off, SEEK_DATA), hole;

		if (data < 0 && errno == ENXIO)
			break; /* a hole to the end */
		if (data < 0)
			return NEG_ERRNO();
		hole = lseek(src, data, SEEK_HOLE);
		if (hole < 0)
			return NEG_ERRNO();
		r = copy_range(src, dst, data, hole - data);
		if (r < 0)
			return r;
		if (deadline_ms && fv_now_ms() >= deadline_ms)
			return -ETIMEDOUT;
		off = hole;
	}
	return ftruncate(dst, st.st_size) < 0 ? NEG_ERRNO() : 0;
}

/* Open @name beneath @dirfd with @flags, following nothing and leaving nothing. */
static int open_beneath(int dirfd, const char *name, int flags)
{
	struct open_how how = { .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
					   RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
	long fd;

	do
		fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);
	return fd < 0 ? NEG_ERRNO() : (int)fd;
}

/* The owner, mode and times of @st on @name in @dirfd (a symlink: owner and times only). */
static int keep_attrs(int dirfd, const char *name, const struct stat *st)
{
	struct timespec t[2] = { st->st_atim, st->st_mtim };

	if (fchownat(dirfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
		return NEG_ERRNO();
	if (!S_ISLNK(st->st_mode) && fchmodat(dirfd, name, st->st_mode & 07777, 0) < 0)
		return NEG_ERRNO();
	return utimensat(dirfd, name, t, AT_SYMLINK_NOFOLLOW) < 0 ? NEG_ERRNO() : 0;
}

struct tree {
	uint64_t deadline, bytes;
	unsigned int skipped;
};

static int copy_dir(int from, int to, struct tree *t, unsigned int depth);

/* Entry @name of @from, whatever it is, into @to. */
static int copy_entry(int from, int to, const char *name, struct tree *t, unsigned int depth)
{
	_cleanup_close_ int p = open_beneath(from, name, O_PATH), s = -1, d = -1;
	struct stat st;
	char target[4096];
	ssize_t n;
	int r;

	if (p < 0)
		return p;
	if (fstat(p, &st) < 0)
		return NEG_ERRNO();
	if (S_ISDIR(st.st_mode)) {
		if (mkdirat(to, name, 0700) < 0)
			return NEG_ERRNO();
		s = open_beneath(from, name, O_RDONLY | O_DIRECTORY);
		d = open_beneath(to, name, O_RDONLY | O_DIRECTORY);
		if (s < 0 || d < 0)
			return s < 0 ? s : d;
		r = copy_dir(s, d, t, depth + 1);
	} else if (S_ISREG(st.st_mode)) {
		struct stat now;

		/* opened only once seen regular: never a FIFO; and the same inode as looked at */
		s = fv_open_regular_beneath(from, name, O_RDONLY, &now);
		if (s < 0)
			return s == -EMEDIUMTYPE ? -EAGAIN : s;
		if (now.st_ino != st.st_ino || now.st_dev != st.st_dev)
			return -EAGAIN; /* swapped meanwhile */
		d = openat(to, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (d < 0)
			return NEG_ERRNO();
		r = fv_copy_file(s, d, t->deadline, NULL);
		t->bytes += (uint64_t)st.st_size;
	} else if (S_ISLNK(st.st_mode)) {
		n = readlinkat(from, name, target, sizeof(target) - 1);
		if (n < 0)
			return NEG_ERRNO();
		target[n] = '\0';
		r = symlinkat(target, to, name) < 0 ? NEG_ERRNO() : 0;
	} else {
		t->skipped++; /* a device node, FIFO or socket: not a volume's data to copy */
		return 0;
	}
	return r < 0 ? r : keep_attrs(to, name, &st);
}

static int copy_dir(int from, int to, struct tree *t, unsigned int depth)
{
	DIR *dir;
	struct dirent *e;
	int fd, r = 0;

	if (depth > TREE_DEPTH_MAX)
		return -ELOOP;
	if (t->deadline && fv_now_ms() >= t->deadline)
		return -ETIMEDOUT;
	fd = openat(from, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NEG_ERRNO();
	dir = fdopendir(fd);
	if (!dir) {
		r = NEG_ERRNO();
		close(fd);
		return r;
	}
	while (r == 0 && (errno = 0, e = readdir(dir))) {
		if (streq(e->d_name, ".") || streq(e->d_name, ".."))
			continue;
		r = copy_entry(from, to, e->d_name, t, depth);
	}
	if (r == 0 && errno)
		r = NEG_ERRNO();
	closedir(dir);
	return r;
}

int fv_copy_tree(int from, int to, uint64_t deadline_ms, uint64_t *ret_bytes,
		 unsigned int *ret_skipped)
{
	struct tree t = { .deadline = deadline_ms };
	int r = copy_dir(from, to, &t, 0);

	if (ret_bytes)
		*ret_bytes = t.bytes;
	if (ret_skipped)
		*ret_skipped = t.skipped;
	return r;
}
