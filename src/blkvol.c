/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block-volume class (fv/blkvol.h): the generic lifecycle of attachable
 * block volumes, once, for every block driver, in both attach modes.
 */
#include <json-c/json.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/state.h"
#include "fv/util.h"
#include "blkvol-internal.h"

/* Is the mount @mi the filesystem on block device @dev? (source string or device number) */
static bool mount_is_dev(const struct fv_mntinfo *mi, const char *dev)
{
	struct stat st;

	if (streq(mi->source, dev))
		return true;
	return stat(dev, &st) == 0 && S_ISBLK(st.st_mode) && mi->devno == st.st_rdev;
}

/*
 * Grow the filesystem @fstype on @dev, mounted read-write at @mnt, when the
 * device is larger: a restore or clone into a larger volume, a volume grown
 * while no node had it.  Checked on every read-write device mount, the ones
 * already made too: a retry after a killed grow finishes it.  Online, as
 * kubelet's mount-utils does (ext4's offline resize2fs would first need a
 * full e2fsck, and xfs grows only mounted).
 */
static int fill_device(struct fv_ctx *cx, const char *dev, const char *mnt, const char *fstype)
{
	uint64_t fs, size;
	int r = fv_fs_short(dev, fstype, &fs, &size);

	if (r < 0)
		return fv_fail(cx, r, "cannot read the size of the %s filesystem on %s: %s", fstype,
			       dev, strerror(-r));
	if (r == 0)
		return 0;
	fv_log("%s: the %s filesystem has %" PRIu64 " of the device's %" PRIu64
	       " bytes; growing it", dev, fstype, fs, size);
	return fv_fs_grow(cx, dev, mnt, fstype);
}

/*
 * Mount block device @dev at the global path @gd (fv_dir_arg(), must
 * exist), read-only when @ro; the mount is made on the verified directory
 * itself (fv_dir_mount()).  Already mounted there from @dev is success
 * (made read-write first when it is read-only and !@ro: the mode is the
 * pods' binds'); mounted from anything else is -FV_ERR_CONFLICT.  The device
 * is probed with libblkid: a blank device gets @fstype (or @default_fstype)
 * unless @ro; a filesystem other than a requested @fstype is refused,
 * never reformatted.
 */
static int mount_device(struct fv_ctx *cx, const struct fv_dir *gd, const char *dev,
			  const char *fstype, const char *default_fstype, bool ro)
{
	const char *gmp = gd->path;
	_cleanup_close_ int lock = -1;
	struct fv_mntinfo mi;
	char have[FV_FSTYPE_MAX];
	const char *use;
	bool made = false;
	int r = fv_dir_mounted(gd, &mi);

	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", gmp, strerror(-r));
	if (r == 0) {
		if (!mount_is_dev(&mi, dev) || !streq(mi.root, "/"))
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s'",
				       gmp, mi.source);
		/*
		 * Mounted already: Success only for what was asked.  Another
		 * filesystem is refused as on a first mount.  The mode is the
		 * pods' (docs/design.md, "Read-only and read-write pods of one
		 * volume"): every pod reaches the device mount only
		 * through its own bind, which carries the pod's mode; the device
		 * mount is read-only until a read-write pod needs it.
		 */
		/* the volume mounted here, unlike this call asks: it exists, incompatible */
		if (fstype && !streq(fstype, mi.fstype))
			return fv_fail(cx, -EEXIST, "'%s' is mounted as %s, not the requested %s",
				       gmp, mi.fstype, fstype);
		if (!ro && mi.readonly) {
			r = fv_blkvol_writable(cx, gd);
			if (r < 0)
				return r;
		}
		return ro ? 0 : fill_device(cx, dev, gmp, mi.fstype);
	}
	/*
	 * The device lock from the probe to the mount: a retry after a killed
	 * call waits here while the old mkfs still writes (it inherited the
	 * lock), and never probes, formats or mounts a half-written device.
	 */
	lock = fv_blk_lock(cx, dev);
	if (lock < 0)
		return lock;
	r = fv_blk_probe(cx, dev, blkvol_ops(cx)->probe_fd ? blkvol_ops(cx)->probe_fd(cx, dev) : -1,
			 have, sizeof(have));
	if (r < 0)
		return r;
	if (r == 1 || r == 2) {
		use = fstype ? fstype : default_fstype;
		if (ro)
			return fv_fail(cx, -FV_ERR_NOTBLANK,
				       "%s is %s and the volume is read-only: nothing to mount", dev,
				       r == 1 ? "blank" : "an unfinished filesystem");
		if (r == 2) {
			if (fstype && !streq(fstype, have))
				return fv_fail(cx, -FV_ERR_NOTBLANK,
					       "%s holds an unfinished %s, not the requested %s; "
					       "refusing to reformat",
					       dev, have, fstype);
			use = have;
			fv_log("%s holds an unfinished %s (a killed mkfs); making it again", dev,
			       have);
		}
		r = fv_fs_make(cx, dev, use, lock, r == 2);
		if (r < 0)
			return r;
		made = true;
		fv_log("made %s on %s", use, dev);
	} else {
		if (fstype && !streq(fstype, have))
			return fv_fail(cx, -FV_ERR_NOTBLANK,
				       "%s holds %s, not the requested %s; refusing to reformat", dev,
				       have, fstype);
		use = have;
	}
	r = fv_dir_mount(cx, gd, dev, use, fv_fs_mount_options(use, ro));
	if (r < 0 || ro || made)
		return r;
	return fill_device(cx, dev, gmp, use);
}

