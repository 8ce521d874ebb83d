/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The contract between the op layer (src/) and a driver (drivers/<name>/).
 *
 * A driver is a directory whose files define exactly one exported symbol,
 *
 *	const struct fv_driver fv_driver_<name> = { ... };
 *
 * and fills the op slots it implements.  An empty slot means "Not
 * supported": the dispatcher answers it, drivers never write stubs.
 *
 * The dispatcher has already, before any op runs:
 *   - checked the argument count of the op (docs/flexvolume-contract.md §1.2),
 *   - parsed the options JSON (if the op carries one) into struct fv_opts,
 *   - loaded the node configuration (struct fv_config),
 *   - taken the lock the op needs (src/main.c's op table): the volume's
 *     (fv_lock_volume_name()) for mountdevice, unmountdevice, detach and
 *     expandfs; the pod directory's for mount and unmount (kubelet runs
 *     those of one volume for several pods in parallel).  The other ops run
 *     unlocked: init, getvolumename, attach and isattached touch no node
 *     state; waitforattach has no trusted volume name to lock, and gc
 *     covers many volumes, so both lock what they touch themselves (the
 *     block class: the backend object, each volume before its release).
 *     A detach for another node takes no lock.
 *
 * Every op returns 0 on success or a negative errno / -FV_ERR_* code.  On
 * failure it should explain itself with fv_fail(), which sets the reply's
 * message and returns its error argument:
 *
 *	return fv_fail(cx, -EINVAL, "option 'size' is not a quantity: '%s'", v);
 *
 * A failure without a message gets strerror() of the code.
 */
#ifndef FV_DRIVER_H
#define FV_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fv/macro.h"

/*
 * Domain errors without an errno, returned negated.  Their range is ours
 * alone: errno values stay below 4096 (the kernel's MAX_ERRNO) and
 * libmount's MNT_ERR_* use 5000..5999 (mountutil.c translates those to
 * errno values; they never pass through), so ours start above both.
 */
enum {
	FV_ERR_BASE = 100000,
	FV_ERR_BADOPT,	   /* an option is missing or invalid */
	FV_ERR_TIMEOUT,	   /* a helper or a wait ran past its deadline */
	FV_ERR_HELPER,	   /* a helper program exited non-zero */
	FV_ERR_NOTBLANK,   /* refusing to format: the device holds data we did not expect */
	FV_ERR_CONFLICT,   /* the kernel state belongs to something else */
};

struct json_object;
struct fv_ctx;
struct fv_blkvol_ops;
struct fv_mntinfo;

/* One option: a key and its value. */
struct fv_opt_pair {
	const char *key;
	const char *value; /* NULL: the key is there, its value is no string (kubelet's JSON) */
};

/*
 * A volume's options, parsed once (opts.c) from kubelet's JSON or taken as
 * key/value pairs (CSI's volume context): the same map either way.  All
 * strings are borrowed and live until the op returns.  Keys we know get
 * typed fields; driver keys are read with fv_opt(), or walked in @pairs.
 */
struct fv_opts {
	const struct fv_opt_pair *pairs; /* in the order given; of a key given twice, the last counts */
	size_t n;
	const char *fstype;	 /* kubernetes.io/fsType; NULL when absent or "" */
	bool readonly;		 /* kubernetes.io/readwrite == "ro" */
	const char *volume;	 /* kubernetes.io/pvOrVolumeName, or NULL */
	const char *pod_uid;	 /* kubernetes.io/pod.uid (mount only), or NULL */
	bool has_fsgroup;	 /* kubernetes.io/mounterArgs.FsGroup present */
	uint32_t fsgroup;	 /* its value */
	/*
	 * A raw block volume (CSI's access type block): staged and published as
	 * its device node, no filesystem made or mounted.  Set by a front door
	 * from its own protocol, never from an option (kubelet's FlexVolume has
	 * no raw block, and a PV's options are its author's).
	 */
	bool block;
	/*
	 * The volume's Secret, its values as they are (CSI's node-stage or
	 * node-publish secrets); kubelet's FlexVolume call carries it base64 in
	 * the options kubernetes.io/secret/<key> instead.  Never logged.
	 */
	const struct fv_opt_pair *secrets;
	size_t nsecrets;

