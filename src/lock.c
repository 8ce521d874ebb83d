/* SPDX-License-Identifier: Apache-2.0 */
/* Named flock(2) locks with a deadline (fv/lock.h). */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/util.h"

static void on_alarm(int sig)
{
	(void)sig; /* only here to interrupt flock() with EINTR */
}

/*
 * The SIGALRM disposition is the process's, and threads wait at once
 * (flexvol-csi's calls, the provisioner's workers): the first waiter
 * installs the handler and the last puts the old one back, so no thread
 * restores the default while another's timer still runs (its next expiry
 * would end the process).  Each timer signals its own thread only.
 */
static pthread_mutex_t alarm_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned int alarm_users;
static struct sigaction alarm_old;

static int alarm_get(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	int r = 0;

	pthread_mutex_lock(&alarm_mu);
	if (alarm_users == 0 && sigaction(SIGALRM, &sa, &alarm_old) < 0)
		r = NEG_ERRNO();
	if (r == 0)
		alarm_users++;
	pthread_mutex_unlock(&alarm_mu);
	return r;
}

static int alarm_put(void)
{
	int r = 0;

	pthread_mutex_lock(&alarm_mu);
	if (--alarm_users == 0 && sigaction(SIGALRM, &alarm_old, NULL) < 0)
		r = NEG_ERRNO();
	pthread_mutex_unlock(&alarm_mu);
	return r;
}

int fv_flock_deadline(int fd, int op, unsigned int timeout_ms)
{
	/*
	 * The timer fires every 100 ms until disarmed: an expiry that lands
	 * before flock() is entered (a descheduled process) or any other
	 * signal is followed by another, so flock() is always interrupted
	 * again and the clock decides whether the deadline has passed.
	 */
	struct itimerspec its = { .it_value.tv_nsec = 100 * 1000 * 1000,
				  .it_interval.tv_nsec = 100 * 1000 * 1000 };
	/* this thread's, not any thread's: another one's flock() or poll() is not interrupted */
	struct sigevent sev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGALRM,
				._sigev_un._tid = gettid() };
	uint64_t deadline = fv_now_ms() + timeout_ms;
	timer_t timer;
	int r, k;

	if (op != LOCK_EX && op != LOCK_SH)
		return -EINVAL;
	if (flock(fd, op | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return NEG_ERRNO();
	if (timeout_ms == 0)
		return -FV_ERR_TIMEOUT;
	if (timeout_ms < 100)
		its.it_value.tv_nsec = (long)timeout_ms * 1000 * 1000;

	/* Contended: block in flock(), interrupted by SIGALRM from the timer. */
	r = alarm_get();
	if (r < 0)
		return r;
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer) < 0) {
		r = NEG_ERRNO();
		goto out;
	}
	if (timer_settime(timer, 0, &its, NULL) < 0) {
		r = NEG_ERRNO();
		timer_delete(timer);
		goto out;
	}
	for (;;) {
		if (flock(fd, op) == 0) {
			r = 0;
			break;
		}
		if (errno != EINTR) {
			r = NEG_ERRNO();
			break;
		}
		if (fv_now_ms() >= deadline) {
			r = -FV_ERR_TIMEOUT;
			break;
		}
	}
	/*
	 * An expiry that came before the delete was delivered on its return;
	 * a failed delete leaves a timer whose SIGALRM a restored disposition
	 * handles (the default: as before threads).
	 */
	(void)timer_delete(timer);
out:
	k = alarm_put();
	return r == 0 ? k : r;
}

static int lock_path(struct fv_ctx *cx, const char *name, char *dir, size_t dlen, char *path,
		     size_t plen)
{
	char esc[NAME_MAX - 8];

	if (fv_name_key(name, esc, sizeof(esc)) < 0)
		return -ENAMETOOLONG;
	snprintf(dir, dlen, "%s/locks", cx->cfg.run_dir);
	snprintf(path, plen, "%s/%s.lock", dir, esc);
	return 0;
}

void fv_lock_volume_name(const struct fv_ctx *cx, const char *volume, char *buf, size_t len)
{
	snprintf(buf, len, "%s-vol-%s", cx->drv->name, volume);
}

/*
 * Removing a lock file others may hold: the holder unlinks it while it
 * still holds the lock (fv_unlock()), and every locker checks, once it
 * holds the lock, that its descriptor is still the file the path names
 * (same device and inode); a waiter that got the lock on a removed file
 * starts again with the new one.  So lock files exist only while in use:
 * none is left per pod dir ever mounted, nor per image ever staged.
 *
 * The path of each held lock, by descriptor, for fv_unlock() (a process
 * holds a few at once; threads take and release them at once).  A lock
 * past HELD_MAX is released without its file removed.
 */