int fv_blkvol_writable(struct fv_ctx *cx, const struct fv_dir *gd)
{
	int r = fv_dir_remount_rw(cx, gd);

	if (r < 0) {
		fv_ctx_reset_message(cx);
		return fv_fail(cx, r, "the volume is read-only on this node ('%s' cannot be made "
			       "read-write: %s); a pod asking for read-write cannot use it, pods "
			       "asking for read-only can", gd->path, strerror(-r));
	}
	return 0;
}

/* kubelet's global mount path of a pod volume dir (blkvol-internal.h). */
bool fv_blkvol_kubelet_path(const char *poddir, char *ret, size_t len)
{
	const char *p = strstr(poddir, "/pods/"), *vol, *tilde, *name;

	for (const char *q = p; q; q = strstr(q + 1, "/pods/"))
		p = q;
	if (!p || !(vol = strstr(p, "/volumes/")))
		return false;
	vol += strlen("/volumes/");
	tilde = strchr(vol, '~');
	name = strchr(vol, '/');
	if (!tilde || !name || tilde > name || strchr(name + 1, '/'))
		return false;
	return snprintf(ret, len, "%.*s/plugins/kubernetes.io/flexvolume/%.*s/%.*s/mounts/%s",
			(int)(p - poddir), poddir, (int)(tilde - vol), vol,
			(int)(name - tilde - 1), tilde + 1, name + 1) < (int)len;
}

/* --- the class ------------------------------------------------------------------- */

bool fv_blkvol_node_mode(const struct fv_ctx *cx)
{
	return streq(cx->cfg.attach_mode, "node");
}

void fv_blkvol_init_caps(const struct fv_ctx *cx, struct fv_caps *caps)
{
	/* kubelet then calls only mount and unmount (docs/design.md, "Two attach modes") */
	if (fv_blkvol_node_mode(cx))
		caps->attach = false;
}

/*
 * The backend's parsed volume: may hold secrets (CHAP from a Secret), wiped when freed.
 * Its size is the thread's (flexvol-csi's calls parse on threads at once; each frees
 * what it parsed).
 */
static __thread size_t vol_size;

void fv_blkvol_vol_freep(void **p)
{
	if (*p) {
		explicit_bzero(*p, vol_size);
		free(*p);
	}
}

