/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The backend's storage work (create, cleanup, reclaim, record_owner) under a deadline.
 *
 * A tree delete of millions of files, or any call on a share whose NFS
 * server stopped answering, can take unbounded time; in a worker thread it
 * would hold that worker (and, with a hard mount, the thread in D state)
 * for as long.  So each call runs in a child, this program exec'd again as
 * `flexvol-provisioner --fs-call FD`, with the op layer's deadline
 * machinery (src/exec.c, fv_exec() keeping the job's fd: own process group,
 * every other inherited descriptor closed, SIGKILL when the parent dies, the group
 * SIGKILLed at the deadline, a child stuck in the kernel left behind rather
 * than waited for).  The job (the call, the backend's name, --root,
 * --share, the objects) goes to the child in a memfd, and the child writes
 * its answer over it; the child opens --root again.  Exec'd, not only
 * forked: a child forked from a threaded process inherits the locks other
 * threads held (childcall.c says which ones hung it).  And started without a
 * copy of our memory (FV_EXEC_SPAWN, as posix_spawn does): a fork() per
 * call made every page of ours copy-on-write, and the other threads' next
 * writes paid for it, a fault and a TLB flush on every CPU each.
 *
 * Every backend call is idempotent, so a call killed at its deadline is
 * simply retried after the object's backoff; a tree delete continues where
 * the killed one stopped.  With site->fs_timeout_s == 0 the call runs in
 * the calling thread (the unit tests), and so do a node-local backend's
 * calls: in the controller they touch no storage (its node agent does).
 */
#ifndef FVP_CHILDCALL_H
#define FVP_CHILDCALL_H

#include "backend.h"

#define FVP_CHILDCALL_ARG "--fs-call"

/* What a reclaim did: a path of the share (FVP_PATH_MAX) and the words around it. */
#define FVP_DONE_MAX (FVP_PATH_MAX + 200)

/* Where to exec ourselves from: /proc/self/exe, else an absolute @argv0.  0 or -ENOENT. */
int fvp_childcall_init(const char *argv0);

/* main() of `flexvol-provisioner --fs-call FD`: the exit status */
int fvp_childcall_main(const char *fd);

int fvp_backend_create(const struct fvp_site *s, const struct fvp_backend *b, json_object *sc,
		       json_object *pvc, const struct fvp_volume *vol, enum fvp_made *made,
		       char *err, size_t errlen);
int fvp_backend_cleanup(const struct fvp_site *s, const struct fvp_backend *b, json_object *sc,
			json_object *pvc, const char *pv_name, char *err, size_t errlen);
int fvp_backend_reclaim(const struct fvp_site *s, const struct fvp_backend *b, json_object *pv,
			const char *on_delete, char *done, size_t donelen, char *err, size_t errlen);

int fvp_backend_record_owner(const struct fvp_site *s, const struct fvp_backend *b, json_object *pv,
			     char *err, size_t errlen);

#endif
