/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers without a shell: captured output, deadline, process-group kill (fv/exec.h). */
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "internal.h"
#include "fv/exec.h"
#include "fv/log.h"
#include "fv/util.h"

#define POLL_NO_PIDFD_MS 20 /* how often the exit is asked for without a pidfd */

#ifndef SYS_close_range
#define SYS_close_range 436 /* the same number on every architecture */
#endif

/*
 * The process groups of the helpers and forked calls running now, for a
 * signal handler to kill (fv_exec_kill_all()).  Lock-free: a slot is taken
 * by a compare-and-swap from 0 and given back by a store of 0.  More calls
 * at once than slots (the provisioner runs one per worker) go untracked:
 * the parent-death signal still ends each child with its thread.
 */
#define RUNNING_MAX 64
static int running[RUNNING_MAX];

static int track(pid_t pgid)
{
	for (int i = 0; i < RUNNING_MAX; i++) {
		int idle = 0;

		if (__atomic_compare_exchange_n(&running[i], &idle, (int)pgid, false,
						__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			return i;
	}
	return -1;
}

static void untrack(int slot)
{
	if (slot >= 0)
		__atomic_store_n(&running[slot], 0, __ATOMIC_SEQ_CST);
}

void fv_exec_kill_all(void)
{
	for (int i = 0; i < RUNNING_MAX; i++) {
		int g = __atomic_load_n(&running[i], __ATOMIC_SEQ_CST);

		if (g > 0)
			kill(-g, SIGKILL);
	}
}

struct fv_exec_opts fv_exec_opts_of(const struct fv_ctx *cx)
{
	return (struct fv_exec_opts){ .helper_path = cx->cfg.helper_path,
				      .timeout_s = cx->cfg.helper_timeout };
}

void fv_run_done(struct fv_run *r)
{
	if (!r)
		return;
	free(r->output);
	r->output = NULL;
}

/* Does this line of helper output look like the reason for a failure? */
static bool says_why(const char *line, size_t n)
{
	static const char *const words[] = { "error", "denied", "fail", "cannot", "can't", "unable",
					     "must", "invalid", "too small", "too large", "no such",
					     "not found", "refused", "timed out", "exists" };
	char low[512];

	if (n >= sizeof(low))
		n = sizeof(low) - 1;
	for (size_t i = 0; i < n; i++)
		low[i] = (char)((line[i] >= 'A' && line[i] <= 'Z') ? line[i] + 32 : line[i]);
	low[n] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (strstr(low, words[i]))
			return true;
	return false;
}

/*
 * The one line that says why: the first that reads like an error (tools
 * print a banner first and usage text after), else the last non-empty one.
 */
void fv_trim_output(const char *output, char *buf, size_t max)
{
	const char *p, *pick = NULL, *last = NULL;
	size_t len = 0, pick_n = 0, last_n = 0;

	if (!max)
		return;
	buf[0] = '\0';
	if (!output)
		return;
	for (p = output; *p; p += len + (p[len] != '\0')) {
		size_t n = len = strcspn(p, "\n");

		while (n && (p[n - 1] == '\r' || p[n - 1] == ' '))
			n--;
		if (!n)
			continue;
		last = p;
		last_n = n;
		if (!pick && says_why(p, n)) {
			pick = p;
			pick_n = n;
		}
	}
	if (!pick) {
		pick = last;
		pick_n = last_n;
	}
	if (!pick)
		return;
	if (pick_n >= max)
		pick_n = max - 1;
	for (size_t i = 0; i < pick_n; i++)
		buf[i] = (pick[i] == '\t' || (unsigned char)pick[i] < 0x20) ? ' ' : pick[i];
	buf[pick_n] = '\0';
}

/* Resolve @name in @p, a helper path.  Returns 0 or -ENOENT. */
static int find_helper(const char *p, const char *name, char *ret, size_t len)
{

	if (strchr(name, '/')) {
		snprintf(ret, len, "%s", name);
		return access(ret, X_OK) == 0 ? 0 : -ENOENT;
	}
	while (*p) {
		size_t n = strcspn(p, ":");

		if (n && snprintf(ret, len, "%.*s/%s", (int)n, p, name) < (int)len &&
		    access(ret, X_OK) == 0)
			return 0;
		p += n;
		if (*p)
			p++;
	}
	return -ENOENT;
}

static void append(struct fv_run *r, size_t *len, const char *buf, size_t n)
{
	if (!r->output || *len >= FV_RUN_OUTPUT_MAX)
		return;
	if (n > FV_RUN_OUTPUT_MAX - *len)
		n = FV_RUN_OUTPUT_MAX - *len;
	memcpy(r->output + *len, buf, n);
	*len += n;
	r->output[*len] = '\0';
}

/*
 * Collect output from @fd until the child @pid exits or the deadline
 * passes (collect(): with the group in the registry meanwhile).  We wait for the child's exit, not for EOF on the pipe: a
 * daemon the helper started (mount.nfs may start rpc.statd) can hold the
 * pipe open forever (contract §7.2).
 */
static int wait_child(pid_t pid, int fd, unsigned int timeout_s, struct fv_run *r)
{
	_cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	uint64_t deadline = fv_now_ms() + (uint64_t)timeout_s * 1000;
	bool exited = false, eof = false, reaped = false;
	size_t len = 0;
	char buf[4096];
	int st = 0;

	r->output = calloc(1, FV_RUN_OUTPUT_MAX + 1);
	while (!exited) {
		struct pollfd p[2] = { { .fd = eof ? -1 : fd, .events = POLLIN },
				       { .fd = pidfd, .events = POLLIN } };
		uint64_t now = fv_now_ms();
		int n;

		if (now >= deadline) {
			kill(-pid, SIGKILL);
			r->timed_out = true;
			break;
		}
		/*
		 * No pidfd (Linux < 5.3, a seccomp filter): nothing to poll for the
		 * exit, so ask waitpid(WNOHANG) every POLL_NO_PIDFD_MS instead - the
		 * same deadline, and a daemon holding the pipe is no wait either.
		 */
		if (pidfd < 0) {
			pid_t k = waitpid(pid, &st, WNOHANG);

			if (k == pid) {
				exited = reaped = true;
				continue;
			}
			if (k < 0 && errno != EINTR)
				return NEG_ERRNO();
		}
		n = poll(p, 2, pidfd < 0 && deadline - now > POLL_NO_PIDFD_MS ? POLL_NO_PIDFD_MS
									 : (int)(deadline - now));
		if (n < 0 && errno != EINTR)
			return NEG_ERRNO();
		if (n <= 0)
			continue;
		if (p[0].revents) {
			ssize_t k = read(fd, buf, sizeof(buf));

			if (k > 0)
				append(r, &len, buf, (size_t)k);
			else if (k == 0 || (errno != EINTR && errno != EAGAIN))
				eof = true;
		}
		if (p[1].revents)
			exited = true;
	}
	/* drain what the child left in the pipe, without blocking on daemons */
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		ssize_t k = read(fd, buf, sizeof(buf));

		if (k <= 0)
			break;
		append(r, &len, buf, (size_t)k);
	}
	if (r->timed_out && !reaped) {
		/*
		 * A child stuck in the kernel (umount2 on a dead NFS server sits
		 * in D state) does not die from SIGKILL until the call returns.
		 * Give it a moment, then leave it: waiting would hang us too.
		 */
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		bool died = false;

		if (pidfd >= 0) {
			died = poll(&p, 1, 3000) > 0;
		} else {
			for (uint64_t end = fv_now_ms() + 3000; !died && fv_now_ms() < end;) {
				pid_t k = waitpid(pid, &st, WNOHANG);

				died = reaped = k == pid;
				if (!died)
					(void)poll(NULL, 0, POLL_NO_PIDFD_MS);
			}
		}
		if (!died) {
			fv_log("helper %d did not die after SIGKILL; leaving it to init", (int)pid);
			r->status = 128 + SIGKILL;
			return 0;
		}
	}
	while (!reaped && waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return NEG_ERRNO();
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return 0;
}

static int collect(pid_t pid, int fd, unsigned int timeout_s, struct fv_run *r)
{
	int slot = track(pid);
	int rc;

	r->pgid = pid;
	rc = wait_child(pid, fd, timeout_s, r);

	untrack(slot);
	return rc;
}

static int finish(struct fv_ctx *cx, const char *what, uint64_t t0, int rc, unsigned int timeout_s,
		  struct fv_run *r, struct fv_run *keep, bool quiet)
{
	char tail[512];

	fv_log_text("  | ", r->output);
	fv_log("helper %s: %s %d after %llu ms", what, r->timed_out ? "killed, timeout" : "status",
	       r->timed_out ? (int)timeout_s : r->status, (unsigned long long)(fv_now_ms() - t0));
	if (quiet) {
		/* the caller reads the status and explains failures itself */
		if (rc == 0 && r->timed_out)
			rc = -FV_ERR_TIMEOUT;
	} else if (rc == 0 && r->timed_out)
		rc = fv_fail(cx, -FV_ERR_TIMEOUT, "%s did not finish within %u s", what, timeout_s);
	else if (rc == 0 && r->status != 0)
		rc = fv_fail(cx, -FV_ERR_HELPER, "%s failed with status %d", what, r->status);
	if (rc < 0 && !quiet && !cx->detail[0]) {
		fv_trim_output(r->output, tail, 300);
		fv_ctx_add_detail(cx, tail);
	}
	if (keep)
		*keep = *r;
	else
		fv_run_done(r);
	return rc;
}

/* Close descriptors @lo..@hi (inclusive) in a child; no close_range (kernel < 5.9): one by one. */
static void close_span(unsigned int lo, unsigned int hi)
{
	struct rlimit rl;

	if (lo > hi || syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		rl.rlim_cur = 65536;
	if (hi >= rl.rlim_cur)
		hi = (unsigned int)rl.rlim_cur - 1;
	for (unsigned int fd = lo; fd <= hi && fd >= lo; fd++)
		close((int)fd);
}

/* Close every descriptor from 3 up, except @a and @b (-1: none). */
static void close_all_but(int a, int b)
{
	unsigned int lo = 3;
	int k[2] = { a < b ? a : b, a < b ? b : a };

	for (int i = 0; i < 2; i++) {
		if (k[i] < (int)lo)
			continue;
		close_span(lo, (unsigned int)k[i] - 1);
		lo = (unsigned int)k[i] + 1;
	}
	close_span(lo, ~0U);
}

/*
 * The child's side of every helper and forked call, between fork() and
 * exec (or the function): own process group; SIGKILL when the driver dies
 * (a killed driver leaves no helper working on a device: the retry would
 * race it), with the race against an already dead parent checked; signal
 * mask and dispositions reset; stdin /dev/null, stdout and stderr the
 * capture pipe @out; every other descriptor closed but @keep (an exec
 * error pipe, a device lock handed to mkfs).  Returns 0 or -errno.
 */
static int child_setup(pid_t parent, int out, int keep1, int keep2)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;
	int null;

	if (setpgid(0, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return NEG_ERRNO();
	/* the driver died before the death signal was armed (kill, not raise: raise() names
	 * the calling thread by its cached id, which a child sharing the memory has wrong) */
	if (getppid() != parent)
		kill(getpid(), SIGKILL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)sigaction(sig, &dfl, NULL); /* the RT signals glibc keeps fail: fine */
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
		return NEG_ERRNO();
	null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0)
		return NEG_ERRNO();
	if (dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
		return NEG_ERRNO();
	close_all_but(keep1, keep2);
	return 0;
}

/* What a helper's child needs to exec it (run_child()). */
struct child_args {
	pid_t parent;
	int out, errw, keep_fd;
	const char *path;
	char *const *argv, *const *envp;
};

/* The child: set up, exec; an error goes back through @errw, then exit 127. */
static int run_child(void *arg)
{
	const struct child_args *a = arg;
	int err = child_setup(a->parent, a->out, a->errw, a->keep_fd);

	if (!err && a->keep_fd >= 0 && fcntl(a->keep_fd, F_SETFD, 0) < 0)
		err = NEG_ERRNO();
	if (!err) {
		execve(a->path, a->argv, a->envp);
		err = NEG_ERRNO();
	}
	err = -err;
	(void)!write(a->errw, &err, sizeof(err));
	_exit(127);
}

/*
 * The sanitizers' runtimes follow fork() and not a child that shares the
 * memory: those builds fork (the same child, a copy of the memory).
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPAWN_SHARED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SPAWN_SHARED 0
#endif
#endif
#ifndef SPAWN_SHARED
#define SPAWN_SHARED 1
#endif

/* the child's stack while it shares the memory: child_setup()'s frames and execve */
#define SPAWN_STACK (32 * 1024)

/*
 * FV_EXEC_SPAWN: clone(CLONE_VM | CLONE_VFORK), as posix_spawn starts a
 * program: no page tables copied, no page of ours made copy-on-write, and
 * this thread stopped until the child has exec'd or exited.  The child
 * runs on a stack of our frame and may write only there (and errno, this
 * thread's, stopped); every signal is blocked around it, so no handler of
 * ours runs in it before child_setup() has reset them all.
 */
static pid_t spawn_shared(struct child_args *a)
{
	_Alignas(16) char stack[SPAWN_STACK];
	sigset_t all, old;
	pid_t pid;
	int e;

	sigfillset(&all);
	if (sigprocmask(SIG_BLOCK, &all, &old) < 0)
		return -1;
	pid = clone(run_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	e = errno;
	(void)sigprocmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return pid;
}

int fv_exec(struct fv_ctx *cx, const char *const *argv, const struct fv_exec_opts *opt,
	    struct fv_run *ret)
{
	char path[PATH_MAX], envpath[PATH_MAX + 8], logline[1024];
	char *envp[] = { envpath, (char *)"LC_ALL=C", NULL };
	const char *hp = opt->helper_path ? opt->helper_path : "";
	bool quiet = opt->flags & FV_EXEC_STATUS;
	int keep_fd = opt->keep_fd > 2 ? opt->keep_fd : -1;
	unsigned int timeout_s = opt->timeout_s;
	struct fv_run r = { 0 };
	uint64_t t0 = fv_now_ms();
	int pipefd[2], errpipe[2], rc = 0, err = 0;
	pid_t pid, parent = getpid();
	size_t o = 0;
	ssize_t k;

	if (ret)
		memset(ret, 0, sizeof(*ret));
	for (unsigned int i = 0; argv[i] && o < sizeof(logline) - 1; i++)
		o += (size_t)snprintf(logline + o, sizeof(logline) - o, "%s%s", i ? " " : "",
				      i < 32 && (opt->redact & (1U << i)) ? "***" : argv[i]);
	fv_log("run: %s", logline);
	if (find_helper(hp, argv[0], path, sizeof(path)) < 0)
		return quiet ? -ENOENT : fv_fail(cx, -ENOENT, "helper '%s' not found in %s", argv[0],
			       hp);
	snprintf(envpath, sizeof(envpath), "PATH=%s", hp);
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return NEG_ERRNO();
	/* non-blocking: a child stuck in execve (a helper on a dead NFS mount) holds it open */
	if (pipe2(errpipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = NEG_ERRNO();
		close(pipefd[0]);
		close(pipefd[1]);
		return rc;
	}
	/*
	 * fork (or clone, FV_EXEC_SPAWN) + exec rather than posix_spawn: the
	 * child needs a parent-death signal and a close_range(), which
	 * posix_spawn cannot do.  Exec errors come back through @errpipe
	 * (closed by a successful exec).
	 */
	struct child_args ca = { .parent = parent, .out = pipefd[1], .errw = errpipe[1],
				 .keep_fd = keep_fd, .path = path, .argv = (char *const *)argv,
				 .envp = envp };

	if (SPAWN_SHARED && (opt->flags & FV_EXEC_SPAWN)) {
		pid = spawn_shared(&ca);
	} else {
		pid = fork();
		if (pid == 0)
			run_child(&ca);
	}
	if (pid > 0)
		setpgid(pid, pid); /* also from here, so the group exists before any kill */
	else
		rc = NEG_ERRNO();
	close(pipefd[1]);
	close(errpipe[1]);
	if (rc < 0) {
		close(pipefd[0]);
		close(errpipe[0]);
		return quiet ? rc : fv_fail(cx, rc, "cannot run '%s': %s", path, strerror(-rc));
	}
	/*
	 * The deadline covers the way to exec too: a child stopped or stuck
	 * before its execve is killed like a helper that hangs, where a wait
	 * for the error pipe would have no end.  Once it has exited, the pipe
	 * holds the exec's errno, or nothing (it exec'd).
	 */
	rc = collect(pid, pipefd[0], timeout_s, &r);
	close(pipefd[0]);
	while ((k = read(errpipe[0], &err, sizeof(err))) < 0 && errno == EINTR)
		;
	close(errpipe[0]);
	if (k == (ssize_t)sizeof(err) && !r.timed_out) {
		fv_run_done(&r);
		rc = -err;
		return quiet ? rc : fv_fail(cx, rc, "cannot run '%s': %s", path, strerror(-rc));
	}
	return finish(cx, argv[0], t0, rc, timeout_s, &r, ret, quiet);
}

int fv_fork_call(struct fv_ctx *cx, const char *what, int (*fn)(void *arg), void *arg,
		 const struct fv_exec_opts *opt, struct fv_run *ret)
{
	const char *hp = opt->helper_path ? opt->helper_path : "";
	int keep_fd = opt->keep_fd > 2 ? opt->keep_fd : -1;
	unsigned int timeout_s = opt->timeout_s;
	char envpath[PATH_MAX + 8];
	struct fv_run r = { 0 };
	uint64_t t0 = fv_now_ms();
	int pipefd[2], rc;
	pid_t pid, parent = getpid();

	if (ret)
		memset(ret, 0, sizeof(*ret));
	if (!what)
		what = "forked call";
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return NEG_ERRNO();
	pid = fork();
	if (pid < 0) {
		rc = NEG_ERRNO();
		close(pipefd[0]);
		close(pipefd[1]);
		return rc;
	}
	if (pid == 0) {
		extern char **environ;
		static char *envp[3];

		/*
		 * Without an exec nothing is closed for us: kubelet's reply pipe,
		 * the op's lock and the log are ours to close, so a child stuck
		 * in the kernel (umount2 on a dead server) holds none of them.
		 * The log goes first, so no line of the child lands in a
		 * descriptor number reused by the function.  What @fn execs
		 * (libmount runs mount.nfs) gets the reduced environment.
		 */
		fv_log_close();
		snprintf(envpath, sizeof(envpath), "PATH=%s", hp);
		envp[0] = envpath;
		envp[1] = (char *)"LC_ALL=C";
		environ = envp;
		if (child_setup(parent, pipefd[1], keep_fd, -1) < 0)
			_exit(127);
		_exit(fn(arg) & 0xff);
	}
	setpgid(pid, pid); /* also from here, so the group exists before any kill */
	close(pipefd[1]);
	rc = collect(pid, pipefd[0], timeout_s, &r);
	close(pipefd[0]);
	if (rc < 0 || r.timed_out)
		return finish(cx, what, t0, rc, timeout_s, &r, ret, false);
	rc = r.status; /* the function's result, not a helper failure: the caller explains it */
	if (rc == 0 && (opt->flags & FV_EXEC_QUIET_OK) && (!r.output || !r.output[0])) {
		if (ret)
			*ret = r;
		else
			fv_run_done(&r);
		return 0;
	}
	finish(cx, what, t0, 0, timeout_s, &r, ret, true);
	return rc;
}
