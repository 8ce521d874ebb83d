/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Named exclusive locks: flock(2) on <run_dir>/locks/<name>.lock with a
 * deadline.  The kernel drops the lock when the process dies, so a SIGKILL
 * never leaves a stale lock behind.
 */
#ifndef FV_LOCK_H
#define FV_LOCK_H

#include <limits.h>
#include <stddef.h>

struct fv_ctx;

/* A lock name: a path-long volume name or directory, and the driver's name and kind before it. */
#define FV_LOCK_NAME_MAX (PATH_MAX + 64)

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
/* Release a lock of fv_lock(), its file removed first: lock files exist only while in use. */
void fv_unlock(int fd);

/*
 * fv_lock_volume_name() - the name of the lock on volume @volume's node
 * state, "<driver>-vol-<volume>", into @buf (FV_LOCK_NAME_MAX): the one the
 * dispatcher takes for mountdevice, unmountdevice and detach, node-mode
 * mount and unmount take, and the collector tries before it releases.
 */
void fv_lock_volume_name(const struct fv_ctx *cx, const char *volume, char *buf, size_t len);

/*
 * fv_unlock_remove() - fv_unlock() of the lock @name (@fd).  Removing the
 * file is safe against other lockers: fv_lock() checks, once it holds a
 * lock, that the file is still the one its path names, and starts again
 * otherwise.
 */
void fv_unlock_remove(struct fv_ctx *cx, const char *name, int fd);

#endif
