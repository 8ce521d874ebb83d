/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop: block volumes backed by image files under a confined root directory.
 * Private to drivers/loop/:
 *
 *   loop.c   options, tags, the image file and its owner, the backend steps
 *            of the block-volume class (fv/blkvol.h), fv_driver_loop
 *   bind.c   the kernel's loop devices: status, the walk over bindings, bind,
 *            claim, release, and the device held open until its mount
 */
#ifndef LOOP_PRIVATE_H
#define LOOP_PRIVATE_H

#include <limits.h>
#include <linux/loop.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

struct fv_ctx;

struct loopvol {
	char rel[PATH_MAX]; /* the image, relative to the loop root */
	uint64_t size;	    /* bytes, 0 when not given */
	const char *fstype; /* requested, or NULL: keep what is there / ext4 */
	bool ro;
	bool block; /* a raw block volume: its binding outlives every close (no autoclear) */
};

struct binding {
	int nr; /* loop minor, -1 when none */
	bool ro;
	bool autoclear; /* the kernel releases it at its last close */
	char tag[LO_NAME_SIZE];
	char dev[32];
};

typedef bool (*loop_binding_fn)(int nr, const struct loop_info64 *info, void *arg);

/* LOOP_GET_STATUS64 of /dev/loop@nr: 0, or -errno (-ENXIO: not bound). */
int loop_status(int nr, struct loop_info64 *info);

/* "loopN" (not a partition "loopNpM"): N, else -1 */
long loop_nr(const char *name);

/*
 * Walk the bound loop devices, calling @fn with each one's status until it
 * returns true: 1 when @fn stopped the walk, 0 when it ran through, -errno
 * when a device's status could not be read.
 */
int loop_each_binding(loop_binding_fn fn, void *arg);

void loop_fill_binding(struct binding *b, int nr, const struct loop_info64 *info);

/* The binding of the file @st, if any: 0 found, 1 none, -errno (message set). */
int loop_find_binding(struct fv_ctx *cx, const struct stat *st, struct binding *b);

/* Release binding @b unless its device is mounted (-EBUSY). */
int loop_unbind(struct fv_ctx *cx, const struct binding *b);

/*
 * Bind the open image @fd (@rel names it in messages) to a free loop device,
 * tagged @tag, read-only when @ro.  With @held the binding is made with
 * LO_FLAGS_AUTOCLEAR and its device stays open here (loop_hold_drop()) until
 * a mount holds it, so the kernel releases it with its last user: a mount,
 * or this process if it dies first.  Without @held the device's node is
 * waited for (waitforattach hands it to kubelet).
 */
int loop_bind(struct fv_ctx *cx, const char *rel, bool ro, int fd, const char *tag, bool held,
	      struct binding *b);

/*
 * The image bound to @dev by loop_bind() with @held in this call, open
 * read-only (borrowed: valid until loop_hold_drop()), or -1: what the block
 * class probes instead of the device (fv_blkvol_ops.probe_fd).
 */
int loop_probe_fd(struct fv_ctx *cx, const char *dev);

/*
 * Claim binding @b, which no mount uses, for @tag with the kernel's release
 * at its last close: released and bound anew by loop_bind() when nobody else
 * has its device open (returns 1: call loop_bind()); else re-tagged in place
 * with LO_FLAGS_AUTOCLEAR and held (0).  <0 on failure (message set).
 */
int loop_claim_unused(struct fv_ctx *cx, struct binding *b, const char *tag);

/* Rewrite the tag of the bound device @b; everything else stays. */
int loop_set_tag(struct fv_ctx *cx, struct binding *b, const char *tag);

/* Close the device held since loop_bind() or loop_claim_unused(), if any. */
void loop_hold_drop(void);

/*
 * Make the binding @b (claimed, mounted) release with its last mount:
 * LO_FLAGS_AUTOCLEAR, set at bind time by this version, else set now.
 */
int loop_autoclear(struct fv_ctx *cx, const struct binding *b);

#endif
