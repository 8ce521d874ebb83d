/* SPDX-License-Identifier: Apache-2.0 */
/* Path confinement (lexical and openat2) and file-name escaping. */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "unit.h"
#include "fv/util.h"

#define ROOT "/var/lib/flexvol/loop"

static void want_ok(const char *root, const char *path, const char *want, int line)
{
	char buf[PATH_MAX] = "";
	int r = fv_path_confine(root, path, buf, sizeof(buf));

	if (r != 0 || strcmp(buf, want) != 0)
		unit_fail(__FILE__, line, "confine('%s', '%s'): got %d '%s', want 0 '%s'", root,
			  path, r, r == 0 ? buf : "", want);
}

static void want_bad(const char *root, const char *path, int err, int line)
{
	char buf[PATH_MAX];
	int r = fv_path_confine(root, path, buf, sizeof(buf));

	if (r != err)
		unit_fail(__FILE__, line, "confine('%s', '%s'): got %d, want %d", root,
			  path ? path : "(null)", r, err);
}

#define OK(path, want) want_ok(ROOT, (path), (want), __LINE__)
#define BAD(path) want_bad(ROOT, (path), -EINVAL, __LINE__)

TEST(confine_relative)
{
	OK("a.img", "a.img");
	OK("sub/a.img", "sub/a.img");
	OK("./a.img", "a.img");
	OK("a//b.img", "a/b.img");
	OK("a/./b/./c.img", "a/b/c.img");
	OK("...img", "...img");	/* dots, but not ".." */
	OK("..a/b..", "..a/b..");
	OK("a b.img", "a b.img");	/* spaces are not control characters */
	OK("\xc3\xbc.img", "\xc3\xbc.img");
}

TEST(confine_absolute)
{
	OK(ROOT "/a.img", "a.img");
	OK(ROOT "/sub/a.img", "sub/a.img");
	OK(ROOT "//sub//./a.img", "sub/a.img");
	/* the root itself names no file */
	BAD(ROOT);
	BAD(ROOT "/");
	BAD(ROOT "/.");
	/* outside the root */
	BAD("/etc/passwd");
	BAD("/var/lib/flexvol");
	BAD("/var/lib/flexvol/loopX/a.img"); /* a common prefix is not containment */
	BAD("/var/lib/flexvol/loo");
	BAD("/var/lib/flexvol/lo/a.img");
	BAD("//var/lib/flexvol/loop/a.img");
	/* a root given with a trailing slash means the same directory */
	want_ok(ROOT "/", ROOT "/a.img", "a.img", __LINE__);
	want_bad(ROOT "/", "/var/lib/flexvol/loopX/a.img", -EINVAL, __LINE__);
	/* root "/" contains every absolute path */
	want_ok("/", "/etc/x", "etc/x", __LINE__);
	want_bad("/", "/", -EINVAL, __LINE__);
}

TEST(confine_dotdot)
{
	BAD("..");
	BAD("../x");
	BAD("a/../../x");
	BAD("a/..");
	BAD("a/../b");	/* would stay inside, but ".." is refused outright */
	BAD(ROOT "/../loop/a.img");
	BAD(ROOT "/a/../../../etc/passwd");
	BAD("./..");
	BAD("a/..//");
}

TEST(confine_malformed)
{
	BAD("");
	BAD(NULL);
	BAD(".");
	BAD("./");
	BAD("a.img/");	/* trailing slash: a directory, not a file */
	BAD("sub/");
	BAD(ROOT "/a.img/");
	BAD("a\nb.img");
	BAD("a\tb.img");
	BAD("\x01");
	BAD("a\x1f.img");
	BAD("a\x7f.img");
	BAD("\r");
	/* the root must be absolute */
	want_bad("var/lib", "a.img", -EINVAL, __LINE__);
	want_bad(NULL, "a.img", -EINVAL, __LINE__);
}

