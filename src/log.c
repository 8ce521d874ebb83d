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

static int log_fd = -1;
static char log_path[PATH_MAX];
static bool log_tried;
static bool debug_on;
static char ident[64] = "flexvol";
static bool syslog_open;

bool fv_log_debug_wanted(void)
{
	const char *d = secure_getenv("FLEXVOL_DEBUG");

	return d && *d && !streq(d, "0");
}

void fv_log_open(const char *driver, const char *path)
{
	debug_on = fv_log_debug_wanted();
	snprintf(ident, sizeof(ident), "flexvol-%s", driver);
	/* opened by the first line: a call that logs nothing opens nothing */
	snprintf(log_path, sizeof(log_path), "%s", path ? path : "");
	log_tried = false;
}

static void open_log(void)
{
	const int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY;
	char dir[PATH_MAX];

	log_tried = true;
	if (!log_path[0])
		return;
	/* the directory exists but on the very first call: make it only then */
	log_fd = open(log_path, flags, 0640);
	if (log_fd < 0 && errno == ENOENT) {
		snprintf(dir, sizeof(dir), "%s", log_path);
		(void)fv_mkdir_p(dirname(dir), 0750);
		log_fd = open(log_path, flags, 0640);
	}
}

void fv_log_set_debug(bool on)
{
	debug_on = debug_on || on;
}

void fv_log_close(void)
{
	if (log_fd >= 0)
		close(log_fd);
	log_fd = -1;
	log_tried = false;
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
	int n, m;

	m = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (m < 0)
		return;
	fv_utf8_fix(msg, sizeof(msg), fixed, sizeof(fixed));
	for (char *p = fixed; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	if (to_syslog) {
		/* No LOG_CONS, no LOG_PERROR: nothing may reach the console or stderr. */
		if (!syslog_open)
			openlog(ident, LOG_PID, LOG_DAEMON);
		syslog_open = true;
		syslog(LOG_INFO, "%s %s", fv_version, fixed);
	}
	if (!log_tried)
		open_log();
	if (log_fd < 0)
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
	(void)!write(log_fd, line, (size_t)n);
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

	if (!debug_on)
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
