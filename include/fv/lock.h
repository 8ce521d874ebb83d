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
 * fv_lock() - take the lock called @name (any string; it is encoded into a
 * safe file name) within the configured lock timeout.  The lock is held
 * until the process exits or fv_unlock() is called on the returned fd.
 * Returns: a file descriptor >= 0, or -FV_ERR_TIMEOUT / -errno (message set).
 */
int fv_lock(struct fv_ctx *cx, const char *name);
void fv_unlock(int fd);

#endif
