/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small macros shared by the whole tree: cleanup attributes, ownership
 * hand-off, array sizes.  Nothing here allocates or logs.
 */
#ifndef FV_MACRO_H
#define FV_MACRO_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define streq(a, b) (strcmp((a), (b)) == 0)
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))
#define _must_check_ __attribute__((warn_unused_result))

static inline void freep(void *p)
{
	free(*(void **)p);
}

static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Hand a cleanup-managed pointer or fd over to someone else. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})

/* Negative errno from a libc call that returns -1 and sets errno. */
#define NEG_ERRNO() (errno > 0 ? -errno : -EIO)

#endif