/* Options -> the backend's volume; the same validation for every op that carries options. */
int fv_blkvol_parse(struct fv_ctx *cx, const struct fv_opts *o, void **ret)
{
	const struct fv_blkvol_ops *ops = blkvol_ops(cx);
	void *v;
	int r;

	vol_size = ops->vol_size;
	v = calloc(1, vol_size);
	if (!v)
		return -ENOMEM;
	r = ops->parse(cx, o, v);
	if (r == 0)
		r = fv_fs_check_option(cx, o->fstype);
	if (r < 0) {
		fv_blkvol_vol_freep(&v);
		return r;
	}
	*ret = v;
	return 0;
}

/* The per-volume lock: the same key the dispatcher takes for mountdevice, unmountdevice, detach. */
int fv_blkvol_lock_volume(struct fv_ctx *cx, const char *name)
{
	char key[FV_LOCK_NAME_MAX];

	fv_lock_volume_name(cx, name, key, sizeof(key));
	return fv_lock(cx, key);
}

int fv_blkvol_save_record(struct fv_ctx *cx, const char *name, const void *v, const char *dev,
			  const struct fv_opts *o)
{
	json_object *rec = json_object_new_object(), *opts;
	struct stat st;
	int r;

	if (!rec)
		return -ENOMEM;
	/* for the collector: whose record this is, and that it is the class's */
	json_object_object_add(rec, "key", json_object_new_string(name));
	json_object_object_add(rec, "blkvol", json_object_new_boolean(true));
	json_object_object_add(rec, "device", json_object_new_string(dev));
	/* the device's number too: owns() can tell its mounts once the node itself is gone */
	if (stat(dev, &st) == 0 && S_ISBLK(st.st_mode))
		json_object_object_add(rec, "rdev", json_object_new_int64((int64_t)st.st_rdev));
	json_object_object_add(rec, "readonly", json_object_new_boolean(o->readonly));
	if (o->block) /* staged as its device node (blkvol-raw.c) */
		json_object_object_add(rec, "block", json_object_new_boolean(true));
	/* the volume's own options (not kubelet's, no Secret's): NodeExpandVolume has none */
	opts = json_object_new_object();
	for (size_t i = 0; opts && i < o->n; i++)
		if (o->pairs[i].value && strncmp(o->pairs[i].key, "kubernetes.io/", 14))
			json_object_object_add(opts, o->pairs[i].key,
					       json_object_new_string(o->pairs[i].value));
	json_object_object_add(rec, "opts", opts);
	r = blkvol_ops(cx)->record ? blkvol_ops(cx)->record(cx, v, rec) : 0;
	/* what it records, a device and its mount, ends with the boot: unsynced */
	if (r == 0)
		r = fv_state_write_boot(cx, name, rec);
	json_object_put(rec);
	return r;
}

/*
 * The record of what waitforattach attached, under the options' volume name
 * (a hint, not an identity): kept apart from the records of trusted names,
 * so that it can only ever widen what a detach of that name releases - a
 * node-side attach nobody mounted - never redirect it.
 */
void fv_blkvol_hinted_key(const char *hint, char *buf, size_t len)
{
	snprintf(buf, len, "?%s", hint);
}

int fv_blkvol_release_record(struct fv_ctx *cx, const char *name, const char *key, dev_t devno)
{
	json_object *rec = NULL;
	int r;

	if (fv_state_read(cx, key, &rec) != 0)
		rec = NULL; /* a cache: the backend asks the kernel first */
	r = blkvol_ops(cx)->release(cx, name, devno, rec);
	json_object_put(rec);
	if (r == 0)
		(void)fv_state_remove(cx, key);
	return r;
}

/*
 * Undo the node-side attach of the volume @name (a trusted name), whose
 * device mount was on @devno (0: unknown), then forget its records.
 */
int fv_blkvol_release_volume(struct fv_ctx *cx, const char *name, dev_t devno)
{
	char key[PATH_MAX];
	int r = fv_blkvol_release_record(cx, name, name, devno);

	if (r < 0)
		return r;
	fv_blkvol_hinted_key(name, key, sizeof(key));
	r = fv_blkvol_release_record(cx, name, key, 0);
	if (r == -EBUSY) {
		/* any PV's options can write this hint: what it names being in use is not our failure */
		fv_log("leaving what '%s' names: %s", key, fv_ctx_message(cx));
		fv_ctx_reset_message(cx);
		r = 0;
	}
	return r;
}

