/* SPDX-License-Identifier: Apache-2.0 */
/* Named flock(2) locks with a deadline (fv/lock.h). */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"
#include "fv/lock.h"
#include "fv/util.h"

static void on_alarm(int sig)
{
	(void)sig; /* only here to interrupt flock() with EINTR */
}

int fv_flock_deadline(int fd, int op, unsigned int timeout_ms)
{
	struct sigaction sa = { .sa_handler = on_alarm }, old;
	/*
	 * The timer fires every 100 ms until disarmed: an expiry that lands
	 * before flock() is entered (a descheduled process) or any other
	 * signal is followed by another, so flock() is always interrupted
	 * again and the clock decides whether the deadline has passed.
	 */
	struct itimerspec its = { .it_value.tv_nsec = 100 * 1000 * 1000,
				  .it_interval.tv_nsec = 100 * 1000 * 1000 };
	struct sigevent sev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
	uint64_t deadline = fv_now_ms() + timeout_ms;
	timer_t timer;
	int r;

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
	if (sigaction(SIGALRM, &sa, &old) < 0)
		return NEG_ERRNO();
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
	/* a failed delete leaves a timer whose SIGALRM our restored disposition handles */
	(void)timer_delete(timer);
out:
	if (sigaction(SIGALRM, &old, NULL) < 0 && r == 0)
		r = NEG_ERRNO();
	return r;
}

/* fv_lock() with a deadline of @timeout_ms (0: only try; a held lock is then -EWOULDBLOCK, quietly) */
static int lock_named(struct fv_ctx *cx, const char *name, unsigned int timeout_ms)
{
	char dir[PATH_MAX], esc[NAME_MAX - 8], path[PATH_MAX + NAME_MAX];
	int fd, r;

	if (fv_name_key(name, esc, sizeof(esc)) < 0)
		return fv_fail(cx, -ENAMETOOLONG, "lock name too long: '%.64s...'", name);
	snprintf(dir, sizeof(dir), "%s/locks", cx->cfg.run_dir);
	r = fv_mkdir_p(dir, 0700);
	if (r < 0)
		return fv_fail(cx, r, "cannot create lock directory '%s': %s", dir, strerror(-r));
	snprintf(path, sizeof(path), "%s/%s.lock", dir, esc);
	fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot open lock '%s': %m", path);
	r = fv_flock_deadline(fd, LOCK_EX, timeout_ms);
	if (r == 0)
		return fd;
	close(fd);
	if (r == -FV_ERR_TIMEOUT && timeout_ms == 0)
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
	if (fd >= 0)
		close(fd);
}
