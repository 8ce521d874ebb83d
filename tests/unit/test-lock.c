/* SPDX-License-Identifier: Apache-2.0 */
/* Named flock(2) locks with a deadline (fv/lock.h). */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "unit.h"
#include "fv/lock.h"
#include "fv/mountutil.h"
#include "fv/util.h"

static struct fv_ctx cx;
static char tmpdir[PATH_MAX];

static bool setup(unsigned int timeout_s)
{
	memset(&cx, 0, sizeof(cx));
	cx.cfg.lock_timeout = timeout_s;
	snprintf(tmpdir, sizeof(tmpdir), "%s/fv-lock-XXXXXX", getenv("TMPDIR") ?: "/tmp");
	if (!mkdtemp(tmpdir))
		return false;
	snprintf(cx.cfg.run_dir, sizeof(cx.cfg.run_dir), "%s/run", tmpdir);
	return true;
}

static void teardown(void)
{
	char p[PATH_MAX * 2];
	DIR *d;
	struct dirent *e;

	snprintf(p, sizeof(p), "%s/run/locks", tmpdir);
	d = opendir(p);
	while (d && (e = readdir(d))) {
		char f[PATH_MAX * 3];

		if (e->d_name[0] == '.' && (!e->d_name[1] || streq(e->d_name, "..")))
			continue;
		snprintf(f, sizeof(f), "%s/%s", p, e->d_name);
		unlink(f);
	}
	if (d)
		closedir(d);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/run", tmpdir);
	rmdir(p);
	rmdir(tmpdir);
}

/*
 * Fork a child that takes lock @name and holds it until killed (or, with
 * @release_ms, releases it after that long and keeps living).  Returns its
 * pid once it holds the lock, or -1.
 */
static pid_t holder(const char *name, unsigned int release_ms)
{
	int p[2];
	pid_t pid;
	char c = 0;

	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = fv_lock(&cx, name);

		close(p[0]);
		c = fd >= 0 ? 'y' : 'n';
		(void)!write(p[1], &c, 1);
		close(p[1]);
		if (fd >= 0 && release_ms) {
			usleep(release_ms * 1000);
			fv_unlock(fd);
		}
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1 || c != 'y') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		pid = -1;
	}
	close(p[0]);
	return pid;
}

