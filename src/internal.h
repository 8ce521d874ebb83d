/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/: the reply and UTF-8 repair.  The per-call context is in fv/ctx.h. */
#ifndef FV_INTERNAL_H
#define FV_INTERNAL_H

#include "fv/config.h"
#include "fv/ctx.h"
#include "fv/driver.h"

/*
 * The reply's message and detail, kept aside while work whose own failures
 * are not the reply's runs (an undo after the failure, the collector after
 * the op): fv_ctx_save_message(), then fv_ctx_restore_message().
 */
struct fv_saved_message {
	char message[FV_MESSAGE_MAX];
	char detail[FV_MESSAGE_MAX];
};

void fv_ctx_save_message(const struct fv_ctx *cx, struct fv_saved_message *s);
/*
 * Put the saved message back.  The detail too when @with_detail; else the
 * detail added meanwhile stays (it tells what the undo did or could not do).
 */
void fv_ctx_restore_message(struct fv_ctx *cx, const struct fv_saved_message *s, bool with_detail);

/*
 * mounttab.c: call @fn on each mount of /proc/self/mountinfo in table order
 * (struct fv_mntline, fv/mountutil.h) until it returns true.  Returns 1 when
 * @fn stopped the walk, 0 at the table's end, or -errno (-EIO for a line the
 * kernel would never write: no half-read table decides anything).
 */
struct fv_mntline;
int fv_mnt_each(bool (*fn)(const struct fv_mntline *m, void *arg), void *arg);

/*
 * mounttab.c: is the open file @fd the root of a mount?  0 and the mount in
 * @ret (may be NULL), 1 not, -EOPNOTSUPP before Linux 5.8 (no
 * STATX_ATTR_MOUNT_ROOT), -errno.  From statmount(2) where the kernel has
 * it, else from the table; fv_mnt_no_statmount (tests) forces the table.
 */
struct fv_mntinfo;
int fv_mnt_of_fd(int fd, struct fv_mntinfo *ret);
extern bool fv_mnt_no_statmount;
extern unsigned fv_mnt_statmount_hits; /* lookups statmount(2) answered, for tests */
/* reads of the whole table by this thread (mounttab.c keeps one until it changes), for tests */
extern __thread unsigned fv_mnt_table_reads;

/* dirarg.c: the Failure for fv_dir_open_self()'s or fv_dir_open()'s error @r on @path. */
int fv_dir_fail(struct fv_ctx *cx, int r, const char *path);

/* reply.c: the one JSON document kubelet reads (contract §1.4, §3.1). */
enum fv_status { FV_SUCCESS, FV_FAILURE, FV_NOT_SUPPORTED };

struct fv_reply {
	enum fv_status status;
	const char *message;	    /* or NULL */
	const char *device;	    /* or NULL */
	bool has_attached;
	bool attached;
	const struct fv_caps *caps; /* init only: every capability, explicitly */
	const char *version;	    /* version, --version, --help, check-config; or NULL */
};

const char *fv_status_word(enum fv_status st);
/*
 * A reply of @st alone, with @caps (or NULL), into @buf as fv_reply_format()
 * writes it, without an allocation: the fixed answers.  Returns its length.
 */
size_t fv_reply_fixed(char *buf, size_t size, enum fv_status st, const struct fv_caps *caps);

/* The reply as compact JSON plus '\n', malloc'ed; NULL when out of memory. */
char *fv_reply_format(const struct fv_reply *r);
/* Write the reply in one write(2) (a fixed Failure document if out of memory); returns the exit code. */
int fv_reply_write(int fd, const struct fv_reply *r);

/*
 * Copy the first @n bytes of @in (up to a NUL) to @out as valid UTF-8: each
 * invalid sequence becomes U+FFFD.  Stops before a character that does not
 * fit; @out is always terminated.  Returns the bytes written.  (reply.c)
 */
size_t fv_utf8_fix(const char *in, size_t n, char *out, size_t size);

#endif