/*
 * The device mount @gd of volume @name goes, and the node-side attach with
 * it, in the order that leaks nothing:
 *
 *  - another mount of the device (a pod's bind) is refused before the
 *    device mount is touched (@busy_ok: that is no error, the caller is one
 *    of several pods): dropping it first left a device that mountdevice
 *    then refused as mounted "for another volume";
 *  - the backend arranges, where it can, that the kernel undoes the attach
 *    with the last mount (loop: autoclear), so a SIGKILL after the umount
 *    leaks nothing;
 *  - a release that fails puts the device mount back, so that kubelet (which
 *    calls unmountdevice only for a mount point) calls again.
 *
 * What still leaks: a backend without release_on_umount (iSCSI) killed
 * between the umount and its release; the garbage collector finds that.
 * Call with the volume lock held.  1: left for other mounts (@busy_ok).
 */
int fv_blkvol_unmount_and_release(struct fv_ctx *cx, const char *name, const struct fv_dir *gd,
			       const struct fv_mntinfo *known, bool busy_ok, bool ours)
{
	const struct fv_blkvol_ops *ops = blkvol_ops(cx);
	struct fv_mntinfo mi;
	char other[PATH_MAX];
	int n, r = known ? 0 : fv_dir_mounted(gd, &mi);

	if (known)
		mi = *known;
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", gd->path,
			       strerror(-r));
	if (r == 1)
		return fv_blkvol_release_volume(cx, name, 0); /* unmounted before: what a killed call left */
	/* only the volume's own device mount (fv_op_run()'s only_ours(), with the mount read here) */
	r = ours ? fv_blkvol_owns(cx, name, gd->path, &mi) : 1;
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whose mount '%s' is: %s", gd->path, strerror(-r));
	if (r == 0) {
		fv_log("unmountdevice of volume '%s': '%s' holds %s (%s), left alone", name,
		       gd->path, mi.source, mi.fstype);
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds %s (%s), not a mount of volume "
			       "'%s': left alone", gd->path, mi.source, mi.fstype, name);
	}
	n = fv_mnt_count_devno(mi.devno);
	if (n < 0)
		return fv_fail(cx, n, "cannot read the mount table: %s", strerror(-n));
	if (n > 1) {
		if (busy_ok)
			return 1;
		if (fv_mnt_find_source(mi.source, gd->path, other, sizeof(other)) != 0)
			snprintf(other, sizeof(other), "another place");
		return fv_fail(cx, -EBUSY, "%s, the device of '%s', is still mounted at '%s' "
			       "(%d mounts in all): not unmounting it", mi.source, gd->path, other,
			       n);
	}
	if (ops->release_on_umount) {
		r = ops->release_on_umount(cx, name, mi.devno);
		if (r < 0) {
			fv_log("cannot have %s released with its last mount: %s", mi.source,
			       strerror(-r));
			fv_ctx_reset_message(cx);
		}
	}
	r = fv_dir_umount_all(cx, gd, false);
	if (r < 0)
		return r;
	r = fv_blkvol_release_volume(cx, name, mi.devno);
	if (r < 0) {
		struct fv_saved_message saved;

		fv_ctx_save_message(cx, &saved);
		if (fv_dir_mount(cx, gd, mi.source, mi.fstype, fv_fs_mount_options(mi.fstype, mi.readonly)) == 0)
			fv_ctx_add_detail(cx, "the device mount is back, to be unmounted again");
		else
			fv_log("cannot put the device mount back on %s: %s", gd->path, cx->message);
		fv_ctx_restore_message(cx, &saved, false);
		return r;
	}
	r = fv_dir_is_empty(gd);
	if (r == 0)
		return fv_fail(cx, -ENOTEMPTY, "'%s' is not empty after unmount", gd->path);
	return r < 0 ? fv_fail(cx, r, "cannot read '%s': %s", gd->path, strerror(-r)) : 0;
}

