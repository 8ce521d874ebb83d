/* SPDX-License-Identifier: Apache-2.0 */
/* Strict parsers, path confinement and small file helpers (util.c). */
#ifndef FV_UTIL_H
#define FV_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/*
 * fv_parse_u64() - a plain decimal number, no sign, no spaces, no leading
 * zeros beyond "0", no overflow.  Returns 0 or -EINVAL / -ERANGE.
 */
int fv_parse_u64(const char *s, uint64_t *ret);

/*
 * fv_parse_quantity() - a Kubernetes quantity in bytes: "1048576", "64Mi",
 * "1Gi", "500M", "1.5Gi", "2e9", "1k".  Binary suffixes Ki Mi Gi Ti Pi Ei,
 * decimal k M G T P E.  Fractions must come out to a whole number of bytes.
 * Returns 0 or -EINVAL / -ERANGE.
 */
int fv_parse_quantity(const char *s, uint64_t *ret);

/*
 * fv_path_confine() - the lexical half of path confinement: @path is either
 * relative (to @root) or absolute and inside @root.  It must not be empty,
 * contain "..", NUL-free control characters, or end in '/'.  The result is
 * the normalised path relative to @root ("a/b/c.img"), written to @ret.
 * Symlinks are the job of fv_open_beneath().
 * Returns 0 or -EINVAL.
 */
int fv_path_confine(const char *root, const char *path, char *ret, size_t len);

/*
 * fv_open_beneath() - open @rel below the directory @rootfd with openat2()
 * and RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS: ".." that
 * would leave the root fails with -EXDEV, any symlink (even one that stays
 * inside) with -ELOOP.  @flags/@mode as for open(2); O_CLOEXEC is always added.
 * Returns an fd, or -errno.
 */
int fv_open_beneath(int rootfd, const char *rel, int flags, mode_t mode);

/*
 * fv_open_regular_beneath() - open the existing regular file @rel below
 * @rootfd (as fv_open_beneath()) for I/O with @flags (O_RDONLY/O_RDWR),
 * without ever opening anything else: O_PATH first, fstat() must say
 * S_ISREG, then that same inode is re-opened through its O_PATH descriptor
 * and its dev/ino checked again.  A FIFO, device node, socket or directory
 * is never open()ed (no blocking, no driver side effect).  @st gets the
 * file's stat (for a refused file too: st_mode says what it is).
 * Returns an fd, -EMEDIUMTYPE for a file that is not regular, or -errno.
 */
int fv_open_regular_beneath(int rootfd, const char *rel, int flags, struct stat *st);

/* "a FIFO", "a block device", ... for messages about a file of mode @mode. */
const char *fv_file_type(mode_t mode);

/*
 * fv_dir_open() - the directory argument @path, taken literally: absolute,
 * no "..", "." and "//" normalised lexically (the result goes to @norm, may
 * be NULL), resolved from "/" with openat2(RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS): no symlink in any component is followed, and no
 * magic link (/proc/self/root/..., /proc/self/cwd/..., /proc/<pid>/fd/...).
 * Mounts are crossed.  @flags: FV_DIR_PARENT opens the parent directory and
 * never looks the last component up (nfs: it may be a dead mount);
 * FV_DIR_COMPAT walks component by component with O_NOFOLLOW (what is done
 * when openat2() is missing; for tests).
 * Returns an O_PATH|O_DIRECTORY fd, or -EINVAL (not an absolute path, ".."),
 * -ENOENT (absent), -ELOOP (a symlink or magic link), -ENOTDIR, -errno.
 */
#define FV_DIR_PARENT 1u
#define FV_DIR_COMPAT 2u
int fv_dir_open(const char *path, unsigned int flags, char *norm, size_t len);

/* Encode any string as one safe file name component ([A-Za-z0-9._-], %XX for the rest). */
int fv_name_escape(const char *s, char *buf, size_t len);

/*
 * fv_name_key() - like fv_name_escape(), but never too long: a name that
 * does not fit in @len (>= 40) becomes its escaped prefix plus "~<hash>".
 */
int fv_name_key(const char *s, char *buf, size_t len);

/*
 * The FNV-1a hash of a string, 64 bits: stable short names for long ones
 * (not a security boundary: whoever reads a name back checks the text).
 */
uint64_t fv_hash64(const char *s);
/* The same, 32 bits: for names already published with it (the provisioner's lease name). */
uint32_t fv_hash32(const char *s);

/* The last component of @path ("/a/b/pv1" -> "pv1"; a trailing '/' keeps the whole path). */
const char *fv_path_last(const char *path);

/*
 * fv_join() - the strings after @size (up to a NULL) one after another into
 * @buf, cut to fit as snprintf() cuts; returns the length written.  For the
 * paths that must not pull in printf's machinery (init, Not supported).
 */
size_t fv_join(char *buf, size_t size, ...) __attribute__((sentinel));

/* mkdir -p with @mode for the created components.  Returns 0 or -errno. */
int fv_mkdir_p(const char *path, mode_t mode);

/* Read a small file (sysfs attribute) into @buf, trailing newline removed. Returns length or -errno. */
ssize_t fv_read_line(const char *path, char *buf, size_t len);

/* Monotonic clock in milliseconds. */
uint64_t fv_now_ms(void);

/*
 * fv_host_check() - a host as users write it in options (nfs server, iSCSI
 * portal): an RFC 1123 host name, a whole dotted-quad IPv4 address, or an
 * IPv6 address in brackets ("[fd00::1]", no zone).  Returns FV_HOST_* (>= 0),
 * -EAFNOSUPPORT for an IPv6 address without brackets, -EINVAL otherwise.
 */
enum { FV_HOST_NAME, FV_HOST_IPV4, FV_HOST_IPV6 };
int fv_host_check(const char *s);

#endif
