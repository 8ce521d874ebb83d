/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fv_exec() and fv_fork_call() with real programs.  /bin/sh -c builds the
 * scenarios here (production code never runs a shell).  We make ourselves a
 * child subreaper, so the helpers' orphaned grandchildren are reparented to
 * us: then we can tell "killed by our SIGKILL" from "still running", and
 * reap them ourselves instead of leaving them to PID 1.
 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "unit.h"
#include "fv/exec.h"
#include "fv/util.h"

static struct fv_ctx cx;

static void reset(void)
{
	memset(&cx, 0, sizeof(cx));
	snprintf(cx.cfg.helper_path, sizeof(cx.cfg.helper_path), "/usr/sbin:/usr/bin:/sbin:/bin");
	prctl(PR_SET_CHILD_SUBREAPER, 1);
}

/* Options of a call with a deadline of @timeout_s, under the test's helper path. */
static const struct fv_exec_opts *opts(unsigned int timeout_s, unsigned int flags)
{
	static struct fv_exec_opts o;

	o = fv_exec_opts_of(&cx);
	o.timeout_s = timeout_s;
	o.flags = flags;
	return &o;
}

static int run_sh(const char *script, unsigned int timeout_s, struct fv_run *r)
{
	const char *argv[] = { "sh", "-c", script, NULL };

	memset(r, 0, sizeof(*r));
	return fv_exec(&cx, argv, opts(timeout_s, 0), r);
}

/* Is @pid gone: no such process, or a zombie (dead, waiting for its reaper)? */
static bool pid_gone(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	bool zombie = false;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) && p[1] == ' ')
		zombie = p[2] == 'Z' || p[2] == 'X';
	fclose(f);
	return zombie;
}

#define REAP_GONE (-2)	  /* dead, but reaped by someone else */
#define REAP_RUNNING (-1) /* still alive after the wait (now killed) */

/*
 * Wait up to @ms for the (reparented) process @pid to end.  Returns its wait
 * status when we reaped it, REAP_GONE when it died but was not ours to reap
 * (the kernel does not always hand a dying group's zombies to the
 * subreaper), or REAP_RUNNING if it is still alive (it is then killed).
 */
static int reap(pid_t pid, unsigned int ms)
{
	uint64_t end = fv_now_ms() + ms;
	int st;

	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			return st;
		if (w < 0 && pid_gone(pid))
			return REAP_GONE;
		if (fv_now_ms() >= end)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return REAP_RUNNING;
}

TEST(captures_stdout_and_stderr)
{
	struct fv_run r;

	reset();
	CHECK_INT(run_sh("echo out; echo err >&2; printf 'no newline'", 10, &r), 0);
	CHECK_INT(r.status, 0);
	CHECK(!r.timed_out);
	CHECK_STR(r.output, "out\nerr\nno newline");
	CHECK_STR(cx.message, ""); /* success says nothing */
	fv_run_done(&r);
	CHECK(r.output == NULL);
	fv_run_done(&r); /* twice is harmless */
	fv_run_done(NULL);
}

/*
 * FV_EXEC_SPAWN (no copy of our memory): the same capture, status, exec error
 * and deadline as a forked helper, and the child holds nothing of ours.
 */
TEST(spawn_without_a_copy)
{
	const char *ok[] = { "sh", "-c", "echo out; echo err >&2; ls /proc/self/fd; exit 3", NULL };
	const char *missing[] = { "/nonexistent/helper", NULL };
	const char *slow[] = { "sleep", "30", NULL };
	struct fv_run r;

	reset();
	CHECK_INT(fv_exec(&cx, ok, opts(10, FV_EXEC_SPAWN | FV_EXEC_STATUS), &r), 0);
	CHECK_INT(r.status, 3);
	/* stdin, stdout, stderr and the one ls reads its directory by */
	CHECK_STR(r.output, "out\nerr\n0\n1\n2\n3\n");
	fv_run_done(&r);
	CHECK_INT(fv_exec(&cx, missing, opts(10, FV_EXEC_SPAWN), &r), -ENOENT);
	fv_run_done(&r);
	CHECK_INT(fv_exec(&cx, slow, opts(1, FV_EXEC_SPAWN | FV_EXEC_STATUS), &r), -FV_ERR_TIMEOUT);
	CHECK(r.timed_out);
	fv_run_done(&r);
}

