/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging.  Never to stdout or stderr: kubelet parses both as the reply.
 *
 * One summary line per call goes to the log file and to syslog; details
 * (helper output, debug lines) go to the log file only.  Each line is
 * written with a single write(2) on an O_APPEND descriptor, so concurrent
 * driver processes never interleave inside a line.  Options are never
 * logged: they may carry secrets.
 *
 * Every line carries the build's version (fv/version.h) after the pid:
 *
 *	2026-01-01T00:00:00.000Z flexvol-loop[123] 0.1.0+g0123456789ab: op=init ...
 *
 * Debug lines are enabled by FLEXVOL_DEBUG=1 (or "all"), or by "debug = true"
 * in the node config (fv_log_set_debug()).
 */
#ifndef FV_LOG_H
#define FV_LOG_H

#include <stdbool.h>

#include "fv/macro.h"

/*
 * Log for @driver to @path (may be NULL: syslog only).  Never fails.  The
 * file is opened by the first line written (its directory made if missing).
 */
void fv_log_open(const char *driver, const char *path);
void fv_log_close(void);
/* FLEXVOL_DEBUG is set: debug lines, and every call logged (init and Not supported too). */
bool fv_log_debug_wanted(void);
/* Turn debug lines on (the node config's "debug = true"); the environment can only add. */
void fv_log_set_debug(bool on);

/* A detail line: log file only. */
void fv_log(const char *fmt, ...) _printf_(1, 2);
/* A debug line: log file only, and only with FLEXVOL_DEBUG set. */
void fv_debug(const char *fmt, ...) _printf_(1, 2);
/* The per-call summary: log file and syslog. */
void fv_log_summary(const char *fmt, ...) _printf_(1, 2);
/* Multi-line text (helper output), each line prefixed with @prefix. */
void fv_log_text(const char *prefix, const char *text);

#endif
