/* SPDX-License-Identifier: Apache-2.0 */
/* Strict parsers, path confinement, small file helpers. */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "fv/macro.h"
#include "fv/util.h"

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

/*
 * A quantity is "<decimal>[<suffix>]" where decimal is digits with an
 * optional fraction, and suffix is a binary (Ki..Ei) or decimal (k..E)
 * multiplier, or an exponent "e<N>"/"E<N>".  We compute in integers:
 * mantissa digits as an integer, scaled by the multiplier and divided by
 * 10^fraction-digits, which must divide exactly (a byte count is whole).
 */
int fv_parse_quantity(const char *s, uint64_t *ret)
{
	static const struct {
		const char *sfx;
		uint64_t mul;
	} sfx[] = {
		{ "Ki", 1ULL << 10 }, { "Mi", 1ULL << 20 }, { "Gi", 1ULL << 30 },
		{ "Ti", 1ULL << 40 }, { "Pi", 1ULL << 50 }, { "Ei", 1ULL << 60 },
		{ "k", 1000ULL }, { "M", 1000000ULL }, { "G", 1000000000ULL },
		{ "T", 1000000000000ULL }, { "P", 1000000000000000ULL },
		{ "E", 1000000000000000000ULL }, { "", 1 },
	};
	unsigned __int128 mant = 0, mul = 1, div = 1, v;
	const char *p = s;
	bool digits = false, dot = false;

	if (!s || !*s || strlen(s) > 64)
		return -EINVAL;
	for (; *p; p++) {
		if (*p >= '0' && *p <= '9') {
			mant = mant * 10 + (unsigned)(*p - '0');
			/* 10^39 would wrap the divisor: far more precision than bytes need */
			if (dot && __builtin_mul_overflow(div, 10, &div))
				return -EINVAL;
			digits = true;
			if (mant > (unsigned __int128)UINT64_MAX * 1000)
				return -ERANGE;
		} else if (*p == '.' && !dot) {
			dot = true;
		} else
			break;
	}
	if (!digits || p[-1] == '.')
		return -EINVAL;
	if ((*p == 'e' || *p == 'E') && p[1] >= '0' && p[1] <= '9') {
		uint64_t e;

		if (fv_parse_u64(p + 1, &e) < 0 || e > 19)
			return -EINVAL;
		while (e--)
			mul *= 10;
	} else {
		size_t i;

		for (i = 0; i < ARRAY_SIZE(sfx); i++)
			if (streq(p, sfx[i].sfx))
				break;
		if (i == ARRAY_SIZE(sfx))
			return -EINVAL;
		mul = sfx[i].mul;
	}
	/* mant < 2^75 and mul <= 10^19: the product can pass 2^128 and must not wrap */
	if (__builtin_mul_overflow(mant, mul, &v))
		return -ERANGE;
	if (v % div)
		return -EINVAL;
	v /= div;
	if (v > UINT64_MAX)
		return -ERANGE;
	*ret = (uint64_t)v;
	return 0;
}

int fv_path_confine(const char *root, const char *path, char *ret, size_t len)
{
	size_t rl, out = 0;
	const char *p;

	if (!path || !*path || !root || root[0] != '/')
		return -EINVAL;
	for (p = path; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return -EINVAL;
	if (path[0] == '/') {
		rl = strlen(root);
		while (rl > 1 && root[rl - 1] == '/')
			rl--;
		if (strncmp(path, root, rl) != 0 || (path[rl] != '/' && rl > 1))
			return -EINVAL;
		path += rl;
	}
	/* walk components: skip empty and ".", refuse "..", join with '/' */
	for (p = path; *p;) {
		size_t n;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		n = strcspn(p, "/");
		if (n == 1 && p[0] == '.') {
			p += n;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (out + n + 2 > len)
			return -ENAMETOOLONG;
		if (out)
			ret[out++] = '/';
		memcpy(ret + out, p, n);
		out += n;
		p += n;
	}
	if (!out || path[strlen(path) - 1] == '/')
		return -EINVAL;
	ret[out] = '\0';
	return 0;
}

int fv_open_beneath(int rootfd, const char *rel, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));

	return fd < 0 ? NEG_ERRNO() : (int)fd;
}