TEST(no_output)
{
	struct fv_run r;

	reset();
	CHECK_INT(run_sh("true", 10, &r), 0);
	CHECK_STR(r.output, "");
	fv_run_done(&r);
	/* @r may be NULL */
	const char *argv[] = { "true", NULL };

	CHECK_INT(fv_exec(&cx, argv, opts(10, 0), NULL), 0);
}

TEST(exit_status)
{
	struct fv_run r;

	reset();
	CHECK_INT(run_sh("echo first line; echo the reason >&2; exit 3", 10, &r), -FV_ERR_HELPER);
	CHECK_INT(r.status, 3);
	CHECK(!r.timed_out);
	CHECK_CONTAINS(cx.message, "sh failed with status 3");
	CHECK_STR(cx.detail, "the reason"); /* the last line says why */
	fv_run_done(&r);

	reset();
	CHECK_INT(run_sh("exit 255", 10, &r), -FV_ERR_HELPER);
	CHECK_INT(r.status, 255);
	fv_run_done(&r);

	/* killed by a signal: 128 + signal */
	reset();
	CHECK_INT(run_sh("kill -9 $$", 10, &r), -FV_ERR_HELPER);
	CHECK_INT(r.status, 128 + SIGKILL);
	fv_run_done(&r);
}

/* FV_EXEC_STATUS: the exit status is data, and the reply message stays untouched */
TEST(exit_status_quiet)
{
	const char *a1[] = { "sh", "-c", "echo already there >&2; exit 15", NULL };
	const char *a2[] = { "sh", "-c", "sleep 30", NULL };
	const char *a3[] = { "flexvol-no-such-helper", NULL };
	struct fv_run r;

	reset();
	CHECK_INT(fv_exec(&cx, a1, opts(10, FV_EXEC_STATUS), &r), 0);
	CHECK_INT(r.status, 15);
	CHECK_CONTAINS(r.output, "already there");
	CHECK_STR(cx.message, "");
	CHECK_STR(cx.detail, "");
	fv_run_done(&r);

	reset();
	CHECK_INT(fv_exec(&cx, a2, opts(1, FV_EXEC_STATUS), &r), -FV_ERR_TIMEOUT);
	CHECK(r.timed_out);
	CHECK_STR(cx.message, "");
	fv_run_done(&r);

	reset();
	CHECK_INT(fv_exec(&cx, a3, opts(10, FV_EXEC_STATUS), &r), -ENOENT);
	CHECK_STR(cx.message, "");
	fv_run_done(&r);
}

TEST(helper_not_found)
{
	const char *a1[] = { "flexvol-no-such-helper", NULL };
	const char *a2[] = { "/nonexistent/dir/helper", NULL };
	const char *a3[] = { "/etc/passwd", NULL }; /* exists, not executable */
	struct fv_run r = { 0 };

	reset();
	CHECK_INT(fv_exec(&cx, a1, opts(10, 0), &r), -ENOENT);
	CHECK_CONTAINS(cx.message, "'flexvol-no-such-helper' not found");
	CHECK(r.output == NULL);
	reset();
	CHECK_INT(fv_exec(&cx, a2, opts(10, 0), &r), -ENOENT);
	reset();
	CHECK_INT(fv_exec(&cx, a3, opts(10, 0), &r), -ENOENT);
	/* the helper path is the only search path: not $PATH */
	reset();
	snprintf(cx.cfg.helper_path, sizeof(cx.cfg.helper_path), "/nonexistent");
	const char *a4[] = { "sh", "-c", "true", NULL };

	CHECK_INT(fv_exec(&cx, a4, opts(10, 0), &r), -ENOENT);
}

