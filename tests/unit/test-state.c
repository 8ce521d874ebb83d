/* SPDX-License-Identifier: Apache-2.0 */
/* State records: atomic writes, round trips, absent and garbage records. */
#include <dirent.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "unit.h"
#include "fv/state.h"
#include "fv/util.h"

static const struct fv_driver dummy = { .name = "unittest" };
static struct fv_ctx cx;
static char tmpdir[PATH_MAX];
static char recdir[PATH_MAX + 32];

/* Make a fresh state dir; cx points at it. */
static bool setup(void)
{
	memset(&cx, 0, sizeof(cx));
	cx.drv = &dummy;
	snprintf(tmpdir, sizeof(tmpdir), "%s/fv-state-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	if (!mkdtemp(tmpdir))
		return false;
	snprintf(cx.cfg.state_dir, sizeof(cx.cfg.state_dir), "%s/state", tmpdir);
	snprintf(recdir, sizeof(recdir), "%s/unittest", cx.cfg.state_dir);
	return true;
}

static void rm_dir_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[PATH_MAX * 2];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (streq(e->d_name, ".") || streq(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static void teardown(void)
{
	rm_dir_files(recdir);
	rm_dir_files(cx.cfg.state_dir);
	rm_dir_files(tmpdir);
}

/* Names in @dir that are not "<something>.json" (leftover temp files), or -1. */
static int count_strays(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (streq(e->d_name, ".") || streq(e->d_name, ".."))
			continue;
		if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) {
			fprintf(stderr, "  stray file: %s\n", e->d_name);
			n++;
		}
	}
	closedir(d);
	return n;
}

/* Temp files ("<name>.tmp.<pid>") left in @dir, or -1. */
static int count_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".tmp."))
			n++;
	closedir(d);
	return n;
}

static json_object *record(const char *dev, int n)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "device", json_object_new_string(dev));
	json_object_object_add(o, "n", json_object_new_int(n));
	return o;
}

TEST(round_trip)
{
	json_object *w, *r = NULL, *v;

	REQUIRE(setup());
	w = record("/dev/loop7", 7);
	CHECK_INT(fv_state_write(&cx, "pv1", w), 0);
	if (CHECK_INT(fv_state_read(&cx, "pv1", &r), 0) && CHECK(r != NULL)) {
		CHECK(json_object_equal(w, r));
		CHECK(json_object_object_get_ex(r, "device", &v) &&
		      streq(json_object_get_string(v), "/dev/loop7"));
		json_object_put(r);
	}
	json_object_put(w);

	/* overwrite */
	w = record("/dev/loop8", 8);
	CHECK_INT(fv_state_write(&cx, "pv1", w), 0);
	r = NULL;
	if (CHECK_INT(fv_state_read(&cx, "pv1", &r), 0)) {
		CHECK(json_object_equal(w, r));
		json_object_put(r);
	}
	json_object_put(w);

	/* the record lives at <state_dir>/<driver>/<key>.json, 0600 */
	char path[PATH_MAX * 2];
	struct stat st;

	snprintf(path, sizeof(path), "%s/pv1.json", recdir);
	if (CHECK(stat(path, &st) == 0))
		CHECK_INT(st.st_mode & 0777, 0600);
	CHECK_INT(count_strays(recdir), 0);

	CHECK_INT(fv_state_remove(&cx, "pv1"), 0);
	CHECK(access(path, F_OK) < 0 && errno == ENOENT);
	r = NULL;
	CHECK_INT(fv_state_read(&cx, "pv1", &r), 1);
	CHECK(r == NULL);
	teardown();
}

/* A record of this boot's state: the same record, in the same place, written the same way but unsynced. */
TEST(boot_record_round_trip)
{
	json_object *w, *r = NULL;
	char path[PATH_MAX * 2];
	struct stat st;

	REQUIRE(setup());
	w = record("/dev/loop7", 7);
	CHECK_INT(fv_state_write_boot(&cx, "pv1", w), 0);
	if (CHECK_INT(fv_state_read(&cx, "pv1", &r), 0) && CHECK(r != NULL)) {
		CHECK(json_object_equal(w, r));
		json_object_put(r);
	}
	json_object_put(w);
	snprintf(path, sizeof(path), "%s/pv1.json", recdir);
	if (CHECK(stat(path, &st) == 0))
		CHECK_INT(st.st_mode & 0777, 0600);
	CHECK_INT(count_strays(recdir), 0);
	CHECK_INT(fv_state_remove(&cx, "pv1"), 0);
	teardown();
}

