/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The op runner (src/op.c): the one way an op of a driver's table runs,
 * whichever front door asked for it.  The FlexVolume program (src/main.c)
 * translates kubelet's argv and options JSON into a struct fv_op_call;
 * flexvol-csi translates gRPC requests into the same.  The runner does what
 * every op needs around the driver's slot, so the front doors cannot drift:
 *
 *   1. the directory argument checked (taken literally: a plain absolute
 *      path, no symlink or magic link among its parents), and made first
 *      when the front door's protocol says the plugin makes it (CSI);
 *   2. the lock the op needs: the volume's ("<driver>-vol-<name>") or the
 *      directory's ("<driver>-dir-<path>", pod mounts run in parallel), none
 *      for a call about another node;
 *   3. the driver's op;
 *   4. the lock released and its file removed; a directory the runner made
 *      removed again when the op failed, and after an undo op when asked;
 *   5. the driver's after-op work (after_node_op) for node-side ops.
 *
 * The options are parsed by the front door (fv_opts_parse() from kubelet's
 * JSON, fv_opts_set() from key/value pairs) before the call.
 */
#ifndef FV_OP_H
#define FV_OP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

struct fv_ctx;
struct fv_driver;
struct fv_opts;
struct fv_volstats;

enum fv_op {
	FV_OP_ATTACH,	     /* @opts @node -> @ret_device (a handle) */
	FV_OP_ISATTACHED,    /* @opts @node -> @attached */
	FV_OP_DETACH,	     /* @name (the PV) @node */
	FV_OP_WAITFORATTACH, /* @device @opts -> @ret_device */
	FV_OP_MOUNTDEVICE,   /* @dir @device @opts; the volume is @dir's last component */
	FV_OP_UNMOUNTDEVICE, /* @dir */
	FV_OP_MOUNT,	     /* @dir (a kubelet pod volume dir) @opts */
	FV_OP_UNMOUNT,	     /* @dir */
	FV_OP_PUBLISH,	     /* @dir (a pod's target) @staged (the device mount, or NULL) @opts */
	FV_OP_UNPUBLISH,     /* @dir @name */
	FV_OP_EXPANDFS,	     /* @opts @device @dir @new_size @old_size; @name or @dir's last */
	FV_OP_GC,
	FV_OP_N
};

/* How the front door wants the directory argument treated. */
#define FV_OP_MKDIR 1u /* make @dir (its parent must exist), removed again if the op fails */
#define FV_OP_RMDIR 2u /* remove @dir, when empty, after the undo op succeeded */
/*
 * With FV_OP_MKDIR: make @dir an empty regular file instead, the target of a
 * raw block volume (CSI: the plugin makes it); FV_OP_RMDIR removes such a
 * file as it removes an empty directory.
 */
#define FV_OP_FILE 4u

struct fv_op_call {
	enum fv_op op;
	unsigned int flags;	    /* FV_OP_MKDIR, FV_OP_RMDIR */
	const char *dir;	    /* a mount directory, taken literally */
	const char *staged;	    /* FV_OP_PUBLISH: the volume's device mount, or NULL */
	const char *device;	    /* kubelet's device argument ("" when none) */
	const char *node;	    /* attach, isattached, detach: the node asked about */
	const char *name;	    /* the volume; NULL: the runner derives it (see enum fv_op) */
	const struct fv_opts *opts; /* the ops with options; NULL for the others */
	uint64_t new_size, old_size;

	/* answers */
	char *ret_device; /* malloc'ed (attach, waitforattach), or NULL */
	bool has_attached;
	bool attached;
	bool remote;	 /* the call was about another node: nothing here was touched */
	char norm[PATH_MAX]; /* @dir normalised ("//" and "/./" folded): what the op got */
};

/*
 * fv_op_served() - does driver @d have op @op?  (An empty slot: "Not supported".)
 */
bool fv_op_served(const struct fv_driver *d, enum fv_op op);

/*
 * fv_op_looks() - does @op only look (changes nothing on any node)?  Such
 * calls are not logged when they succeed.
 */
bool fv_op_looks(enum fv_op op);

/*
 * fv_op_run() - run @c->op with @cx's driver and its loaded configuration,
 * around it what every op needs (above).  A driver without the op is
 * -EOPNOTSUPP with a message.  Returns 0 or <0, the message in @cx.
 */
int fv_op_run(struct fv_ctx *cx, struct fv_op_call *c);

/*
 * fv_op_owns() - is the topmost mount at @path (taken literally) one of
 * volume @name's, by the driver's own account (its owns slot)?  1 yes,
 * 0 no (a message in @cx names what is there), -ENOENT nothing is mounted
 * there, or <0.
 */
int fv_op_owns(struct fv_ctx *cx, const char *name, const char *path);

/*
 * fv_op_stats() - the usage and condition of volume @name at @path (taken
 * literally), by the driver's stats slot (struct fv_volstats).  Changes
 * nothing, takes no lock.  -ENOENT: @path holds no mount of the volume
 * (nothing, or another's: a message in @cx says which); -EOPNOTSUPP: the
 * driver has no stats; or <0.
 */
int fv_op_stats(struct fv_ctx *cx, const char *name, const char *path, struct fv_volstats *ret);

/* The message for an op layer error code without one of its own ("timed out", strerror...). */
const char *fv_op_errstr(int r);

#endif