TEST(confine_buffer_size)
{
	char small[8];

	CHECK_INT(fv_path_confine(ROOT, "abcdef", small, sizeof(small)), 0);
	CHECK_STR(small, "abcdef");
	CHECK_INT(fv_path_confine(ROOT, "abcdefg", small, sizeof(small)), -ENAMETOOLONG);
	CHECK_INT(fv_path_confine(ROOT, "abc/defg", small, sizeof(small)), -ENAMETOOLONG);
}

/* --- fv_open_beneath against a real directory --- */

static char tmpdir[PATH_MAX];

static int setup_tree(void)
{
	char p[PATH_MAX + 32];
	int fd;

	snprintf(tmpdir, sizeof(tmpdir), "%s/fv-path-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(p, sizeof(p), "%s/root", tmpdir);
	if (mkdir(p, 0755) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/root/sub", tmpdir);
	if (mkdir(p, 0755) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/root/a.img", tmpdir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0 || write(fd, "inside", 6) != 6)
		return -1;
	close(fd);
	snprintf(p, sizeof(p), "%s/outside", tmpdir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0 || write(fd, "outside", 7) != 7)
		return -1;
	close(fd);

	snprintf(p, sizeof(p), "%s/root/esc", tmpdir);
	if (symlink("/etc/passwd", p) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/root/esc-rel", tmpdir);
	if (symlink("../outside", p) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/root/in", tmpdir);
	if (symlink("a.img", p) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/root/sub/up", tmpdir);
	if (symlink("../a.img", p) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/root/esc-dir", tmpdir);
	if (symlink("/etc", p) < 0)
		return -1;
	return 0;
}

static void teardown_tree(void)
{
	static const char *const names[] = { "root/esc", "root/esc-rel", "root/in", "root/sub/up",
					     "root/esc-dir", "root/a.img", "root/new.img",
					     "outside", "root/sub", "root" };
	char p[PATH_MAX + 32];

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
		if (unlink(p) < 0)
			rmdir(p); /* the directories come last */
	}
	rmdir(tmpdir);
}

/* Read what the fd holds into @buf (for telling inside from outside). */
static const char *content(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

TEST(open_beneath)
{
	char p[PATH_MAX + 32], buf[64];
	int rootfd, fd;

	if (setup_tree() < 0) {
		teardown_tree();
		REQUIRE(!"cannot build the temp tree");
	}
	snprintf(p, sizeof(p), "%s/root", tmpdir);
	rootfd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	REQUIRE(rootfd >= 0);

	fd = fv_open_beneath(rootfd, "a.img", O_RDONLY, 0);
	if (fd == -ENOSYS) {
		close(rootfd);
		teardown_tree();
		SKIP("openat2() not available");
	}
	if (CHECK(fd >= 0)) {
		CHECK_STR(content(fd, buf, sizeof(buf)), "inside");
		CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0); /* always added */
		close(fd);
	}

	/* taken literally: even symlinks that stay inside are refused */
	CHECK_INT(fv_open_beneath(rootfd, "in", O_RDONLY, 0), -ELOOP);
	CHECK_INT(fv_open_beneath(rootfd, "sub/up", O_RDONLY, 0), -ELOOP);
	fd = fv_open_beneath(rootfd, "sub/../a.img", O_RDONLY, 0);
	if (CHECK(fd >= 0))
		close(fd);

	/* escapes: absolute symlink, relative symlink, "..", symlinked directory, absolute path */
	CHECK_INT(fv_open_beneath(rootfd, "esc", O_RDONLY, 0), -ELOOP);
	CHECK_INT(fv_open_beneath(rootfd, "esc-rel", O_RDONLY, 0), -ELOOP);
	CHECK_INT(fv_open_beneath(rootfd, "../outside", O_RDONLY, 0), -EXDEV);
	CHECK_INT(fv_open_beneath(rootfd, "sub/../../outside", O_RDONLY, 0), -EXDEV);
	CHECK_INT(fv_open_beneath(rootfd, "esc-dir/passwd", O_RDONLY, 0), -ELOOP);
	CHECK_INT(fv_open_beneath(rootfd, "/etc/passwd", O_RDONLY, 0), -EXDEV);
	/* a symlink is not followed for creation either */
	CHECK_INT(fv_open_beneath(rootfd, "esc", O_RDWR | O_CREAT, 0600), -ELOOP);

	CHECK_INT(fv_open_beneath(rootfd, "missing.img", O_RDONLY, 0), -ENOENT);

	/* O_CREAT honours the mode (umask permitting) */
	mode_t old = umask(022);

	fd = fv_open_beneath(rootfd, "new.img", O_RDWR | O_CREAT | O_EXCL, 0640);
	umask(old);
	if (CHECK(fd >= 0)) {
		struct stat st;

		CHECK(fstat(fd, &st) == 0 && (st.st_mode & 07777) == 0640);
		close(fd);
	}
	close(rootfd);
	teardown_tree();
}

/* --- fv_open_regular_beneath: nothing but a regular file is ever open()ed --- */

TEST(open_regular_beneath)
{
	char p[PATH_MAX + 32], buf[64];
	struct stat st;
	int rootfd, fd;

	if (setup_tree() < 0) {
		teardown_tree();
		REQUIRE(!"cannot build the temp tree");
	}
	snprintf(p, sizeof(p), "%s/root", tmpdir);
	rootfd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	REQUIRE(rootfd >= 0);
	snprintf(p, sizeof(p), "%s/root/fifo", tmpdir);
	REQUIRE(mkfifo(p, 0600) == 0);
	snprintf(p, sizeof(p), "%s/root/null", tmpdir);
	REQUIRE(mknod(p, S_IFCHR | 0600, makedev(1, 3)) == 0);

	fd = fv_open_regular_beneath(rootfd, "a.img", O_RDWR, &st);
	if (fd == -ENOSYS) { /* qemu-user (the arm64 static lane) has no openat2() */
		close(rootfd);
		teardown_tree();
		SKIP("openat2() not available");
	}
	if (CHECK(fd >= 0)) {
		CHECK_STR(content(fd, buf, sizeof(buf)), "inside");
		CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
		CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
		CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
		CHECK(S_ISREG(st.st_mode) && st.st_size == 6);
		close(fd);
	}
	/* a FIFO would block open(2) for a writer: it is refused at once, RDONLY and RDWR */
	CHECK_INT(fv_open_regular_beneath(rootfd, "fifo", O_RDONLY, &st), -EMEDIUMTYPE);
	CHECK(S_ISFIFO(st.st_mode));
	CHECK_STR(fv_file_type(st.st_mode), "a FIFO");
	CHECK_INT(fv_open_regular_beneath(rootfd, "fifo", O_RDWR, &st), -EMEDIUMTYPE);
	CHECK_INT(fv_open_regular_beneath(rootfd, "null", O_RDWR, &st), -EMEDIUMTYPE);
	CHECK_STR(fv_file_type(st.st_mode), "a character device");
	CHECK_INT(fv_open_regular_beneath(rootfd, "sub", O_RDONLY, &st), -EMEDIUMTYPE);
	CHECK_STR(fv_file_type(st.st_mode), "a directory");
	CHECK_INT(fv_open_regular_beneath(rootfd, "in", O_RDONLY, &st), -ELOOP);
	CHECK_INT(fv_open_regular_beneath(rootfd, "../outside", O_RDONLY, &st), -EXDEV);
	CHECK_INT(fv_open_regular_beneath(rootfd, "missing.img", O_RDONLY, &st), -ENOENT);
	unlink(p);
	snprintf(p, sizeof(p), "%s/root/fifo", tmpdir);
	unlink(p);
	close(rootfd);
	teardown_tree();
}

/* --- fv_dir_open: directory arguments taken literally --- */

static void want_dir(const char *path, unsigned int flags, int err, const char *want_norm,
		     const char *same_as, int line)
{
	char norm[PATH_MAX] = "";
	int fd = fv_dir_open(path, flags, norm, sizeof(norm));

	if (err) {
		if (fd != err)
			unit_fail(__FILE__, line, "dir_open('%s', %u): got %d, want %d", path, flags,
				  fd, err);
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fd < 0) {
		unit_fail(__FILE__, line, "dir_open('%s', %u): got %d, want an fd", path, flags, fd);
		return;
	}
	if (want_norm && strcmp(norm, want_norm) != 0)
		unit_fail(__FILE__, line, "dir_open('%s'): norm '%s', want '%s'", path, norm,
			  want_norm);
	if (same_as) {
		struct stat a, b;

		if (fstat(fd, &a) < 0 || stat(same_as, &b) < 0 || a.st_ino != b.st_ino ||
		    a.st_dev != b.st_dev || !S_ISDIR(a.st_mode))
			unit_fail(__FILE__, line, "dir_open('%s'): not the directory '%s'", path,
				  same_as);
	}
	if ((fcntl(fd, F_GETFL) & O_PATH) == 0 || (fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0)
		unit_fail(__FILE__, line, "dir_open('%s'): not an O_PATH, O_CLOEXEC fd", path);
	close(fd);
}

TEST(dir_open_literally)
{
	char root[PATH_MAX + 32], sub[PATH_MAX + 64], p[PATH_MAX * 2], q[PATH_MAX * 2];

	if (setup_tree() < 0) {
		teardown_tree();
		REQUIRE(!"cannot build the temp tree");
	}
	snprintf(root, sizeof(root), "%s/root", tmpdir);
	snprintf(sub, sizeof(sub), "%s/root/sub", tmpdir);
	for (unsigned int compat = 0; compat <= FV_DIR_COMPAT; compat += FV_DIR_COMPAT) {
		want_dir(sub, compat, 0, sub, sub, __LINE__);
		snprintf(p, sizeof(p), "%s//root/./sub", tmpdir);
		want_dir(p, compat, 0, sub, sub, __LINE__);
		want_dir("/", compat, -EINVAL, NULL, NULL, __LINE__);
		want_dir("relative/dir", compat, -EINVAL, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "%s/root/sub/..", tmpdir);
		want_dir(p, compat, -EINVAL, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "%s/root/missing", tmpdir);
		want_dir(p, compat, -ENOENT, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "%s/root/missing/x", tmpdir);
		want_dir(p, compat, -ENOENT, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "%s/root/a.img", tmpdir);
		want_dir(p, compat, -ENOTDIR, NULL, NULL, __LINE__);
		/* a symlink as the last component, or higher up, even one to a directory */
		snprintf(p, sizeof(p), "%s/root/esc-dir", tmpdir);
		want_dir(p, compat, -ELOOP, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "%s/root/esc-dir/ssl", tmpdir);
		want_dir(p, compat, -ELOOP, NULL, NULL, __LINE__);
		/* magic links: the same directory through /proc */
		snprintf(p, sizeof(p), "/proc/self/root%s", sub);
		want_dir(p, compat, -ELOOP, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "/proc/%d/root%s", (int)getpid(), sub);
		want_dir(p, compat, -ELOOP, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "/proc/thread-self/root%s", sub);
		want_dir(p, compat, -ELOOP, NULL, NULL, __LINE__);
		REQUIRE(chdir("/") == 0);
		snprintf(p, sizeof(p), "/proc/self/cwd%s", sub);
		want_dir(p, compat, -ELOOP, NULL, NULL, __LINE__);
		/* parent only: the last component is never looked up */
		snprintf(p, sizeof(p), "%s/root/esc-dir", tmpdir);
		want_dir(p, compat | FV_DIR_PARENT, 0, p, root, __LINE__);
		snprintf(p, sizeof(p), "%s/root/missing", tmpdir);
		want_dir(p, compat | FV_DIR_PARENT, 0, p, root, __LINE__);
		snprintf(p, sizeof(p), "%s/root/esc-dir/x", tmpdir);
		want_dir(p, compat | FV_DIR_PARENT, -ELOOP, NULL, NULL, __LINE__);
		snprintf(p, sizeof(p), "%s/root/missing/x", tmpdir);
		want_dir(p, compat | FV_DIR_PARENT, -ENOENT, NULL, NULL, __LINE__);
		want_dir("/etc", compat | FV_DIR_PARENT, 0, "/etc", "/", __LINE__);
		snprintf(q, sizeof(q), "/proc/self/root%s/x", sub);
		want_dir(q, compat | FV_DIR_PARENT, -ELOOP, NULL, NULL, __LINE__);
	}
	teardown_tree();
}

/* --- fv_name_escape --- */

static void want_esc(const char *in, const char *want, int line)
{
	char buf[256] = "";
	int r = fv_name_escape(in, buf, sizeof(buf));

	if (r != 0 || strcmp(buf, want) != 0)
		unit_fail(__FILE__, line, "escape('%s'): got %d '%s', want '%s'", in, r, buf, want);
}

#define ESC(in, want) want_esc((in), (want), __LINE__)

TEST(name_escape)
{
	ESC("pv-1_a.B9", "pv-1_a.B9");
	ESC("a/b", "a%2Fb");
	ESC("../x", "%2E.%2Fx");
	ESC(".hidden", "%2Ehidden");
	ESC(".", "%2E");
	ESC("a.b.", "a.b.");
	ESC("50%", "50%25"); /* '%' itself is escaped, so the encoding is one-to-one */
	ESC("a b", "a%20b");
	ESC("x\ny", "x%0Ay");
	ESC("\xc3\xbc", "%C3%BC");
	ESC("loop-vol-pv:1", "loop-vol-pv%3A1");
}

TEST(name_escape_limits)
{
	char buf[8];

	CHECK_INT(fv_name_escape("", buf, sizeof(buf)), -EINVAL);
	/* exact fit: 7 characters + NUL */
	CHECK_INT(fv_name_escape("abcdefg", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "abcdefg");
	CHECK_INT(fv_name_escape("abcdefgh", buf, sizeof(buf)), -ENAMETOOLONG);
	/* an escape needs 3 bytes: "ab%2F" + "cd" = 7 fits, one more does not */
	CHECK_INT(fv_name_escape("ab/cd", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "ab%2Fcd");
	CHECK_INT(fv_name_escape("abcde/", buf, sizeof(buf)), -ENAMETOOLONG);
	CHECK_INT(fv_name_escape("/////", buf, sizeof(buf)), -ENAMETOOLONG);

	char big[300];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	char out[256];

	CHECK_INT(fv_name_escape(big, out, sizeof(out)), -ENAMETOOLONG);
}

TEST(name_key)
{
	char buf[64], buf2[64], big[300];

	/* short names: exactly fv_name_escape() */
	CHECK_INT(fv_name_key("loop-vol-pv/1", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "loop-vol-pv%2F1");
	CHECK_INT(fv_name_key("", buf, sizeof(buf)), -EINVAL);
	CHECK_INT(fv_name_key("x", buf, 39), -EINVAL); /* too small for prefix + hash */

	/* long names: a prefix plus a hash of the whole, always fitting */
	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK_INT(fv_name_key(big, buf, sizeof(buf)), 0);
	CHECK_U64(strlen(buf), sizeof(buf) - 1);
	CHECK(strchr(buf, '~') != NULL);
	CHECK(strncmp(buf, "vvvv", 4) == 0);
	/* a near twin gets a different name, the same input the same one */
	big[sizeof(big) - 2] = 'w';
	CHECK_INT(fv_name_key(big, buf2, sizeof(buf2)), 0);
	CHECK(strcmp(buf, buf2) != 0);
	big[sizeof(big) - 2] = 'v';
	CHECK_INT(fv_name_key(big, buf2, sizeof(buf2)), 0);
	CHECK_STR(buf, buf2);
	/* '~' is escaped in plain names, so a hashed name never equals a plain one */
	CHECK_INT(fv_name_key("a~b", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "a%7Eb");
	CHECK(fv_hash64("a") != fv_hash64("b"));
	CHECK_U64(fv_hash64(""), 0xcbf29ce484222325ULL); /* FNV-1a offset basis */
}