TEST(absent)
{
	json_object *r = NULL;

	REQUIRE(setup());
	/* neither the state dir nor the record exists */
	CHECK_INT(fv_state_read(&cx, "nope", &r), 1);
	CHECK(r == NULL);
	CHECK_INT(fv_state_remove(&cx, "nope"), 0);
	CHECK_INT(fv_state_remove(&cx, "nope"), 0);
	teardown();
}

TEST(keys_are_escaped)
{
	json_object *w = record("/dev/loop1", 1), *r = NULL;
	char path[PATH_MAX * 2];

	REQUIRE(setup());
	CHECK_INT(fv_state_write(&cx, "../evil/x", w), 0);
	snprintf(path, sizeof(path), "%s/%%2E.%%2Fevil%%2Fx.json", recdir);
	CHECK(access(path, F_OK) == 0);
	snprintf(path, sizeof(path), "%s/evil", cx.cfg.state_dir);
	CHECK(access(path, F_OK) < 0);
	if (CHECK_INT(fv_state_read(&cx, "../evil/x", &r), 0)) {
		CHECK(json_object_equal(w, r));
		json_object_put(r);
	}
	/* a different key is a different record */
	r = NULL;
	CHECK_INT(fv_state_read(&cx, "../evil/y", &r), 1);
	CHECK_INT(fv_state_remove(&cx, "../evil/x"), 0);
	CHECK_INT(count_strays(recdir), 0);
	json_object_put(w);
	teardown();
}

static bool put_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	bool ok = fd >= 0 && write(fd, data, strlen(data)) == (ssize_t)strlen(data);

	if (fd >= 0)
		close(fd);
	return ok;
}

TEST(garbage_reads_as_absent)
{
	static const char *const junk[] = { "", "{", "{\"device\":", "not json", "[1,2]", "\"s\"",
					    "42", "null", "\x00\xff" };
	json_object *w = record("/dev/loop2", 2), *r;
	char path[PATH_MAX * 2];

	REQUIRE(setup());
	REQUIRE_INT(fv_state_write(&cx, "g", w), 0); /* creates the directory */
	snprintf(path, sizeof(path), "%s/g.json", recdir);
	for (size_t i = 0; i < ARRAY_SIZE(junk); i++) {
		REQUIRE(put_file(path, junk[i]));
		r = NULL;
		if (!CHECK_INT(fv_state_read(&cx, "g", &r), 1))
			fprintf(stderr, "  for content '%s'\n", junk[i]);
		CHECK(r == NULL);
		json_object_put(r);
	}
	/* and a fresh write replaces the garbage */
	CHECK_INT(fv_state_write(&cx, "g", w), 0);
	r = NULL;
	if (CHECK_INT(fv_state_read(&cx, "g", &r), 0)) {
		CHECK(json_object_equal(w, r));
		json_object_put(r);
	}
	json_object_put(w);
	teardown();
}

TEST(write_file_atomic)
{
	char path[PATH_MAX * 2], buf[64];
	struct stat st;
	ssize_t n;
	int fd, r;

	REQUIRE(setup());
	snprintf(path, sizeof(path), "%s/file", tmpdir);
	CHECK_INT(fv_write_file_atomic(path, "first", 5, 0640), 0);
	CHECK_INT(fv_write_file_atomic(path, "second!", 7, 0640), 0);
	fd = open(path, O_RDONLY);
	if (CHECK(fd >= 0)) {
		n = read(fd, buf, sizeof(buf));
		CHECK_INT(n, 7);
		CHECK(n == 7 && memcmp(buf, "second!", 7) == 0);
		CHECK(fstat(fd, &st) == 0 && (st.st_mode & 0777) == (0640 & ~(mode_t)022));
		close(fd);
	}
	/* empty content is a valid, empty file */
	CHECK_INT(fv_write_file_atomic(path, "", 0, 0600), 0);
	CHECK(stat(path, &st) == 0 && st.st_size == 0);
	CHECK_INT(count_tmp(tmpdir), 0);

	/* a missing directory fails cleanly */
	snprintf(path, sizeof(path), "%s/missing/file", tmpdir);
	CHECK_INT(fv_write_file_atomic(path, "x", 1, 0600), -ENOENT);
	/*
	 * a symlink as the temp name is never followed: it is removed like a
	 * leftover (the data went into an unnamed O_TMPFILE), or refused by
	 * O_NOFOLLOW without O_TMPFILE (issue 17)
	 */
	char tmp[PATH_MAX * 3], victim[PATH_MAX * 2];

	snprintf(path, sizeof(path), "%s/linked", tmpdir);
	snprintf(victim, sizeof(victim), "%s/victim", tmpdir);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	REQUIRE(put_file(victim, "keep"));
	REQUIRE(symlink(victim, tmp) == 0);
	r = fv_write_file_atomic(path, "x", 1, 0600);
	CHECK(r < 0 ? access(path, F_OK) < 0 : access(path, F_OK) == 0);
	fd = open(victim, O_RDONLY);
	if (CHECK(fd >= 0)) {
		n = read(fd, buf, sizeof(buf));
		CHECK(n == 4 && memcmp(buf, "keep", 4) == 0);
		close(fd);
	}
	unlink(tmp);
	unlink(victim);
	teardown();
}