TEST(environment_and_stdin)
{
	struct fv_run r;

	reset();
	setenv("FV_UNIT_SECRET", "leak", 1);
	CHECK_INT(run_sh("echo \"PATH=$PATH\"; echo \"LC_ALL=$LC_ALL\"; "
			 "echo \"SECRET=${FV_UNIT_SECRET:-none}\"; cat; "
			 "readlink /proc/$$/fd/0; cut -d' ' -f5 /proc/$$/stat; echo $$",
			 10, &r),
		  0);
	unsetenv("FV_UNIT_SECRET");
	if (CHECK(r.output != NULL)) {
		char pgid[32], pid[32];

		CHECK_CONTAINS(r.output, "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
		CHECK_CONTAINS(r.output, "LC_ALL=C\n");
		CHECK_CONTAINS(r.output, "SECRET=none\n");
		CHECK_CONTAINS(r.output, "/dev/null\n"); /* stdin; cat did not block */
		/* the helper leads its own process group */
		if (CHECK(sscanf(strstr(r.output, "/dev/null\n") ?: "", "/dev/null\n%31s\n%31s",
				 pgid, pid) == 2)) {
			CHECK_STR(pgid, pid);
			CHECK_INT((int)r.pgid, atoi(pgid)); /* and the call says which */
		}
	}
	fv_run_done(&r);
}

struct par {
	int i, rc;
	struct fv_ctx cx;
	struct fv_run r;
};

static void *par_call(void *arg)
{
	struct par *p = arg;
	char script[64];
	const char *argv[] = { "sh", "-c", script, NULL };
	struct fv_exec_opts o = { .helper_path = "/usr/bin:/bin", .timeout_s = 60,
				  /* odd calls without a copy of our memory: both kinds at once */
				  .flags = p->i > 0 && p->i % 2 ? FV_EXEC_SPAWN : 0 };

	snprintf(script, sizeof(script), "echo call %d; echo $$%s", p->i,
		 p->i < 0 ? "; exec sleep 60" : "");
	p->rc = fv_exec(&p->cx, argv, &o, &p->r);
	return NULL;
}

/* Calls from threads at once (the provisioner's workers): each its own options, output, group */
TEST(calls_from_threads)
{
	struct par p[8];
	pthread_t t[8];

	reset();
	for (int i = 0; i < 8; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		p[i].i = i;
		REQUIRE(pthread_create(&t[i], NULL, par_call, &p[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		char want[64];

		pthread_join(t[i], NULL);
		CHECK_INT(p[i].rc, 0);
		snprintf(want, sizeof(want), "call %d\n%d\n", i, (int)p[i].r.pgid);
		CHECK_STR(p[i].r.output, want);
		fv_run_done(&p[i].r);
	}
}

/* fv_exec_kill_all() (kubelet's SIGTERM to a driver) ends every helper running now, at once */
TEST(kill_all_ends_every_running_helper)
{
	struct par p[3];
	pthread_t t[3];
	uint64_t end = fv_now_ms() + 30000;
	bool joined[3] = { false };
	int done = 0;

	reset();
	for (int i = 0; i < 3; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		p[i].i = -1 - i;
		p[i].rc = 1;
		REQUIRE(pthread_create(&t[i], NULL, par_call, &p[i]) == 0);
	}
	/* until each call has returned: one started after a round is killed by the next */
	while (done < 3 && fv_now_ms() < end) {
		fv_exec_kill_all();
		(void)poll(NULL, 0, 50);
		for (int i = 0; i < 3; i++)
			if (!joined[i] && pthread_tryjoin_np(t[i], NULL) == 0) {
				joined[i] = true;
				done++;
			}
	}
	for (int i = 0; i < 3; i++) {
		if (!joined[i])
			pthread_join(t[i], NULL); /* the call's own deadline ends it: the checks fail */
		CHECK_INT(p[i].rc, -FV_ERR_HELPER);
		CHECK_INT(p[i].r.status, 128 + SIGKILL);
		CHECK(!p[i].r.timed_out);
		fv_run_done(&p[i].r);
	}
}

TEST(timeout_kills_process_group)
{
	struct fv_run r;
	pid_t child = 0, grandchild = 0;
	uint64_t t0;
	int rc;

	reset();
	t0 = fv_now_ms();
	rc = run_sh("sleep 100 & echo $$ $!; sleep 100", 1, &r);
	uint64_t took = fv_now_ms() - t0;

	CHECK_INT(rc, -FV_ERR_TIMEOUT);
	CHECK(r.timed_out);
	CHECK_INT(r.status, 128 + SIGKILL);
	CHECK_CONTAINS(cx.message, "did not finish within 1 s");
	CHECK(took >= 900);
	if (!CHECK(took < 5000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)took);
	if (CHECK(r.output && sscanf(r.output, "%d %d", &child, &grandchild) == 2)) {
		int st;

		/* the child was reaped by fv_exec: it is gone entirely */
		CHECK(kill(child, 0) < 0 && errno == ESRCH);
		/* the grandchild (reparented to us) died of SIGKILL, not of old age */
		st = reap(grandchild, 2000);
		CHECK(st != REAP_RUNNING);
		if (st >= 0 && !CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
			fprintf(stderr, "  grandchild %d: wait status 0x%x\n", (int)grandchild, st);
		CHECK(pid_gone(grandchild));
	}
	fv_run_done(&r);
}

TEST(daemon_holding_the_pipe_does_not_hang)
{
	struct fv_run r;
	pid_t daemon_pid = 0;
	uint64_t t0;
	int rc;

	reset();
	t0 = fv_now_ms();
	/* the daemon inherits the output pipe and keeps it open after sh exits */
	rc = run_sh("(sleep 5 & echo daemon $!) ; echo hi", 30, &r);
	uint64_t took = fv_now_ms() - t0;

	CHECK_INT(rc, 0);
	CHECK(!r.timed_out);
	if (!CHECK(took < 3000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)took);
	CHECK_CONTAINS(r.output, "hi\n");
	if (CHECK(r.output && sscanf(r.output, "daemon %d", &daemon_pid) == 1)) {
		/* a finished helper's daemons are left alone ... */
		CHECK(kill(daemon_pid, 0) == 0);
		/* ... and this one is ours to end */
		kill(daemon_pid, SIGKILL);
		CHECK(reap(daemon_pid, 2000) != REAP_RUNNING);
	}
	fv_run_done(&r);
}

/* In this process from now on: pidfd_open() fails with ENOSYS (a kernel before 5.3). */
static int no_pidfd_open(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = ARRAY_SIZE(f), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return syscall(SYS_pidfd_open, getpid(), 0) < 0 && errno == ENOSYS ? 0 : -EINVAL;
}

/*
 * Issue 17 point 9: without pidfd_open() the wait for a helper has a
 * deadline too.  A helper that closes its output and lives on (a daemon
 * that is not one) used to block waitpid() with no deadline at all.  Run
 * in a child, so the seccomp filter stays there.
 */
TEST(no_pidfd_still_has_a_deadline)
{
	uint64_t t0 = fv_now_ms();
	pid_t pid = fork();
	int st = 0;

	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct fv_run r;
		int rc;

		reset();
		if (no_pidfd_open() < 0)
			_exit(77);
		rc = run_sh("exec >/dev/null 2>&1; sleep 20", 1, &r);
		_exit(rc == -FV_ERR_TIMEOUT && r.timed_out ? 0 : 1);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		SKIP("no seccomp filter here");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (!CHECK(fv_now_ms() - t0 < 8000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)(fv_now_ms() - t0));
}

/* ... and a helper that exits while a daemon of its own holds the pipe is seen to exit. */
TEST(no_pidfd_daemon_holding_the_pipe)
{
	uint64_t t0 = fv_now_ms();
	pid_t pid = fork();
	int st = 0;

	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct fv_run r;
		int rc;

		reset();
		if (no_pidfd_open() < 0)
			_exit(77);
		rc = run_sh("(sleep 3 &) ; echo hi", 30, &r);
		_exit(rc == 0 && !r.timed_out && r.output && strstr(r.output, "hi") ? 0 : 1);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		SKIP("no seccomp filter here");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (!CHECK(fv_now_ms() - t0 < 2500))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)(fv_now_ms() - t0));
}

TEST(output_cap)
{
	struct fv_run r;

	reset();
	/* 200000 bytes: more than the cap and more than a pipe buffer */
	CHECK_INT(run_sh("head -c 200000 /dev/zero | tr '\\0' a; echo; echo tail", 30, &r), 0);
	if (CHECK(r.output != NULL)) {
		size_t n = strlen(r.output);

		CHECK_U64(n, FV_RUN_OUTPUT_MAX);
		CHECK(n > 0 && r.output[0] == 'a' && r.output[n - 1] == 'a');
	}
	fv_run_done(&r);
}

TEST(trim_output)
{
	char buf[64];

	fv_trim_output("first\nsecond\nthe reason\n\n  \r\n", buf, sizeof(buf));
	CHECK_STR(buf, "the reason");
	fv_trim_output("only line", buf, sizeof(buf));
	CHECK_STR(buf, "only line");
	fv_trim_output("tab\there\x01x", buf, sizeof(buf));
	CHECK_STR(buf, "tab here x");
	fv_trim_output("", buf, sizeof(buf));
	CHECK_STR(buf, "");
	fv_trim_output("\n\n", buf, sizeof(buf));
	CHECK_STR(buf, "");
	strcpy(buf, "junk");
	fv_trim_output(NULL, buf, sizeof(buf));
	CHECK_STR(buf, "");
	/* the first line that reads like a reason wins over banners and usage text */
	fv_trim_output("mke2fs 1.47.0 (5-Feb-2023)\nmkfs.ext4: Device size reported to be zero. "
		       "Invalid partition specified\nUsage: mkfs [-c]\n",
		       buf, sizeof(buf));
	CHECK_STR(buf, "mkfs.ext4: Device size reported to be zero. Invalid partition s");
	fv_trim_output("banner\nERROR: bad superblock\nmount failed too\n", buf, sizeof(buf));
	CHECK_STR(buf, "ERROR: bad superblock");
	/* too long: cut to @max - 1 bytes, always terminated */
	fv_trim_output("abcdefghij", buf, 5);
	CHECK_STR(buf, "abcd");
	fv_trim_output("x\nabcdefghij\n", buf, 11);
	CHECK_STR(buf, "abcdefghij");
	fv_trim_output("x\nabcdefghij\n", buf, 10);
	CHECK_STR(buf, "abcdefghi");
	fv_trim_output("abc", buf, 1);
	CHECK_STR(buf, "");
}

static int fn_status(void *arg)
{
	const char *msg = "from the child\n";

	(void)!write(1, msg, strlen(msg));
	(void)!write(2, "on stderr\n", 10);
	return *(int *)arg;
}

static int fn_sleep(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return 0;
}

TEST(fork_call)
{
	struct fv_run r = { 0 };
	int v;

	reset();
	v = 0;
	CHECK_INT(fv_fork_call(&cx, NULL, fn_status, &v, opts(10, 0), &r), 0);
	CHECK_STR(r.output, "from the child\non stderr\n");
	CHECK_STR(cx.message, "");
	fv_run_done(&r);

	/* a non-zero result is the function's answer, not a failure of the call */
	v = 42;
	CHECK_INT(fv_fork_call(&cx, NULL, fn_status, &v, opts(10, 0), &r), 42);
	CHECK_STR(cx.message, "");
	CHECK_INT(r.status, 42); /* the run records the child's real exit status */
	fv_run_done(&r);

	v = 255;
	CHECK_INT(fv_fork_call(&cx, NULL, fn_status, &v, opts(10, 0), NULL), 255);
	v = 256 + 7; /* exit statuses are 8 bits */
	CHECK_INT(fv_fork_call(&cx, NULL, fn_status, &v, opts(10, 0), NULL), 7);
}

TEST(fork_call_timeout)
{
	struct fv_run r = { 0 };
	uint64_t t0, took;

	reset();
	t0 = fv_now_ms();
	CHECK_INT(fv_fork_call(&cx, NULL, fn_sleep, NULL, opts(1, 0), &r), -FV_ERR_TIMEOUT);
	took = fv_now_ms() - t0;
	CHECK(r.timed_out);
	CHECK(took >= 900);
	if (!CHECK(took < 5000))
		fprintf(stderr, "  took %llu ms\n", (unsigned long long)took);
	CHECK_CONTAINS(cx.message, "did not finish within 1 s");
	fv_run_done(&r);
}

/*
 * What a child holds while it runs: descriptors 0, 1, 2 only (stdin
 * /dev/null, stdout and stderr the one capture pipe), whatever the caller
 * had open, close-on-exec or not (a kubelet reply pipe, a lock, the log);
 * the environment exactly PATH = the helper path and LC_ALL=C.
 */
static int open_leaks(int *a, int *b)
{
	*a = open("/dev/null", O_RDONLY);		/* inheritable */
	*b = open("/dev/null", O_RDONLY | O_CLOEXEC); /* close-on-exec */
	return *a >= 0 && *b >= 0 ? 0 : -1;
}

/* "fd:target" lines for /proc/@pid/fd, sorted by fd, into @buf; the fd in @skip left out. */
static void list_fds(const char *pid, int skip, char *buf, size_t len)
{
	char dir[64], p[128], t[256];
	int fds[256], n = 0;
	size_t o = 0;
	DIR *d;
	struct dirent *e;

	snprintf(dir, sizeof(dir), "/proc/%s/fd", pid);
	buf[0] = '\0';
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d)) && n < 256)
		if (e->d_name[0] != '.' && atoi(e->d_name) != skip && atoi(e->d_name) != dirfd(d))
			fds[n++] = atoi(e->d_name);
	closedir(d);
	for (int i = 0; i < n; i++) /* insertion sort: a handful */
		for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
			int x = fds[j];

			fds[j] = fds[j - 1];
			fds[j - 1] = x;
		}
	for (int i = 0; i < n; i++) {
		ssize_t k;

		snprintf(p, sizeof(p), "%s/%d", dir, fds[i]);
		k = readlink(p, t, sizeof(t) - 1);
		t[k > 0 ? k : 0] = '\0';
		if (!strncmp(t, "pipe:", 5))
			strcpy(t, "pipe");
		o += (size_t)snprintf(buf + o, len - o, "%d:%s\n", fds[i], t);
	}
}