int fv_open_regular_beneath(int rootfd, const char *rel, int flags, struct stat *st)
{
	_cleanup_close_ int pfd = -1;
	char proc[32];
	struct stat st2;
	int fd;

	/*
	 * O_PATH first: it opens nothing (no FIFO wait, no driver open(), no
	 * inotify IN_OPEN), so a FIFO, device node or socket planted in the
	 * root is only looked at, never opened.
	 */
	pfd = fv_open_beneath(rootfd, rel, O_PATH, 0);
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, st) < 0)
		return NEG_ERRNO();
	if (!S_ISREG(st->st_mode))
		return -EMEDIUMTYPE;
	/*
	 * Re-open that very inode through its O_PATH descriptor: nothing can
	 * be swapped in between (the check of dev/ino says so once more).
	 * O_NONBLOCK is for the impossible case only, and is taken off again.
	 */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
	fd = open(proc, (flags & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENXIO : NEG_ERRNO(); /* no /proc: not "the file is missing" */
	if (fstat(fd, &st2) < 0 || st2.st_dev != st->st_dev || st2.st_ino != st->st_ino ||
	    !S_ISREG(st2.st_mode) || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		close(fd);
		return -EMEDIUMTYPE;
	}
	*st = st2;
	return fd;
}

const char *fv_file_type(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a socket";
	case S_IFLNK:
		return "a symlink";
	default:
		return "of an unknown type";
	}
}

/* The per-component walk behind fv_dir_open() where openat2() is missing (Linux < 5.6). */
static int walk_nofollow(const char *rel, bool parent)
{
	_cleanup_close_ int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	char buf[PATH_MAX];
	char *save = NULL, *c, *next;

	if (fd < 0)
		return NEG_ERRNO();
	snprintf(buf, sizeof(buf), "%s", rel);
	for (c = strtok_r(buf, "/", &save); c; c = next) {
		struct stat st;
		int nfd;

		next = strtok_r(NULL, "/", &save);
		if (!next && parent)
			break;
		/* O_PATH|O_NOFOLLOW gives the link itself, magic links (/proc/self/root) included */
		nfd = openat(fd, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0)
			return NEG_ERRNO();
		close(fd);
		fd = nfd;
		if (fstat(fd, &st) < 0)
			return NEG_ERRNO();
		if (S_ISLNK(st.st_mode))
			return -ELOOP;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
	}
	return TAKE_FD(fd);
}

int fv_dir_open(const char *path, unsigned int flags, char *norm, size_t len)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	/* the path made relative to "/" after its '/': one buffer, not two (a page of stack) */
	char walk[PATH_MAX], *slash = NULL, cut = '\0';
	long fd = -1;

	walk[0] = '/';
	if (!path || path[0] != '/' || fv_path_confine("/", path, walk + 1, sizeof(walk) - 1) < 0)
		return -EINVAL;
	if (norm) {
		if (strlen(walk) + 1 > len)
			return -ENAMETOOLONG;
		snprintf(norm, len, "%s", walk);
	}
	if (flags & FV_DIR_PARENT) {
		slash = strrchr(walk, '/');
		slash += slash == walk; /* the parent of "/x" is "/" */
		cut = *slash;
		*slash = '\0';
	}
	if (!(flags & FV_DIR_COMPAT)) {
		fd = syscall(SYS_openat2, AT_FDCWD, walk, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		if (errno != ENOSYS)
			return NEG_ERRNO();
	}
	if (slash)
		*slash = cut;
	return walk_nofollow(walk + 1, flags & FV_DIR_PARENT);
}

