/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Point-in-time copies (lib/copy.c), for snapshots and clones of volumes:
 * a file copied whole (a reflink where the filesystem shares blocks, xfs and
 * btrfs; else a sparse copy, holes kept), optionally with the filesystem
 * that lives in it frozen meanwhile (crash-consistent: FIFREEZE/FITHAW,
 * thawed on every path, a SIGKILL of the caller included); and a directory
 * tree copied confined (openat2 beneath its root: no symlink followed, no
 * other mount entered).  No API server, no CSI here: the callers decide
 * what to copy and name.
 */
#ifndef FV_COPY_H
#define FV_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A frozen filesystem: fv_freeze() starts a freezer process that freezes
 * the filesystem mounted at @dir (taken literally) and thaws it when
 * fv_thaw() says so, when the caller dies (its end of a pipe closes), or
 * after @max_ms whatever happens (so a writer waits at most that long).
 */
struct fv_freeze {
	int pid;  /* the freezer, or -1: nothing frozen */
	int tell; /* our end of its pipe: closed, it thaws */
	int hear; /* its answers */
	int dirfd;
};

/* Freeze the filesystem mounted at @dir: 0 (frozen, fv_thaw() it), or -errno (why in @msg). */
int fv_freeze(struct fv_freeze *f, const char *dir, unsigned int max_ms, char *msg, size_t len);

/*
 * fv_thaw() - thaw it and reap the freezer: 0, or -ETIMEDOUT when the
 * freezer thawed it on its own first (the copy took longer than the bound:
 * not a point in time), or -errno.  Safe on an unfrozen @f.
 */
int fv_thaw(struct fv_freeze *f);

/*
 * fv_copy_file() - the whole content of @src into @dst (both open, @dst
 * empty): FICLONE first, else data extents copied by copy_file_range and
 * holes left as holes; @dst gets @src's size.  Gives up at @deadline_ms
 * (fv_now_ms(); 0: none) with -ETIMEDOUT.  *@ret_reflink (may be NULL):
 * whether the blocks are shared.  0 or -errno.
 */
int fv_copy_file(int src, int dst, uint64_t deadline_ms, bool *ret_reflink);

/*
 * fv_copy_tree() - the tree below directory @from into the empty directory
 * @to (both open O_PATH or O_RDONLY directories): directories, regular
 * files (their data, holes kept) and symlinks (as links, never followed),
 * with modes, owners and times; every name opened beneath its parent with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), so no
 * link or other mount inside leads out.  Device nodes, FIFOs and sockets
 * are skipped (counted in *@ret_skipped); hard links become copies.
 * *@ret_bytes: the regular files' sizes.  Gives up at @deadline_ms.
 * 0 or -errno.
 */
int fv_copy_tree(int from, int to, uint64_t deadline_ms, uint64_t *ret_bytes,
		 unsigned int *ret_skipped);

#endif
