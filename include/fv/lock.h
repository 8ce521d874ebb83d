/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Named exclusive locks: flock(2) on <run_dir>/locks/<name>.lock with a
 * deadline.  The kernel drops the lock when the process dies, so a SIGKILL
 * never leaves a stale lock behind.
 */
#ifndef FV_LOCK_H
#define FV_LOCK_H

struct fv_ctx;

/*
 * fv_flock_deadline() - flock(@fd, @op) (LOCK_EX or LOCK_SH), waiting at
 * most @timeout_ms for a holder to let go (0: only try).  The one way the
 * code waits for a BSD lock: the named locks below and the lock on a block
 * device around probe, mkfs and mount (fv_blk_lock()).  Other signals
 * arriving meanwhile do not end the wait early.
 * Returns: 0, -FV_ERR_TIMEOUT, or -errno (-EINVAL for a bad @op).  No message set.
 */
int fv_flock_deadline(int fd, int op, unsigned int timeout_ms);

/*
 * fv_lock() - take the lock called @name (any string; it is encoded into a
 * safe file name) within the configured lock timeout.  The lock is held
 * until the process exits or fv_unlock() is called on the returned fd.
 * Returns: a file descriptor >= 0, or -FV_ERR_TIMEOUT / -errno (message set).
 */
int fv_lock(struct fv_ctx *cx, const char *name);
/* fv_lock() without waiting: a lock someone holds is -EWOULDBLOCK (no message set). */
int fv_lock_try(struct fv_ctx *cx, const char *name);
void fv_unlock(int fd);

#endif
