/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running helper programs (mkfs, resize2fs, iscsiadm, ...) and forked
 * functions (a libmount call that runs mount.nfs) without a shell.
 *
 * The child runs in its own process group with stdin on /dev/null and
 * stdout+stderr on one pipe that we read; every other descriptor is closed
 * in the child (close_range), so neither a helper nor a forked call holds
 * kubelet's reply pipe, a lock or the log.  Signal mask and dispositions
 * are reset.  The child gets SIGKILL when the driver dies (parent-death
 * signal), so a killed driver leaves no helper working behind it.  At the
 * deadline the whole process group is killed with SIGKILL, and we wait for
 * the child's exit, not for EOF.  The environment is exactly PATH (the
 * configured helper path) and LC_ALL=C, for helpers and for what a forked
 * call execs, so messages are stable and nothing of kubelet's leaks in.
 *
 * The captured output is logged (argv elements flagged in @redact are
 * logged as "***") and kept in struct fv_run for the reply message.
 */
#ifndef FV_EXEC_H
#define FV_EXEC_H

#include <stdbool.h>
#include <stddef.h>

struct fv_ctx;

struct fv_run {
	int status;	/* exit status; 128+signal when killed */
	bool timed_out; /* the deadline passed and the group was killed */
	char *output;	/* stdout+stderr, NUL-terminated, at most FV_RUN_OUTPUT_MAX */
};

#define FV_RUN_OUTPUT_MAX (64 * 1024)

/*
 * fv_exec() - run @argv[0] (looked up in the configured helper path unless
 * it contains a '/') with a deadline of @timeout_s seconds.
 * @redact: bit i set means argv[i] is secret and is never logged.
 * Returns: 0 when the program ran to an exit status of 0; -FV_ERR_HELPER when
 * it exited non-zero (status in @r), -FV_ERR_TIMEOUT on timeout, -errno when
 * it could not be started.  The reply message is set on failure, with the
 * trimmed output appended.  @r may be NULL; otherwise free it with
 * fv_run_done().
 */
int fv_exec(struct fv_ctx *cx, const char *const *argv, unsigned int redact,
	    unsigned int timeout_s, struct fv_run *r);

/*
 * fv_exec_fd() - fv_exec() handing @keep_fd down to the helper (inherited
 * under its number; -1: none): the lock on a block device to the mkfs that
 * writes it, so the lock lasts exactly as long as the writer does.
 */
int fv_exec_fd(struct fv_ctx *cx, const char *const *argv, unsigned int redact,
	       unsigned int timeout_s, int keep_fd, struct fv_run *r);

/*
 * fv_exec_status() - like fv_exec(), for helpers whose exit codes carry
 * meaning (iscsiadm: 15 = already logged in, 21 = nothing found): a
 * non-zero exit is not a failure, and the reply message is never set.
 * Returns: 0 when the program ran to an exit (its status in @r->status),
 * -FV_ERR_TIMEOUT when it was killed at the deadline, -ENOENT when it is
 * not in the helper path, -errno when it could not be started.  @r is
 * required; free it with fv_run_done().
 */
int fv_exec_status(struct fv_ctx *cx, const char *const *argv, unsigned int redact,
		   unsigned int timeout_s, struct fv_run *r);

/*
 * fv_fork_call() - run @fn(@arg) in a forked child set up like a helper
 * (own process group, stdio on the capture pipe, every other descriptor
 * closed, the reduced environment, SIGKILL when the driver dies), with a
 * deadline.  The log is closed in the child: what @fn has to say goes to
 * stdout (the capture pipe), which the parent logs.  The
 * child's return value is its exit status (0..255), also kept in @r->status;
 * a non-zero one is the function's answer, not a failure (no message set).
 * Returns: @fn's return value (>= 0), -FV_ERR_TIMEOUT, or -errno.
 */
int fv_fork_call(struct fv_ctx *cx, int (*fn)(void *arg), void *arg, unsigned int timeout_s,
		 struct fv_run *r);

/*
 * fv_fork_call_named() - fv_fork_call() with @what naming the work in the
 * log and in the timeout message ("<what> did not finish within N s").
 */
int fv_fork_call_named(struct fv_ctx *cx, const char *what, int (*fn)(void *arg), void *arg,
		       unsigned int timeout_s, struct fv_run *r);

void fv_run_done(struct fv_run *r);

/* Async-signal-safe: SIGKILL the process group of the helper running now, if any. */
void fv_exec_kill_current(void);

/* Last non-empty line(s) of helper output, trimmed to @max bytes, into @buf. */
void fv_trim_output(const char *output, char *buf, size_t max);

#endif