	/* what the parser owns (fv_opts_done() frees it) */
	struct json_object *json;
	struct fv_opt_pair *owned;
};

/*
 * fv_opt() - look up a driver option.
 * Returns: 0 and *ret set when @key holds a non-empty string, 1 when it is
 * absent or "", -FV_ERR_BADOPT (with the message set) when it is not a string.
 */
int fv_opt(struct fv_ctx *cx, const struct fv_opts *o, const char *key, const char **ret);

/* fv_opt_required() - fv_opt() where absent or "" is a Failure naming @key.  Returns 0 or <0. */
int fv_opt_required(struct fv_ctx *cx, const struct fv_opts *o, const char *key, const char **ret);

/*
 * What NodeGetVolumeStats tells of a volume (the stats slot): its usage and
 * its condition.  A raw block volume has a size only.
 */
struct fv_volstats {
	bool block;	  /* a raw block device: bytes_total is its size, nothing else */
	bool has_usage;	  /* the figures below were read (else the condition says why not) */
	uint64_t bytes_total, bytes_avail, bytes_used;
	uint64_t inodes_total, inodes_avail, inodes_used;
	bool abnormal;	  /* the volume's backing is not well: @message says how */
	char message[512];
};

/* Capabilities, printed in full by init (contract §1.4: the defaults are generous). */
struct fv_caps {
	bool attach;
	bool selinux_relabel;
	bool supports_metrics;
	bool fsgroup;
	bool requires_fs_resize;
};

struct fv_driver {
	const char *name; /* the installed executable's name, e.g. "loop" */
	struct fv_caps caps;
	/*
	 * Its volumes live on one node (loop: an image in this node's loop
	 * root): only that node can use them.  CSI reports the node as their
	 * topology.
	 */
	bool node_local;
	/*
	 * Its volumes can also be raw block devices (fv_opts.block): the block
	 * class (FV_BLKVOL_OPS) serves them staged as their device node.
	 */
	bool raw_block;

	/*
	 * Block drivers: the backend steps of the block-volume class (fv/blkvol.h),
	 * whose generic ops fill the slots below (FV_BLKVOL_OPS).  NULL for others.
	 * With it, attach_mode = node makes init answer attach:false.
	 */
	const struct fv_blkvol_ops *blk;

	/* controller-manager side: no node state, no lock */
	int (*attach)(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
		      char **ret_device);
	int (*isattached)(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			  bool *ret_attached);
	int (*detach)(struct fv_ctx *cx, const char *volume, const char *node);

	/* kubelet side, on the node */
	int (*waitforattach)(struct fv_ctx *cx, const char *device, const struct fv_opts *o,
			     char **ret_device);
	int (*mountdevice)(struct fv_ctx *cx, const char *dir, const char *device,
			   const struct fv_opts *o);
	int (*unmountdevice)(struct fv_ctx *cx, const char *dir);
	int (*mount)(struct fv_ctx *cx, const char *dir, const struct fv_opts *o);
	int (*unmount)(struct fv_ctx *cx, const char *dir);
	/*
	 * Grow volume @name, mounted at @dir, to @new_size bytes (0: to what its
	 * backend holds now).  @o NULL: the options it was staged with (CSI's
	 * NodeExpandVolume has none).
	 */
	int (*expandfs)(struct fv_ctx *cx, const struct fv_opts *o, const char *device,
			const char *dir, const char *name, uint64_t new_size, uint64_t old_size);