#define HELD_MAX 64

static struct {
	int fd;
	char *path;
} held[HELD_MAX];
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

static void held_add(int fd, const char *path)
{
	char *p = strdup(path);

	size_t slot = HELD_MAX;

	pthread_mutex_lock(&held_mu);
	for (size_t i = 0; i < HELD_MAX; i++) {
		if (held[i].path && held[i].fd == fd) {
			slot = i; /* a descriptor closed without fv_unlock(), reused */
			break;
		}
		if (!held[i].path && slot == HELD_MAX)
			slot = i;
	}
	if (p && slot < HELD_MAX) {
		free(held[slot].path);
		held[slot].fd = fd;
		held[slot].path = TAKE_PTR(p);
	}
	pthread_mutex_unlock(&held_mu);
	free(p);
}

static char *held_take(int fd)
{
	char *p = NULL;

	pthread_mutex_lock(&held_mu);
	for (size_t i = 0; !p && i < HELD_MAX; i++)
		if (held[i].path && held[i].fd == fd)
			p = TAKE_PTR(held[i].path);
	pthread_mutex_unlock(&held_mu);
	return p;
}

void fv_unlock_remove(struct fv_ctx *cx, const char *name, int fd)
{
	fv_unlock(fd);
}

/* Is the open lock file @fd still the one at @path? */
static bool still_linked(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* fv_lock() with a deadline of @timeout_ms (0: only try; a held lock is then -EWOULDBLOCK, quietly) */
static int lock_named(struct fv_ctx *cx, const char *name, unsigned int timeout_ms)
{
	char dir[PATH_MAX], path[PATH_MAX + NAME_MAX];
	uint64_t t0 = fv_now_ms(), deadline = t0 + timeout_ms, now;
	bool waited = false;
	int fd, r;

	if (lock_path(cx, name, dir, sizeof(dir), path, sizeof(path)) < 0)
		return fv_fail(cx, -ENAMETOOLONG, "lock name too long: '%.64s...'", name);
	r = fv_mkdir_p(dir, 0700);
	if (r < 0)
		return fv_fail(cx, r, "cannot create lock directory '%s': %s", dir, strerror(-r));
	for (;;) {
		fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return fv_fail(cx, NEG_ERRNO(), "cannot open lock '%s': %m", path);
		/*
		 * A wait may last up to lock_timeout (150 s by default): it leaves
		 * a line in the log whether or not debug is on, and so does its
		 * end, so that a slow call can be told from a stuck one.
		 */
		r = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : NEG_ERRNO();
		if (r == -EWOULDBLOCK && timeout_ms > 0) {
			if (!waited)
				fv_log("waiting for lock '%s' (another operation holds it; up to "
				       "%u s)", name, cx->cfg.lock_timeout);
			waited = true;
			now = fv_now_ms();
			r = now >= deadline ? -FV_ERR_TIMEOUT
					    : fv_flock_deadline(fd, LOCK_EX,
								(unsigned int)(deadline - now));
		}
		if (r < 0)
			break;
		if (still_linked(fd, path)) {
			if (waited)
				fv_log("got lock '%s' after %llu ms", name,
				       (unsigned long long)(fv_now_ms() - t0));
			held_add(fd, path);
			return fd;
		}
		close(fd); /* removed by its last holder meanwhile: the new file is the lock */
	}
	close(fd);
	if ((r == -FV_ERR_TIMEOUT || r == -EWOULDBLOCK) && timeout_ms == 0)
		return -EWOULDBLOCK;
	if (r == -FV_ERR_TIMEOUT)
		return fv_fail(cx, r, "another operation on '%s' still holds its lock after %u s",
			       name, cx->cfg.lock_timeout);
	return fv_fail(cx, r, "cannot lock '%s': %s", path, strerror(-r));
}

int fv_lock(struct fv_ctx *cx, const char *name)
{
	return lock_named(cx, name, cx->cfg.lock_timeout * 1000U);
}

int fv_lock_try(struct fv_ctx *cx, const char *name)
{
	return lock_named(cx, name, 0);
}

void fv_unlock(int fd)
{
	char *path;

	if (fd < 0)
		return;
	path = held_take(fd);
	if (path && still_linked(fd, path))
		(void)unlink(path);
	free(path);
	close(fd);
}
