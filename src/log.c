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
static bool debug_on;
static char ident[64] = "flexvol";
static bool syslog_open;

void fv_log_open(const char *driver, const char *path)
{
	const char *d = secure_getenv("FLEXVOL_DEBUG");

	debug_on = d && *d && !streq(d, "0");
	snprintf(ident, sizeof(ident), "flexvol-%s", driver);
	if (path && *path) {
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s", path);
		(void)fv_mkdir_p(dirname(dir), 0750);
		log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
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
	if (syslog_open)
		closelog();
	syslog_open = false;
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
	if (log_fd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
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
