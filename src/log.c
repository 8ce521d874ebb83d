/* SPDX-License-Identifier: Apache-2.0 */
/* Log file + syslog; never stdout/stderr (see fv/log.h). */
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>

#include "internal.h"
#include "fv/log.h"
#include "fv/util.h"
#include "fv/version.h"

/*
 * Threads share the log (the provisioner's workers log their helpers), so
 * what a line may change is atomic: the descriptor, opened by the first
 * line (LOG_UNOPENED until then; -1: no log file) and the debug switch.
 * The path and the syslog ident are set by fv_log_open() and read after,
 * never written while lines are logged.
 */
#define LOG_UNOPENED (-2)
static int log_fd = -1;
static char log_path[PATH_MAX];
static int debug_on;
static char ident[64] = "flexvol";
static bool syslog_open;

bool fv_log_debug_wanted(void)
{
	const char *d = secure_getenv("FLEXVOL_DEBUG");

	return d && *d && !streq(d, "0");
}

void fv_log_open(const char *driver, const char *path)
{
	__atomic_store_n(&debug_on, fv_log_debug_wanted(), __ATOMIC_RELAXED);
	snprintf(ident, sizeof(ident), "flexvol-%s", driver);
	/* No LOG_CONS, no LOG_PERROR: nothing may reach the console or stderr.  No
	 * LOG_NDELAY: the socket is opened by the first summary, not here. */
	openlog(ident, LOG_PID, LOG_DAEMON);
	syslog_open = true;
	/* opened by the first line: a call that logs nothing opens nothing */
	snprintf(log_path, sizeof(log_path), "%s", path ? path : "");
	__atomic_store_n(&log_fd, LOG_UNOPENED, __ATOMIC_RELEASE);
}

/* The log's descriptor, opened by the first line of any thread (-1: none). */
static int log_get(void)
{
	const int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY;
	int fd = __atomic_load_n(&log_fd, __ATOMIC_ACQUIRE), unopened = LOG_UNOPENED;
	char dir[PATH_MAX];

	if (fd != LOG_UNOPENED)
		return fd;
	fd = -1;
	if (log_path[0]) {
		/* the directory exists but on the very first call: make it only then */
		fd = open(log_path, flags, 0640);
		if (fd < 0 && errno == ENOENT) {
			snprintf(dir, sizeof(dir), "%s", log_path);
			(void)fv_mkdir_p(dirname(dir), 0750);
			fd = open(log_path, flags, 0640);
		}
	}
	if (fd < 0)
		fd = -1;
	/* another thread's line opened it first: that descriptor is the log's */
	if (!__atomic_compare_exchange_n(&log_fd, &unopened, fd, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		if (fd >= 0)
			close(fd);
		fd = unopened;
	}
	return fd;
}

void fv_log_set_debug(bool on)
{
	if (on)
		__atomic_store_n(&debug_on, 1, __ATOMIC_RELAXED);
}

void fv_log_close(void)
{
	int fd = __atomic_exchange_n(&log_fd, -1, __ATOMIC_ACQ_REL);

	if (fd >= 0)
		close(fd);
	log_path[0] = '\0';
	if (syslog_open)
		closelog();
	syslog_open = false;
}

/*
 * UTC calendar time of @t without gmtime_r(): glibc's reads the time zone
 * file on first use (7 syscalls per call of a short-lived process), which a
 * UTC stamp never needs.  Days to civil date: H. Hinnant's algorithm.
 */
static void utc_time(time_t t, struct tm *tm)
{
	long long days = (long long)t / 86400, secs = (long long)t % 86400, z, era, doe, yoe, y,
		  doy, mp;

	if (secs < 0) {
		secs += 86400;
		days--;
	}
	z = days + 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	y = yoe + era * 400;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	memset(tm, 0, sizeof(*tm));
	tm->tm_mday = (int)(doy - (153 * mp + 2) / 5 + 1);
	tm->tm_mon = (int)(mp < 10 ? mp + 2 : mp - 10);
	tm->tm_year = (int)(y + (tm->tm_mon <= 1) - 1900);
	tm->tm_hour = (int)(secs / 3600);
	tm->tm_min = (int)(secs / 60 % 60);
	tm->tm_sec = (int)(secs % 60);
}

/*
 * One event, one line of valid UTF-8: user-supplied text (a directory
 * argument, a helper's output) can neither forge log lines nor break a
 * reader that expects UTF-8 (invalid bytes become U+FFFD, as in replies).
 */
static void vlog_line(bool to_syslog, const char *fmt, va_list ap)
{
	char msg[8192], fixed[8192], line[8192 + 128];
	struct timespec ts;
	struct tm tm;
	int fd, n, m;

	m = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (m < 0)
		return;
	fv_utf8_fix(msg, sizeof(msg), fixed, sizeof(fixed));
	for (char *p = fixed; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	/* before fv_log_open() (a program that logs no summary): glibc's default ident */
	if (to_syslog)
		syslog(LOG_INFO, "%s %s", fv_version, fixed);
	fd = log_get();
	if (fd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	utc_time(ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: %s\n",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, ident, (int)getpid(), fv_version, fixed);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = (int)sizeof(line) - 1;
	(void)!write(fd, line, (size_t)n);
}

void fv_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_line(false, fmt, ap);
	va_end(ap);
}

void fv_debug(const char *fmt, ...)
{
	va_list ap;

	if (!__atomic_load_n(&debug_on, __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vlog_line(false, fmt, ap);
	va_end(ap);
}

void fv_log_summary(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_line(true, fmt, ap);
	va_end(ap);
}

void fv_log_text(const char *prefix, const char *text)
{
	const char *p = text;

	while (p && *p) {
		size_t n = strcspn(p, "\n");

		if (n)
			fv_log("%s%.*s", prefix, (int)n, p);
		p += n;
		if (*p)
			p++;
	}
}