static void end_child(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

TEST(two_names_one_process)
{
	char p[PATH_MAX * 2];
	int a, b;

	REQUIRE(setup(1));
	a = fv_lock(&cx, "loop-vol-pv1");
	b = fv_lock(&cx, "loop-vol-pv2");
	CHECK(a >= 0);
	CHECK(b >= 0);
	CHECK(a != b);
	CHECK_STR(cx.message, "");
	snprintf(p, sizeof(p), "%s/run/locks/loop-vol-pv1.lock", tmpdir);
	CHECK(access(p, F_OK) == 0);
	CHECK((fcntl(a, F_GETFD) & FD_CLOEXEC) != 0);
	fv_unlock(a);
	fv_unlock(b);
	fv_unlock(-1); /* harmless */

	/* released: taken again at once */
	a = fv_lock(&cx, "loop-vol-pv1");
	CHECK(a >= 0);
	fv_unlock(a);
	teardown();
}

TEST(names_are_escaped_and_long_names_work)
{
	char p[PATH_MAX * 2], long1[400], long2[400];
	int a, b, c;

	REQUIRE(setup(1));
	a = fv_lock(&cx, "loop-dir-/var/lib/kubelet/pods/x");
	CHECK(a >= 0);
	snprintf(p, sizeof(p), "%s/run/locks/loop-dir-%%2Fvar%%2Flib%%2Fkubelet%%2Fpods%%2Fx.lock",
		 tmpdir);
	CHECK(access(p, F_OK) == 0);

	/* longer than a file name: still a lock, and distinct from a near twin */
	memset(long1, 'v', sizeof(long1) - 1);
	long1[sizeof(long1) - 1] = '\0';
	memcpy(long2, long1, sizeof(long2));
	long2[sizeof(long2) - 2] = 'w';
	b = fv_lock(&cx, long1);
	c = fv_lock(&cx, long2); /* would time out if both mapped to one file */
	CHECK(b >= 0);
	CHECK(c >= 0);
	CHECK_STR(cx.message, "");
	fv_unlock(a);
	fv_unlock(b);
	fv_unlock(c);
	teardown();
}

TEST(contention_times_out)
{
	struct sigaction before, after;
	uint64_t t0, took;
	pid_t pid;
	int fd;

	REQUIRE(setup(1));
	pid = holder("loop-vol-busy", 0);
	REQUIRE(pid > 0);

	sigaction(SIGALRM, NULL, &before);
	t0 = fv_now_ms();
	fd = fv_lock(&cx, "loop-vol-busy");
	took = fv_now_ms() - t0;
	sigaction(SIGALRM, NULL, &after);

	CHECK_INT(fd, -FV_ERR_TIMEOUT);
	CHECK_CONTAINS(cx.message, "'loop-vol-busy'");
	CHECK_CONTAINS(cx.message, "after 1 s");
	CHECK(took >= 900);
	if (!CHECK(took < 5000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)took);
	/* the temporary SIGALRM handler is gone again */
	CHECK(before.sa_handler == after.sa_handler);

	/* other names are not affected */
	unit_ctx_reset(&cx);
	fd = fv_lock(&cx, "loop-vol-other");
	CHECK(fd >= 0);
	fv_unlock(fd);

	/* SIGKILL of the holder drops its lock: no stale locks */
	end_child(pid);
	unit_ctx_reset(&cx);
	t0 = fv_now_ms();
	fd = fv_lock(&cx, "loop-vol-busy");
	CHECK(fd >= 0);
	CHECK(fv_now_ms() - t0 < 500);
	CHECK_STR(cx.message, "");
	fv_unlock(fd);
	teardown();
}

TEST(waiter_gets_released_lock)
{
	uint64_t t0, took;
	pid_t pid;
	int fd;

	REQUIRE(setup(10));
	pid = holder("loop-vol-soon", 300);
	REQUIRE(pid > 0);
	t0 = fv_now_ms();
	fd = fv_lock(&cx, "loop-vol-soon");
	took = fv_now_ms() - t0;
	CHECK(fd >= 0);
	/* woken by the release, not by the 10 s deadline */
	if (!CHECK(took < 5000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)took);
	fv_unlock(fd);
	end_child(pid);
	teardown();
}

TEST(unusable_run_dir)
{
	int fd;

	REQUIRE(setup(1));
	snprintf(cx.cfg.run_dir, sizeof(cx.cfg.run_dir), "/proc/self/flexvol-no-such-dir");
	fd = fv_lock(&cx, "x");
	CHECK(fd < 0);
	CHECK(fd != -FV_ERR_TIMEOUT);
	CHECK_CONTAINS(cx.message, "lock");
	teardown();
}

static void on_usr1(int sig)
{
	(void)sig;
}

/*
 * Another signal arriving during the wait (no SA_RESTART: flock() returns
 * EINTR) is not the deadline: the wait goes on until the lock comes or the
 * deadline really passes.
 */
TEST(other_signals_do_not_end_the_wait)
{
	struct sigaction sa = { .sa_handler = on_usr1 }, old;
	uint64_t t0, took;
	pid_t pid, poker;
	int fd;

	REQUIRE(setup(1));
	pid = holder("loop-vol-poked", 0);
	REQUIRE(pid > 0);
	sigaction(SIGUSR1, &sa, &old);
	poker = fork();
	if (poker == 0) {
		for (int i = 0; i < 5; i++) {
			usleep(100 * 1000);
			kill(getppid(), SIGUSR1);
		}
		_exit(0);
	}
	t0 = fv_now_ms();
	fd = fv_lock(&cx, "loop-vol-poked");
	took = fv_now_ms() - t0;
	CHECK_INT(fd, -FV_ERR_TIMEOUT);
	if (!CHECK(took >= 900))
		fprintf(stderr, "  ended after %llu ms\n", (unsigned long long)took);
	waitpid(poker, NULL, 0);
	sigaction(SIGUSR1, &old, NULL);
	end_child(pid);
	teardown();
}

/* The primitive itself, on any descriptor (a block device in production). */
TEST(flock_deadline_primitive)
{
	char p[PATH_MAX * 2];
	uint64_t t0, took;
	pid_t pid;
	int fd;

	REQUIRE(setup(1));
	pid = holder("plain", 0);
	REQUIRE(pid > 0);
	snprintf(p, sizeof(p), "%s/run/locks/plain.lock", tmpdir);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	t0 = fv_now_ms();
	CHECK_INT(fv_flock_deadline(fd, LOCK_EX, 700), -FV_ERR_TIMEOUT);
	took = fv_now_ms() - t0;
	CHECK(took >= 650);
	if (!CHECK(took < 4000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)took);
	CHECK_INT(fv_flock_deadline(fd, LOCK_SH, 0), -FV_ERR_TIMEOUT); /* 0: just try */
	CHECK_INT(fv_flock_deadline(-1, LOCK_EX, 100), -EBADF);
	CHECK_INT(fv_flock_deadline(fd, 12345, 100), -EINVAL);
	end_child(pid);
	t0 = fv_now_ms();
	CHECK_INT(fv_flock_deadline(fd, LOCK_EX, 5000), 0);
	CHECK(fv_now_ms() - t0 < 1000);
	close(fd);
	teardown();
}

struct waiter {
	const char *path;
	unsigned int timeout_ms;
	int r;
	uint64_t took;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	int fd = open(w->path, O_RDONLY | O_CLOEXEC);
	uint64_t t0 = fv_now_ms();

	w->r = fd < 0 ? -errno : fv_flock_deadline(fd, LOCK_EX, w->timeout_ms);
	w->took = fv_now_ms() - t0;
	if (fd >= 0)
		close(fd);
	return NULL;
}

/*
 * Issue 37: threads wait at once (flexvol-csi's calls).  The one whose
 * deadline comes first must not take the SIGALRM handler away from the
 * other, whose timer still fires (SIGALRM's default ends the process), and
 * each timer interrupts its own thread.
 */
TEST(threads_wait_at_once)
{
	struct waiter w[2] = { { .timeout_ms = 500 }, { .timeout_ms = 1500 } };
	struct sigaction before, after;
	char p[PATH_MAX * 2];
	pthread_t t[2];
	pid_t pid;

	REQUIRE(setup(1));
	pid = holder("shared", 0);
	REQUIRE(pid > 0);
	snprintf(p, sizeof(p), "%s/run/locks/shared.lock", tmpdir);
	sigaction(SIGALRM, NULL, &before);
	for (int i = 0; i < 2; i++) {
		w[i].path = p;
		REQUIRE(pthread_create(&t[i], NULL, wait_thread, &w[i]) == 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	sigaction(SIGALRM, NULL, &after);
	for (int i = 0; i < 2; i++) {
		CHECK_INT(w[i].r, -FV_ERR_TIMEOUT);
		CHECK(w[i].took + 50 >= w[i].timeout_ms);
		if (!CHECK(w[i].took < w[i].timeout_ms + 2000))
			fprintf(stderr, "  took %llu ms\n", (unsigned long long)w[i].took);
	}
	CHECK(before.sa_handler == after.sa_handler);
	end_child(pid);
	teardown();
}

/*
 * Issue 37 point 3: every lock file goes with its lock (a loop image's lock
 * "loop-image-<dev>-<ino>" stayed after each stage, one per image ever
 * staged), whoever releases it with fv_unlock(); a lock another process
 * holds still excludes.
 */
TEST(lock_files_go_with_their_locks)
{
	char p[PATH_MAX * 2];
	int fd, fd2;

	REQUIRE(setup(1));
	snprintf(p, sizeof(p), "%s/run/locks/img.lock", tmpdir);
	fd = fv_lock(&cx, "img");
	REQUIRE(fd >= 0);
	CHECK(access(p, F_OK) == 0);
	fv_unlock(fd);
	CHECK(access(p, F_OK) < 0 && errno == ENOENT);
	fd = fv_lock(&cx, "img");
	fd2 = fv_lock_try(&cx, "img");
	CHECK_INT(fd2, -EWOULDBLOCK);
	fv_unlock(fd);
	CHECK(access(p, F_OK) < 0);
	teardown();
}

/*
 * Issue 17 point 9: a lock file may be removed by its holder when it is no
 * longer needed (fv_unlock_remove()), and mutual exclusion still holds: a
 * waiter that gets the lock on a file removed meanwhile takes the new one.
 * Four processes take, check, and remove one lock 200 times each; a
 * marker made with O_EXCL inside the lock catches two holders at once.
 */
TEST(removed_lock_files_keep_mutual_exclusion)
{
	char marker[PATH_MAX + 16], locks[PATH_MAX + 16];
	pid_t kids[4];
	int bad = 0;

	REQUIRE(setup(30));
	snprintf(marker, sizeof(marker), "%s/inside", tmpdir);
	for (int k = 0; k < 4; k++) {
		kids[k] = fork();
		REQUIRE(kids[k] >= 0);
		if (kids[k] == 0) {
			for (int i = 0; i < 200; i++) {
				int fd = fv_lock(&cx, "vol-x"), m;

				if (fd < 0)
					_exit(2);
				m = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
				if (m < 0)
					_exit(3); /* another process is inside */
				close(m);
				usleep(100);
				unlink(marker);
				fv_unlock_remove(&cx, "vol-x", fd);
			}
			_exit(0);
		}
	}
	for (int k = 0; k < 4; k++) {
		int st = 0;

		while (waitpid(kids[k], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			bad++;
			fprintf(stderr, "  child %d: status 0x%x\n", k, st);
		}
	}
	CHECK_INT(bad, 0);
	snprintf(locks, sizeof(locks), "%s/run/locks", tmpdir);
	CHECK_INT(fv_path_is_empty(locks), 1); /* nothing left behind */
	teardown();
}