	/*
	 * A pod's use of a volume where the caller names the volume's device
	 * mount itself (CSI's NodePublishVolume and NodeUnpublishVolume, which
	 * have no kubelet pod dir layout to derive it from): publish on @dir
	 * from @staged, the device mount (NULL for a driver without one: it
	 * mounts the volume on @dir itself, as its mount does); unpublish of
	 * volume @name from @dir.
	 */
	int (*publish)(struct fv_ctx *cx, const char *dir, const char *staged,
		       const struct fv_opts *o);
	int (*unpublish)(struct fv_ctx *cx, const char *dir, const char *name);

	/*
	 * Optional: is the mount @mi, the topmost at @path, one this driver
	 * made for volume @name?  1 yes, 0 no, <0 it cannot tell.  The runner
	 * asks before an undo op that names its volume (unpublish, and
	 * unmountdevice, whose directory names it) unmounts anything: a mount
	 * that is not the volume's is left alone.
	 */
	int (*owns)(struct fv_ctx *cx, const char *name, const char *path,
		    const struct fv_mntinfo *mi);

	/*
	 * Optional: the usage and condition of volume @name at @path (taken
	 * literally: a pod's target, or the volume's stage directory), into
	 * @ret.  -ENOENT when @path holds no mount of the volume by the
	 * driver's own account (owns).  Bounded: a dead backing (an NFS server
	 * that does not answer, a device whose reads hang) is a condition,
	 * never a wait past the driver's probe deadline.  Looks only.
	 */
	int (*stats)(struct fv_ctx *cx, const char *name, const char *path,
		     struct fv_volstats *ret);

	/*
	 * Our own op, never called by kubelet: release what this node holds for
	 * volumes nobody uses any more (docs/design.md, "Garbage collection").
	 */
	int (*gc)(struct fv_ctx *cx);

	/*
	 * Optional: init's capabilities depend on the node configuration (the
	 * block class: attach is false in node mode).  With it, init reads the
	 * configuration, and answers @caps as compiled in when there is none.
	 * It may read cx->cfg.attach_mode only (fv_config_attach_mode()).
	 */
	void (*init_caps)(const struct fv_ctx *cx, struct fv_caps *caps);

	/*
	 * Optional: called after each node-side op (waitforattach, mountdevice,
	 * unmountdevice, mount, unmount) once its own work is done and its lock
	 * released, whatever it answered.  Bounded; never changes the reply
	 * (the block class: the opportunistic collector).
	 */
	void (*after_node_op)(struct fv_ctx *cx);
};

/* Set the reply message (printf-style) and return @err.  The first call wins. */
int fv_fail(struct fv_ctx *cx, int err, const char *fmt, ...) _printf_(3, 4);

/* Append helper output (already trimmed by the caller or not) to the reply message. */
void fv_ctx_add_detail(struct fv_ctx *cx, const char *text);

/* The reply message set so far ("" when none). */
const char *fv_ctx_message(const struct fv_ctx *cx);

/*
 * Forget the message and detail: the failure they describe was recovered
 * from (a timed-out unmount that a forced one then finished).
 */
void fv_ctx_reset_message(struct fv_ctx *cx);

/* The node configuration, resolved once (config.c). */
const struct fv_config *fv_ctx_config(const struct fv_ctx *cx);

/*
 * The deadline of a health probe (a statfs of a network mount, a read of a
 * device), in seconds: a quarter of mount_timeout, 2 to 15.
 */
unsigned int fv_probe_timeout(const struct fv_ctx *cx);

/* Is @node (an attach/isattached/detach argument) the node this runs on (config node_name)? */
bool fv_ctx_node_is_local(const struct fv_ctx *cx, const char *node);

/*
 * fv_main() - the program (src/main.c): run the op argv[1] with the driver
 * of @drivers named basename(argv[0]), print its one reply.  Returns the
 * exit code.  drivers/registry.c's main() hands it the list of drivers.
 */
int fv_main(int argc, char **argv, const struct fv_driver *const *drivers, size_t ndrivers);

/* The drivers of this build (drivers/registry.c, generated from drivers/'s directories). */
extern const struct fv_driver *const fv_registry[];
extern const size_t fv_registry_n;

#endif
