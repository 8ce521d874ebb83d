/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Directories below the provisioner's root (the share, mounted by kubelet).
 * Every path is relative to the root and is walked one component at a time
 * with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV): no
 * '..', no symlink and no other mount on the way is ever followed.
 * All functions return 0 or -errno and are idempotent.
 */
#ifndef FVP_DIR_H
#define FVP_DIR_H

#include <stdbool.h>
#include <sys/types.h>

/* Open the root (O_PATH | O_DIRECTORY).  Returns the fd or -errno. */
int fvp_root_open(const char *root);

/*
 * Create @rel (parents with 0755, the last one with @mode, chmod'ed past the
 * umask) and set its owner when @uid / @gid are not -1.  An existing
 * directory is fine and gets @mode and the owner again (a retry after a crash
 * between mkdir and chmod finishes the job).  *ret_created says whether this
 * call made the last directory.
 */
int fvp_dir_make(int rootfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, bool *ret_created);

/* Remove @rel if it is an empty directory (a claim that never got its PV).  Absent: 0. */
int fvp_dir_remove_empty(int rootfd, const char *rel);

/* Remove @rel and everything below it, not leaving its filesystem.  Absent: 0. */
int fvp_dir_delete(int rootfd, const char *rel);

/*
 * Rename @rel to "archived-<last component>" in the same parent (with
 * "-<UTC time>" added when that name is taken).  Absent: 0.  The new relative
 * path goes to @ret (may be NULL).
 */
int fvp_dir_archive(int rootfd, const char *rel, char *ret, size_t len);

#endif