/*
 * ls -l lines ("lr-x------ 1 root root 64 Dec 3 04:25 0 -> /dev/null") to
 * "0:/dev/null", sorted as ls sorts (by name), "pipe:[1234]" to "pipe";
 * other lines ("total 0") dropped, the rest kept.  In place.
 */
static void no_pipe_ids(char *s)
{
	char *out = s, *line = s;

	while (s && *line) {
		size_t n = strcspn(line, "\n");
		char *arrow = memmem(line, n, " -> ", 4), *num;

		if (arrow) {
			for (num = arrow; num > line && num[-1] != ' '; num--)
				;
			out += sprintf(out, "%.*s:", (int)(arrow - num), num);
			if (!strncmp(arrow + 4, "pipe:", 5))
				out += sprintf(out, "pipe\n");
			else
				out += sprintf(out, "%.*s\n", (int)(line + n - arrow - 4), arrow + 4);
		} else if (strncmp(line, "total ", 6)) {
			memmove(out, line, n);
			out += n;
			*out++ = '\n';
		}
		line += n + (line[n] == '\n');
	}
	if (s)
		*out = '\0';
}

static int fn_report(void *arg)
{
	char fds[2048];
	extern char **environ;

	(void)arg;
	list_fds("self", -1, fds, sizeof(fds));
	dprintf(1, "%s", fds);
	for (char **e = environ; *e; e++)
		dprintf(1, "env %s\n", *e);
	return 0;
}