/*
 * The record waitforattach wrote under the options' volume name @hint is of
 * no use once the device @dev it names is claimed under a trusted name (the
 * claimed record and tag say everything): removed, or it would stay in the
 * state dir forever whenever the hint is not kubelet's name.
 */
static void forget_hint(struct fv_ctx *cx, const char *hint, const char *dev)
{
	json_object *rec = NULL, *d;
	char key[PATH_MAX];

	if (!hint || !hint[0])
		return;
	fv_blkvol_hinted_key(hint, key, sizeof(key));
	if (fv_state_read(cx, key, &rec) != 0)
		return;
	if (json_object_object_get_ex(rec, "device", &d) && json_object_is_type(d, json_type_string) &&
	    streq(json_object_get_string(d), dev))
		(void)fv_state_remove(cx, key);
	json_object_put(rec);
}

/*
 * Is @target the global path @arg itself, or the pod dir of a pod of that
 * same volume (kubelet's layout, fv_blkvol_kubelet_path())?  Those mounts of
 * the device are this volume's: a pod bind left when the global path went
 * behind kubelet's back does not make the device "another volume's".
 */
static bool this_volumes_mount(const char *target, void *arg)
{
	const char *gmp = arg;
	char g[PATH_MAX];

	return streq(target, gmp) ||
	       (fv_blkvol_kubelet_path(target, g, sizeof(g)) && streq(g, gmp));
}

/*
 * The node-side attach claimed for @name, the device formatted if blank and
 * mounted at @gd (the directory as opened), the record written.  A device mounted for
 * another volume is refused: options naming another PV's image or LUN never
 * reach its data.
 */