/*
 * Atomicity: a child rewrites one record as fast as it can, alternating a
 * small and a large version; the parent reads it at least 2000 times, and
 * goes on until the writer has replaced the record a few times while it
 * was reading (a loaded machine may need longer).  Every read must parse
 * and be exactly one of the two versions.
 */
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

TEST(atomic_under_concurrent_rewrite)
{
	json_object *a = record("/dev/loop1", 1), *b = record("/dev/loop2", 2), *r;
	char pad[32 * 1024];
	int ready[2], bad = 0, absent = 0, seen_a = 0, seen_b = 0, reads = 0;
	volatile unsigned long *writes;
	unsigned long w0;
	uint64_t give_up;
	pid_t pid;
	char c;

	REQUIRE(setup());
	writes = mmap(NULL, sizeof(*writes), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		      -1, 0);
	REQUIRE(writes != MAP_FAILED);
	*writes = 0;
	/* big enough that a torn read would be caught mid-document */
	memset(pad, 'p', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	json_object_object_add(b, "pad", json_object_new_string(pad));
	REQUIRE_INT(fv_state_write(&cx, "race", a), 0);
	REQUIRE(pipe(ready) == 0);

	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct sigaction sa = { .sa_handler = on_term };

		sigaction(SIGTERM, &sa, NULL);
		close(ready[0]);
		(void)!write(ready[1], "x", 1);
		close(ready[1]);
		while (!stop) {
			if (fv_state_write(&cx, "race", (*writes & 1) ? a : b) < 0)
				_exit(2);
			__atomic_add_fetch(writes, 1, __ATOMIC_SEQ_CST);
		}
		_exit(0);
	}
	close(ready[1]);
	CHECK(read(ready[0], &c, 1) == 1);
	close(ready[0]);

	w0 = __atomic_load_n(writes, __ATOMIC_SEQ_CST);
	give_up = fv_now_ms() + 30000;
	while (reads < 2000 ||
	       (__atomic_load_n(writes, __ATOMIC_SEQ_CST) < w0 + 4 && fv_now_ms() < give_up)) {
		int rc;

		r = NULL;
		rc = fv_state_read(&cx, "race", &r);
		if (rc == 1) {
			absent++;
		} else if (rc != 0 || !r) {
			bad++;
		} else if (json_object_equal(r, a)) {
			seen_a++;
		} else if (json_object_equal(r, b)) {
			seen_b++;
		} else {
			bad++;
		}
		json_object_put(r);
		reads++;
	}
	unsigned long during = __atomic_load_n(writes, __ATOMIC_SEQ_CST) - w0;

	kill(pid, SIGTERM);
	int st = 0;

	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("  %d reads: %d version A, %d version B, %d absent, %d torn; %lu rewrites meanwhile\n",
	       reads, seen_a, seen_b, absent, bad, during);
	CHECK_INT(bad, 0);
	CHECK_INT(absent, 0); /* rename() replaces: the record never disappears */
	CHECK_INT(seen_a + seen_b, reads);
	CHECK(during >= 4); /* the writer really ran during the reads */
	CHECK_INT(count_strays(recdir), 0);
	munmap((void *)writes, sizeof(*writes));
	json_object_put(a);
	json_object_put(b);
	teardown();
}