static const char want_fds[] = "0:/dev/null\n1:pipe\n2:pipe\n";
static const char want_env[] = "env PATH=/usr/sbin:/usr/bin:/sbin:/bin\nenv LC_ALL=C\n";

TEST(forked_call_holds_nothing_of_ours)
{
	struct fv_run r = { 0 };
	int a, b;

	reset();
	REQUIRE(open_leaks(&a, &b) == 0);
	setenv("FV_UNIT_SECRET", "leak", 1);
	CHECK_INT(fv_fork_call(&cx, NULL, fn_report, NULL, opts(10, 0), &r), 0);
	unsetenv("FV_UNIT_SECRET");
	if (CHECK(r.output != NULL)) {
		char want[512];

		snprintf(want, sizeof(want), "%s%s", want_fds, want_env);
		CHECK_STR(r.output, want);
	}
	fv_run_done(&r);
	close(a);
	close(b);
}

TEST(helper_holds_nothing_of_ours)
{
	/* ls, a child of sh, lists sh's descriptors: sh opens nothing of its own for that */
	const char *argv[] = { "sh", "-c",
			       "ls -l /proc/$$/fd; tr '\\0' '\\n' < /proc/$$/environ | sed 's/^/env /'",
			       NULL };
	struct fv_exec_opts keep;
	struct fv_run r = { 0 };
	char want[512];
	int a, b;

	reset();
	REQUIRE(open_leaks(&a, &b) == 0);
	setenv("FV_UNIT_SECRET", "leak", 1);
	CHECK_INT(fv_exec(&cx, argv, opts(10, 0), &r), 0);
	unsetenv("FV_UNIT_SECRET");
	no_pipe_ids(r.output);
	snprintf(want, sizeof(want), "%s%s", want_fds, want_env);
	CHECK_STR(r.output, want);
	fv_run_done(&r);

	/* one descriptor may be handed down on purpose: the device lock to mkfs */
	keep = *opts(10, 0);
	keep.keep_fd = a;
	CHECK_INT(fv_exec(&cx, argv, &keep, &r), 0);
	no_pipe_ids(r.output);
	snprintf(want, sizeof(want), "%s%d:/dev/null\n%s", want_fds, a, want_env);
	CHECK_STR(r.output, want);
	fv_run_done(&r);
	close(a);
	close(b);
}