int fv_blkvol_attach_and_mount(struct fv_ctx *cx, const void *v, const struct fv_opts *o,
			    const char *name, const struct fv_dir *gd, const char *kubelet_dev)
{
	const struct fv_blkvol_ops *ops = blkvol_ops(cx);
	char dev[PATH_MAX], other[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	int lock = -1, r;

	r = ops->attach(cx, v, name, NULL, dev, sizeof(dev), &lock);
	if (r < 0)
		return r;
	/* kubelet's device is our own waitforattach answer; the kernel still decides */
	if (kubelet_dev && kubelet_dev[0] && !streq(kubelet_dev, dev))
		fv_log("mountdevice: kubelet passed %s, the volume's device is %s", kubelet_dev, dev);
	if (!(fv_dir_mounted(gd, &mi) == 0 && stat(dev, &st) == 0 && mi.devno == st.st_rdev) &&
	    fv_mnt_find_source_skip(dev, this_volumes_mount, (void *)gd->path, other,
				    sizeof(other)) == 0) {
		r = fv_fail(cx, -FV_ERR_CONFLICT, "%s is already mounted at '%s' for another "
			    "volume; refusing to mount it for '%s'", dev, other, name);
		goto out;
	}
	r = fv_blkvol_no_node_binds(cx, dev, name);
	if (r < 0)
		goto out;
	/* before the mount: a refused mkfs still leaves what detach needs to release */
	r = fv_blkvol_save_record(cx, name, v, dev, o);
	if (r == 0)
		forget_hint(cx, o->volume, dev);
	if (r == 0)
		r = mount_device(cx, gd, dev, o->fstype, ops->default_fstype,
					  o->readonly);
out:
	if (lock >= 0)
		fv_unlock(lock);
	return r;
}

int fv_blkvol_op_attach(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			char **ret_device)
{
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	int r = fv_blkvol_parse(cx, o, &v);

	if (r < 0)
		return r;
	return blkvol_ops(cx)->handle(cx, v, ret_device);
}

/*
 * isattached answers the truth of the logical attach: true from a
 * successful attach until detach.
 *
 * attach runs in the controller-manager's container: it validates and
 * returns a handle, and can leave no trace anywhere (no node state, often a
 * read-only root, another machine than the node).  Whether the volume is
 * attached in the ADC's sense is therefore exactly "attach succeeded and
 * detach has not run" - which only the ADC itself records, and which is why
 * it asks only about volumes it attached and has not detached
 * (VerifyVolumesAreAttached walks its actual state of the world).  The
 * node-side attach (loop binding, iSCSI session) is a different thing: it
 * is made by waitforattach (or mount in node mode) and may be absent for
 * good reasons - before waitforattach ran, after a node reboot, after
 * unmountdevice.  Answering from it made the ADC mark the volume detached
 * between attach and waitforattach and attach it again (contract §3.3).
 * So: valid options -> attached, on any node, from any process; the
 * options are still validated, so a broken PV is a Failure, not a yes.
 */
int fv_blkvol_op_isattached(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			    bool *ret_attached)
{
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	int r = fv_blkvol_parse(cx, o, &v);

	if (r < 0)
		return r;
	*ret_attached = true;
	return 0;
}

int fv_blkvol_op_waitforattach(struct fv_ctx *cx, const char *device, const struct fv_opts *o,
			       char **ret_device)
{
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	char dev[PATH_MAX];
	int lock = -1, r = fv_blkvol_parse(cx, o, &v);

	if (r < 0)
		return r;
	/* no trusted name here (fv/blkvol.h): the backend object alone, the name a hint */
	r = blkvol_ops(cx)->attach(cx, v, NULL, o->volume, dev, sizeof(dev), &lock);
	if (r == 0 && o->volume) {
		char key[PATH_MAX];

		fv_blkvol_hinted_key(o->volume, key, sizeof(key));
		r = fv_blkvol_save_record(cx, key, v, dev, o);
	}
	if (lock >= 0)
		fv_unlock(lock);
	if (r < 0)
		return r;
	*ret_device = strdup(dev);
	return *ret_device ? 0 : -ENOMEM;
}

int fv_blkvol_op_mountdevice(struct fv_ctx *cx, const char *dir, const char *device,
			     const struct fv_opts *o)
{
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	int r = fv_blkvol_parse(cx, o, &v);

	if (r < 0)
		return r;
	r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &gd); /* kubelet made it: never created here */
	if (r < 0)
		return r;
	/* the global mount path ends in the volume name (contract §2); locked by the dispatcher */
	if (o->block)
		return fv_blkvol_stage_block(cx, v, o, fv_path_last(dir), &gd);
	/* staged here as a raw block device: the volume exists here, not as asked */
	r = fv_blkvol_staged_as_block(cx, gd.path, "stage", -EEXIST);
	if (r < 0)
		return r;
	return fv_blkvol_attach_and_mount(cx, v, o, fv_path_last(dir), &gd, device);
}

int fv_blkvol_op_unmountdevice(struct fv_ctx *cx, const char *dir)
{
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	struct fv_mntinfo mi;
	int r = fv_dir_arg(cx, dir, 0, &gd);

	if (r < 0)
		return r;
	if (r == 1) /* no directory: nothing mounted, only what a killed call left to release */
		return fv_blkvol_release_volume(cx, fv_path_last(dir), 0);
	/* locked by the dispatcher on the volume name; the mount table read once for all below */
	r = fv_dir_mounted(&gd, &mi);
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", gd.path,
			       strerror(-r));
	if (r == 1) {
		/* no mount point: a raw block stage (its device node bound inside), or nothing */
		r = fv_blkvol_unstage_block(cx, fv_path_last(dir), &gd);
		return r != 1 ? r : fv_blkvol_release_volume(cx, fv_path_last(dir), 0);
	}
	return fv_blkvol_unmount_and_release(cx, fv_path_last(dir), &gd, &mi, false, true);
}

int fv_blkvol_op_detach(struct fv_ctx *cx, const char *volume, const char *node)
{
	if (!fv_ctx_node_is_local(cx, node))
		return 0; /* nothing of another node's is reachable from here */
	return fv_blkvol_release_volume(cx, volume, 0);
}

