/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running helper programs (mkfs, resize2fs, iscsiadm, ...) and forked
 * functions (a libmount call that runs mount.nfs) without a shell.
 *
 * The child runs in its own process group with stdin on /dev/null and
 * stdout+stderr on one pipe that we read; every other descriptor is closed
 * in the child (close_range), so neither a helper nor a forked call holds
 * kubelet's reply pipe, a lock or the log.  Signal mask and dispositions
 * are reset.  The child gets SIGKILL when the thread that started it ends
 * (parent-death signal: the driver's one thread, a provisioner worker), so
 * a killed driver leaves no helper working behind it.  At the deadline the
 * whole process group is killed with SIGKILL, and we wait for the child's
 * exit, not for EOF.  The environment is exactly PATH (the call's helper
 * path) and LC_ALL=C, for helpers and for what a forked call execs, so
 * messages are stable and nothing of kubelet's leaks in.
 *
 * The captured output is logged (argv elements flagged in the call's
 * redact mask are logged as "***") and kept in struct fv_run for the reply
 * message.  The process groups running now are kept in a small lock-free
 * registry, the one state calls share, for a signal handler to kill
 * (fv_exec_kill_all()).
 */
#ifndef FV_EXEC_H
#define FV_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct fv_ctx;

/*
 * How one helper or forked call runs.  Every option comes with the call and
 * nothing of one call is kept for the next, so threads (the provisioner's
 * workers) can run helpers at once.
 */
struct fv_exec_opts {
	const char *helper_path; /* the child's PATH; argv[0] without a '/' is looked up in it */
	unsigned int timeout_s;	 /* deadline: the child's process group is SIGKILLed then */
	int keep_fd;		 /* handed down to the helper under its number; < 3: none */
	unsigned int redact;	 /* bit i set: argv[i] is secret and logged as "***" */
	unsigned int flags;	 /* FV_EXEC_* */
};

/*
 * The exit status is data (iscsiadm: 15 = already logged in, 21 = nothing
 * found): a non-zero exit is no failure, and the reply message is never set.
 */
#define FV_EXEC_STATUS (1U << 0)

/*
 * The helper is started without a copy of the caller's memory: its thread
 * stops until the helper has exec'd (as posix_spawn does), rather than a
 * fork() whose copy-on-write the caller's other threads pay for at their
 * next writes.  Only for a helper on a local file system (this program
 * itself): the way to its exec has no deadline, its run does.
 */
#define FV_EXEC_SPAWN (1U << 1)

/*
 * A run that exits 0 within its deadline, with no output, writes no log
 * line: a periodic probe (NodeGetVolumeStats' health) that only looks, as
 * calls that only look are not logged when they succeed.
 */
#define FV_EXEC_QUIET_OK (1U << 2)

/* The helper path and helper timeout of @cx's node config; no kept fd, no flags. */
struct fv_exec_opts fv_exec_opts_of(const struct fv_ctx *cx);

struct fv_run {
	int status;	/* exit status; 128+signal when killed */
	bool timed_out; /* the deadline passed and the group was killed */
	pid_t pgid;	/* the child's process group (its pid); 0: none was started */
	char *output;	/* stdout+stderr, NUL-terminated, at most FV_RUN_OUTPUT_MAX */
};

#define FV_RUN_OUTPUT_MAX (64 * 1024)

/*
 * fv_exec() - run @argv[0] (looked up in @o->helper_path unless it contains
 * a '/') with the deadline @o->timeout_s, @o->keep_fd inherited (the lock on
 * a block device to the mkfs that writes it, so the lock lasts exactly as
 * long as the writer does).
 * Returns: 0 when the program ran to an exit status of 0; -FV_ERR_HELPER when
 * it exited non-zero (status in @r), -FV_ERR_TIMEOUT on timeout, -ENOENT when
 * it is not in the helper path, -errno when it could not be started.  The
 * reply message is set on failure, with the line of the output that says why
 * appended (fv_trim_output()).
 * With FV_EXEC_STATUS: 0 whenever the program ran to an exit (its status in
 * @r->status), the other returns as above, and no message is set.
 * @r may be NULL; otherwise free it with fv_run_done().
 */
int fv_exec(struct fv_ctx *cx, const char *const *argv, const struct fv_exec_opts *o,
	    struct fv_run *r);

/*
 * fv_fork_call() - run @fn(@arg) in a forked child set up like a helper
 * (own process group, stdio on the capture pipe, every other descriptor
 * closed but @o->keep_fd, the environment of @o->helper_path, SIGKILL when
 * the caller dies), with the deadline @o->timeout_s.  @what names the work in
 * the log and in the timeout message ("<what> did not finish within N s").
 * The log is closed in the child: what @fn has to say goes to stdout (the
 * capture pipe), which the parent logs.  The child's return value is its
 * exit status (0..255), also kept in @r->status; a non-zero one is the
 * function's answer, not a failure (no message set).
 * Only for single-threaded callers (the drivers): a child forked from a
 * threaded process inherits the locks other threads hold; exec instead.
 * Returns: @fn's return value (>= 0), -FV_ERR_TIMEOUT, or -errno.
 */
int fv_fork_call(struct fv_ctx *cx, const char *what, int (*fn)(void *arg), void *arg,
		 const struct fv_exec_opts *o, struct fv_run *r);

void fv_run_done(struct fv_run *r);

/*
 * Async-signal-safe: SIGKILL the process group of every helper and forked
 * call of this process running now (a driver killed at kubelet's deadline
 * takes them along).
 */
void fv_exec_kill_all(void);

/*
 * The one line of helper output that says why, trimmed to @max bytes, into
 * @buf: the first line that reads like an error (tools print a banner first
 * and usage text after), else the last non-empty one.
 */
void fv_trim_output(const char *output, char *buf, size_t max);

#endif
