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

int fv_lock(struct fv_ctx *cx, const char *name)
{
	char dir[PATH_MAX], esc[NAME_MAX - 8], path[PATH_MAX + NAME_MAX];
	struct sigaction sa = { .sa_handler = on_alarm }, old;
	/*
	 * The interval re-arms the timer: if the first expiry lands before
	 * flock() is entered (a descheduled process), the next one still
	 * interrupts it instead of leaving us blocked for good.
	 */
	struct itimerspec its = { .it_value.tv_sec = cx->cfg.lock_timeout,
				  .it_interval.tv_nsec = 100 * 1000 * 1000 };
	struct sigevent sev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
	timer_t timer;
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
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return fd;

	/* Contended: block, interrupted by a one-shot timer at the deadline. */
	sigaction(SIGALRM, &sa, &old);
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer) < 0) {
		r = NEG_ERRNO();
		goto out;
	}
	timer_settime(timer, 0, &its, NULL);
	r = flock(fd, LOCK_EX) < 0 ? NEG_ERRNO() : 0;
	timer_delete(timer);
out:
	sigaction(SIGALRM, &old, NULL);
	if (r == 0)
		return fd;
	close(fd);
	if (r == -EINTR)
		return fv_fail(cx, -FV_ERR_TIMEOUT,
			       "another operation on '%s' still holds its lock after %u s", name,
			       cx->cfg.lock_timeout);
	return fv_fail(cx, r, "cannot lock '%s': %s", path, strerror(-r));
}

void fv_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}