int fv_name_escape(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (isalnum(c) || c == '-' || c == '_' || (c == '.' && o > 0)) {
			if (o + 2 > len)
				return -ENAMETOOLONG;
			buf[o++] = (char)c;
		} else {
			if (o + 4 > len)
				return -ENAMETOOLONG;
			snprintf(buf + o, 4, "%%%02X", c);
			o += 3;
		}
	}
	buf[o] = '\0';
	return 0;
}

int fv_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	char *p;

	if (!*path)
		return -EINVAL;
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	/* the common case in one call: every parent there already */
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return NEG_ERRNO();
	strcpy(buf, path);
	for (p = buf + 1;; p++) {
		if (*p == '/' || !*p) {
			char c = *p;

			*p = '\0';
			if (mkdir(buf, mode) < 0 && errno != EEXIST)
				return NEG_ERRNO();
			*p = c;
			if (!c)
				break;
		}
	}
	return 0;
}

ssize_t fv_read_line(const char *path, char *buf, size_t len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return NEG_ERRNO();
	n = read(fd, buf, len - 1);
	if (n < 0)
		return NEG_ERRNO();
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return n;
}

uint64_t fv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t fv_hash64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a: offset basis and prime */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

uint32_t fv_hash32(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

int fv_name_key(const char *s, char *buf, size_t len)
{
	char big[PATH_MAX * 3];
	int r;

	if (len < 40)
		return -EINVAL;
	r = fv_name_escape(s, big, sizeof(big));
	if (r == 0 && strlen(big) < len) {
		strcpy(buf, big);
		return 0;
	}
	if (r < 0 && r != -ENAMETOOLONG)
		return r;
	/* too long for one name: a readable prefix and a hash of the whole */
	snprintf(buf, len, "%.*s~%016llx", (int)(len - 18), big, (unsigned long long)fv_hash64(s));
	return 0;
}

const char *fv_path_last(const char *path)
{
	const char *b = strrchr(path, '/');

	return b && b[1] ? b + 1 : path;
}

size_t fv_join(char *buf, size_t size, ...)
{
	const char *s;
	size_t len = 0;
	va_list ap;

	if (!size)
		return 0;
	va_start(ap, size);
	while ((s = va_arg(ap, const char *)) && len < size - 1) {
		size_t n = strnlen(s, size - 1 - len);

		memcpy(buf + len, s, n);
		len += n;
	}
	va_end(ap);
	buf[len] = '\0';
	return len;
}

/* RFC 1123 host name: labels of 1-63 [A-Za-z0-9-], no '-' at either end, at most 253 in all. */
static bool is_host_name(const char *s)
{
	size_t len = strlen(s), label = 0;

	if (!len || len > 253)
		return false;
	for (const char *p = s;; p++) {
		if (*p == '.' || !*p) {
			if (!label || label > 63 || p[-1] == '-' || p[-(long)label] == '-')
				return false;
			if (!*p)
				return true;
			label = 0;
			continue;
		}
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
		label++;
	}
}

int fv_host_check(const char *s)
{
	size_t n = strlen(s);
	unsigned char addr[16];

	if (s[0] == '[') {
		char inner[64];

		/* no zone ids: "%" is not in an address inet_pton accepts */
		if (n < 3 || s[n - 1] != ']' || n - 2 >= sizeof(inner))
			return -EINVAL;
		snprintf(inner, sizeof(inner), "%.*s", (int)(n - 2), s + 1);
		return inet_pton(AF_INET6, inner, addr) == 1 ? FV_HOST_IPV6 : -EINVAL;
	}
	if (strspn(s, "0123456789.") == n)
		/* all digits and dots must be a whole dotted quad, not a short form */
		return inet_pton(AF_INET, s, addr) == 1 ? FV_HOST_IPV4 : -EINVAL;
	if (strchr(s, ':'))
		return -EAFNOSUPPORT; /* a bare IPv6 address: it must be bracketed */
	return is_host_name(s) ? FV_HOST_NAME : -EINVAL;
}