/* The options volume @name was mounted with on this node: its state record's. */
static int staged_opts(struct fv_ctx *cx, const char *name, struct fv_opts *o)
{
	json_object *rec = NULL, *opts;
	int r = name ? fv_state_read(cx, name, &rec) : 1;

	if (r == 0 && json_object_object_get_ex(rec, "opts", &opts))
		r = fv_opts_from_object(cx, opts, o);
	else if (r >= 0)
		r = fv_fail(cx, -ENOENT, "volume '%s' is not staged on this node", name ? name : "");
	json_object_put(rec);
	return r;
}

/*
 * A raw block volume grows its device only (CSI's NodeExpandVolume on the
 * file its node is bound on): 1 when @path is no such publish (a filesystem
 * to grow), else the backend's grow() of @dev, which must be the device
 * bound there.
 */
static int grow_block(struct fv_ctx *cx, const void *v, const char *dev, const char *path,
		      uint64_t new_size)
{
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };
	struct fv_mntinfo mi;
	struct stat st;
	dev_t rdev;
	int r = fv_dir_arg(cx, path, FV_DIRARG_PARENT_ONLY, &pd);

	if (r != 0)
		return r < 0 ? r : 1;
	if (fv_mnt_find(pd.path, &mi) != 0 || fv_mnt_node_devno(&mi, &rdev) != 0)
		return 1;
	if (stat(dev, &st) < 0 || st.st_rdev != rdev)
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds another device than %s that these "
			       "options name; refusing to grow it", pd.path, dev);
	return blkvol_ops(cx)->grow(cx, v, dev, new_size);
}

/*
 * expandfs <json> <device> <poddir> <new> <old>: the pod dir's mount says
 * which device this volume is; the options must name the same one, so
 * they can never grow another PV's image or LUN.
 */
int fv_blkvol_op_expandfs(struct fv_ctx *cx, const struct fv_opts *o, const char *device,
			  const char *dir, const char *name, uint64_t new_size, uint64_t old_size)
{
	const struct fv_blkvol_ops *ops = blkvol_ops(cx);
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };
	_cleanup_(fv_opts_donep) struct fv_opts staged = { 0 };
	char dev[PATH_MAX], type[FV_FSTYPE_MAX], mnt[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	int r = o ? 0 : staged_opts(cx, name, &staged);

	if (r < 0)
		return r;
	r = fv_blkvol_parse(cx, o ? o : &staged, &v);
	if (r < 0)
		return r;
	if (!ops->grow)
		return fv_fail(cx, -EOPNOTSUPP, "this driver cannot grow volumes");
	if (new_size % 512)
		return fv_fail(cx, -EINVAL, "new size %llu is not a whole number of 512-byte sectors",
			       (unsigned long long)new_size);
	r = ops->find(cx, v, dev, sizeof(dev));
	if (r < 0)
		return r;
	if (r > 0)
		return fv_fail(cx, -ENXIO, "the volume is not attached on this node");
	r = grow_block(cx, v, dev, dir, new_size);
	if (r != 1)
		return r;
	r = fv_dir_arg(cx, dir, 0, &pd);
	if (r < 0)
		return r;
	if (r == 0)
		r = fv_dir_mounted(&pd, &mi);
	if (r != 0)
		return fv_fail(cx, r < 0 ? r : -ENXIO, "'%s' is not mounted: cannot grow online",
			       dir);
	if (stat(dev, &st) < 0 || st.st_rdev != mi.devno)
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds '%s', not %s that these options "
			       "name; refusing to grow it", dir, mi.source, dev);
	r = ops->grow(cx, v, dev, new_size);
	if (r < 0)
		return r;
	r = fv_blk_probe(cx, dev, -1, type, sizeof(type));
	if (r != 0)
		return r < 0 ? r : fv_fail(cx, -ENXIO, "%s holds no filesystem", dev);
	r = fv_mnt_find_source(dev, NULL, mnt, sizeof(mnt));
	if (r != 0)
		snprintf(mnt, sizeof(mnt), "%s", pd.path);
	return fv_fs_grow(cx, dev, mnt, type);
}