/*
 * SIGKILL of the driver takes its running helper along (parent-death
 * signal): nothing keeps working on a device after the driver is gone.
 */
static int fn_pid_then_sleep(void *arg)
{
	char tmp[PATH_MAX];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.t", (const char *)arg);
	f = fopen(tmp, "we");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
		rename(tmp, arg);
	}
	for (;;)
		pause();
	return 0;
}

static void killed_driver_takes_child(bool forked)
{
	char pidfile[] = "/tmp/fv-unit-pid-XXXXXX";
	int tmp = mkstemp(pidfile);
	pid_t drv, helper = 0;
	uint64_t end;

	REQUIRE(tmp >= 0);
	close(tmp);
	unlink(pidfile);
	drv = fork();
	REQUIRE(drv >= 0);
	if (drv == 0) {
		char script[256];
		const char *argv[] = { "sh", "-c", script, NULL };

		snprintf(script, sizeof(script), "echo $$ > %s.t; mv %s.t %s; exec sleep 100",
			 pidfile, pidfile, pidfile);
		if (forked)
			_exit(fv_fork_call(&cx, NULL, fn_pid_then_sleep, pidfile, opts(60, 0), NULL));
		_exit(fv_exec(&cx, argv, opts(60, 0), NULL) == 0 ? 0 : 1);
	}
	for (end = fv_now_ms() + 10000; fv_now_ms() < end && !helper;) {
		FILE *f = fopen(pidfile, "re");

		if (f) {
			if (fscanf(f, "%d", &helper) != 1)
				helper = 0;
			fclose(f);
		}
		if (!helper)
			nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000 * 1000 }, NULL);
	}
	unlink(pidfile);
	kill(drv, SIGKILL);
	waitpid(drv, NULL, 0);
	if (!CHECK(helper > 0))
		return;
	/* the helper is reparented to us (subreaper): it must be dead, not sleeping */
	CHECK(reap(helper, 3000) != REAP_RUNNING);
}

TEST(helper_dies_with_the_driver)
{
	reset();
	killed_driver_takes_child(false);
}

TEST(forked_call_dies_with_the_driver)
{
	reset();
	killed_driver_takes_child(true);
}
