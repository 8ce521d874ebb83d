/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block-volume class (fv/blkvol.h): the generic lifecycle of attachable
 * block volumes, once, for every block driver, in both attach modes.
 */
#include <dirent.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"
#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/state.h"
#include "fv/util.h"

/* Is the mount @mi the filesystem on block device @dev? (source string or device number) */
static bool mount_is_dev(const struct fv_mntinfo *mi, const char *dev)
{
	struct stat st;

	if (streq(mi->source, dev))
		return true;
	return stat(dev, &st) == 0 && S_ISBLK(st.st_mode) && mi->devno == st.st_rdev;
}

int fv_blkvol_mountdevice(struct fv_ctx *cx, const struct fv_dir *gd, const char *dev,
			  const char *fstype, const char *default_fstype, bool ro)
{
	const char *gmp = gd->path;
	_cleanup_close_ int lock = -1;
	struct fv_mntinfo mi;
	char have[64];
	const char *use;
	int r = fv_dir_mounted(gd, &mi);

	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", gmp, strerror(-r));
	if (r == 0) {
		if (!mount_is_dev(&mi, dev) || !streq(mi.root, "/"))
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s'",
				       gmp, mi.source);
		/*
		 * Mounted already: Success only for what was asked (issue 9 item 8).
		 * Another filesystem is refused as on a first mount; so is another
		 * mode - rw where ro was asked would grant writes, ro where rw was
		 * asked fails every write later.  Unmount the volume to change it.
		 */
		if (fstype && !streq(fstype, mi.fstype))
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is mounted as %s, not the "
				       "requested %s", gmp, mi.fstype, fstype);
		if (ro != mi.readonly)
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is mounted %s, not %s as "
				       "requested", gmp, mi.readonly ? "read-only" : "read-write",
				       ro ? "read-only" : "read-write");
		return 0;
	}
	/*
	 * The device lock from the probe to the mount: a retry after a killed
	 * call waits here while the old mkfs still writes (it inherited the
	 * lock), and never probes, formats or mounts a half-written device.
	 */
	lock = fv_blk_lock(cx, dev);
	if (lock < 0)
		return lock;
	r = fv_blk_probe(cx, dev, have, sizeof(have));
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
		fv_log("made %s on %s", use, dev);
	} else {
		if (fstype && !streq(fstype, have))
			return fv_fail(cx, -FV_ERR_NOTBLANK,
				       "%s holds %s, not the requested %s; refusing to reformat", dev,
				       have, fstype);
		use = have;
	}
	return fv_dir_mount(cx, gd, dev, use, ro ? "ro" : "rw");
}

bool fv_kubelet_global_path(const char *poddir, char *ret, size_t len)
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

int fv_blkvol_bind(struct fv_ctx *cx, const char *dir, const char *src, bool ro)
{
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 }, sd = { .parent = -1 };
	struct fv_mntinfo mi, smi;
	int r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &pd);

	if (r < 0)
		return r;
	r = fv_dir_open_quiet(src, &sd);
	if (r == 0)
		r = fv_dir_mounted(&sd, &smi);
	if (r < 0 && r != -ENOENT)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", src, strerror(-r));
	if (r != 0 || !streq(smi.root, "/"))
		return fv_fail(cx, -ENXIO, "the volume is not mounted on this node ('%s'; "
			       "mountdevice first)", src);
	r = fv_dir_mounted(&pd, &mi);
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", pd.path,
			       strerror(-r));
	if (r == 0) {
		if (mi.devno == smi.devno)
			return 0;
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s'", pd.path,
			       mi.source);
	}
	return fv_dir_bind(cx, &sd, &pd, ro);
}

int fv_blkvol_unmount(struct fv_ctx *cx, const char *dir, struct fv_mntinfo *ret)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	int r = fv_dir_arg(cx, dir, 0, &d);

	if (ret)
		memset(ret, 0, sizeof(*ret));
	if (r == 1)
		return 0; /* nothing there: nothing mounted */
	if (r < 0)
		return r;
	if (ret && fv_dir_mounted(&d, ret) != 0)
		memset(ret, 0, sizeof(*ret));
	r = fv_dir_umount_all(cx, &d, false);
	if (r < 0)
		return r;
	r = fv_dir_is_empty(&d);
	if (r == 0)
		return fv_fail(cx, -ENOTEMPTY, "'%s' is not empty after unmount", d.path);
	return r < 0 ? fv_fail(cx, r, "cannot read '%s': %s", d.path, strerror(-r)) : 0;
}

/* --- the class ------------------------------------------------------------------- */

static const struct fv_blkvol_ops *ops_of(const struct fv_ctx *cx)
{
	return cx->drv->blk;
}

bool fv_blkvol_node_mode(const struct fv_ctx *cx)
{
	return streq(cx->cfg.attach_mode, "node");
}

/* The backend's parsed volume: may hold secrets (CHAP from a Secret), wiped when freed. */
static size_t vol_size;

static void vol_freep(void **p)
{
	if (*p) {
		explicit_bzero(*p, vol_size);
		free(*p);
	}
}

/* Options -> the backend's volume; the same validation for every op that carries options. */
static int parse(struct fv_ctx *cx, const struct fv_opts *o, void **ret)
{
	const struct fv_blkvol_ops *ops = ops_of(cx);
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
		vol_freep(&v);
		return r;
	}
	*ret = v;
	return 0;
}

/* The per-volume lock: the same key the dispatcher takes for mountdevice, unmountdevice, detach. */
static int lock_volume(struct fv_ctx *cx, const char *name)
{
	char key[PATH_MAX + 64];

	snprintf(key, sizeof(key), "%s-vol-%s", cx->drv->name, name);
	return fv_lock(cx, key);
}

static int save_record(struct fv_ctx *cx, const char *name, const void *v, const char *dev,
		       const struct fv_opts *o)
{
	json_object *rec = json_object_new_object();
	int r;

	if (!rec)
		return -ENOMEM;
	/* for the collector: whose record this is, and that it is the class's */
	json_object_object_add(rec, "key", json_object_new_string(name));
	json_object_object_add(rec, "blkvol", json_object_new_boolean(true));
	json_object_object_add(rec, "device", json_object_new_string(dev));
	json_object_object_add(rec, "readonly", json_object_new_boolean(o->readonly));
	r = ops_of(cx)->record ? ops_of(cx)->record(cx, v, rec) : 0;
	if (r == 0)
		r = fv_state_write(cx, name, rec);
	json_object_put(rec);
	return r;
}

/*
 * The record of what waitforattach attached, under the options' volume name
 * (a hint, not an identity): kept apart from the records of trusted names,
 * so that it can only ever widen what a detach of that name releases - a
 * node-side attach nobody mounted - never redirect it.
 */
static void hinted_key(const char *hint, char *buf, size_t len)
{
	snprintf(buf, len, "?%s", hint);
}

static int release_record(struct fv_ctx *cx, const char *name, const char *key, dev_t devno)
{
	json_object *rec = NULL;
	int r;

	if (fv_state_read(cx, key, &rec) != 0)
		rec = NULL; /* a cache: the backend asks the kernel first */
	r = ops_of(cx)->release(cx, name, devno, rec);
	json_object_put(rec);
	if (r == 0)
		(void)fv_state_remove(cx, key);
	return r;
}

/*
 * Undo the node-side attach of the volume @name (a trusted name), whose
 * device mount was on @devno (0: unknown), then forget its records.
 */
static int release_volume(struct fv_ctx *cx, const char *name, dev_t devno)
{
	char key[PATH_MAX];
	int r = release_record(cx, name, name, devno);

	if (r < 0)
		return r;
	hinted_key(name, key, sizeof(key));
	r = release_record(cx, name, key, 0);
	if (r == -EBUSY) {
		/* any PV's options can write this hint: what it names being in use is not our failure */
		fv_log("leaving what '%s' names: %s", key, fv_ctx_message(cx));
		fv_ctx_reset_message(cx);
		r = 0;
	}
	return r;
}

/*
 * The node-side attach claimed for @name, the device formatted if blank and
 * mounted at @gd (the directory as opened), the record written.  A device mounted for
 * another volume is refused: options naming another PV's image or LUN never
 * reach its data.
 */
static int attach_and_mount(struct fv_ctx *cx, const void *v, const struct fv_opts *o,
			    const char *name, const struct fv_dir *gd, const char *kubelet_dev)
{
	const struct fv_blkvol_ops *ops = ops_of(cx);
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
	    fv_mnt_find_source(dev, gd->path, other, sizeof(other)) == 0) {
		r = fv_fail(cx, -FV_ERR_CONFLICT, "%s is already mounted at '%s' for another "
			    "volume; refusing to mount it for '%s'", dev, other, name);
		goto out;
	}
	/* before the mount: a refused mkfs still leaves what detach needs to release */
	r = save_record(cx, name, v, dev, o);
	if (r == 0)
		r = fv_blkvol_mountdevice(cx, gd, dev, o->fstype, ops->default_fstype,
					  o->readonly);
out:
	if (lock >= 0)
		fv_unlock(lock);
	return r;
}

int fv_blkvol_op_attach(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			char **ret_device)
{
	_cleanup_(vol_freep) void *v = NULL;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	return ops_of(cx)->handle(cx, v, ret_device);
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
	_cleanup_(vol_freep) void *v = NULL;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	*ret_attached = true;
	return 0;
}

int fv_blkvol_op_waitforattach(struct fv_ctx *cx, const char *device, const struct fv_opts *o,
			       char **ret_device)
{
	_cleanup_(vol_freep) void *v = NULL;
	char dev[PATH_MAX];
	int lock = -1, r = parse(cx, o, &v);

	if (r < 0)
		return r;
	/* no trusted name here (fv/blkvol.h): the backend object alone, the name a hint */
	r = ops_of(cx)->attach(cx, v, NULL, o->volume, dev, sizeof(dev), &lock);
	if (r == 0 && o->volume) {
		char key[PATH_MAX];

		hinted_key(o->volume, key, sizeof(key));
		r = save_record(cx, key, v, dev, o);
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
	_cleanup_(vol_freep) void *v = NULL;
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &gd); /* kubelet made it: never created here */
	if (r < 0)
		return r;
	/* the global mount path ends in the volume name (contract §2); locked by the dispatcher */
	return attach_and_mount(cx, v, o, fv_path_last(dir), &gd, device);
}

int fv_blkvol_op_unmountdevice(struct fv_ctx *cx, const char *dir)
{
	struct fv_mntinfo was;
	int r = fv_blkvol_unmount(cx, dir, &was);

	if (r < 0)
		return r;
	return release_volume(cx, fv_path_last(dir), was.devno);
}

int fv_blkvol_op_detach(struct fv_ctx *cx, const char *volume, const char *node)
{
	if (!fv_ctx_node_is_local(cx, node))
		return 0; /* nothing of another node's is reachable from here */
	return release_volume(cx, volume, 0);
}

/*
 * Node mode keys (docs/design.md, "Node mode keys").  kubelet names a node-mode
 * volume only by its pod dir's last component, which a pod author chooses
 * for inline volumes: two pods' inline "data" volumes on different images,
 * or an inline volume named like a PV, must not meet.  So a volume is
 * "<name>@<ident>": the pod dir's name and the backend object's identity
 * (ops->ident()), each made a file name.  It keys the volume lock, the state
 * record, the device mount <run>/<driver>/mounts/<name>/<ident> and every
 * claim on the device (loop tags).  Neither part contains '@' or '/'.
 */
static int node_vkey(struct fv_ctx *cx, const char *name, const char *ident, char *buf,
		     size_t len)
{
	char a[100], b[100];

	if (fv_name_key(name, a, sizeof(a)) < 0 || fv_name_key(ident, b, sizeof(b)) < 0)
		return fv_fail(cx, -EINVAL, "volume name '%s' cannot be a file name", name);
	if (snprintf(buf, len, "%s@%s", a, b) >= (int)len)
		return fv_fail(cx, -ENAMETOOLONG, "volume key '%s@%s' is too long", a, b);
	return 0;
}

/* The key of the volume the options @v name for the pod dir @dir. */
static int node_vkey_of(struct fv_ctx *cx, const void *v, const char *dir, char *buf, size_t len)
{
	char ident[PATH_MAX];
	int r = ops_of(cx)->ident(cx, v, ident, sizeof(ident));

	return r < 0 ? r : node_vkey(cx, fv_path_last(dir), ident, buf, len);
}

/* The directory holding the device mounts of the pod dir names @a (a node_vkey() part). */
static int node_mounts(struct fv_ctx *cx, const char *a, size_t alen, char *buf, size_t len)
{
	if (snprintf(buf, len, "%s/%s/mounts/%.*s", cx->cfg.run_dir, cx->drv->name, (int)alen,
		     a) >= (int)len)
		return fv_fail(cx, -ENAMETOOLONG, "run dir '%s' is too long", cx->cfg.run_dir);
	return 0;
}

/*
 * Node mode: the device mount of volume @vkey, owned by the driver under the
 * run dir.  A key without '@' is a volume of a version before these keys,
 * whose device mount is <run>/<driver>/mounts/<name> itself: it keeps that
 * key until its last pod goes (node_legacy()).
 */
static int node_gmp(struct fv_ctx *cx, const char *vkey, char *buf, size_t len)
{
	const char *at = strchr(vkey, '@');
	char a[NAME_MAX + 1];
	size_t n;
	int r;

	if (!at) {
		r = fv_name_key(vkey, a, sizeof(a) - 1);
		if (r < 0)
			return fv_fail(cx, r, "volume name '%s' cannot be a file name", vkey);
		return node_mounts(cx, a, strlen(a), buf, len);
	}
	if (strchr(at + 1, '@') || strchr(vkey, '/') || at == vkey || !at[1])
		return fv_fail(cx, -EINVAL, "'%s' is not a node-mode volume key", vkey);
	r = node_mounts(cx, vkey, (size_t)(at - vkey), buf, len);
	if (r < 0)
		return r;
	n = strlen(buf);
	if (snprintf(buf + n, len - n, "/%s", at + 1) >= (int)(len - n))
		return fv_fail(cx, -ENAMETOOLONG, "run dir '%s' is too long", cx->cfg.run_dir);
	return 0;
}

/*
 * The shared part of node mode going away: when no pod of volume @vkey
 * uses its device mount @path any more, that mount and the node-side
 * attach go.  @was_devno: the device the caller's pod mount was on (0:
 * none).  Call with the volume lock held.  The directory goes last: a
 * SIGKILL before the release leaves it for the retry or the collector.
 */
static int node_teardown(struct fv_ctx *cx, const char *vkey, const char *path, dev_t was_devno)
{
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	struct fv_mntinfo mi;
	dev_t devno = 0;
	int r = fv_dir_open_quiet(path, &gd); /* our own path: the run dir is ours */
	bool exists = r == 0;
	char parent[PATH_MAX];

	if (r < 0 && r != -ENOENT)
		return fv_fail(cx, r, "cannot open '%s': %s", path, strerror(-r));
	if (exists && fv_dir_mounted(&gd, &mi) == 0) {
		r = fv_mnt_count_devno(mi.devno);
		if (r < 0)
			return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
		if (r > 1)
			return 0; /* other pods on this node still use it */
		{
			char ident[PATH_MAX];

			/* only ever a device of ours: never a filesystem someone put here */
			r = ops_of(cx)->ident_of(cx, mi.devno, ident, sizeof(ident));
			if (r != 0)
				return r < 0 ? r : fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds '%s', "
							   "not a device of this driver; leaving it",
							   path, mi.source);
		}
		r = fv_blkvol_unmount(cx, path, &mi);
		if (r < 0)
			return r;
		devno = mi.devno;
	} else if (was_devno && fv_mnt_count_devno(was_devno) == 0) {
		devno = was_devno; /* the device mount went before (a killed earlier call) */
	}
	r = release_volume(cx, vkey, devno);
	if (r < 0 || !exists)
		return r;
	(void)rmdir(path);
	snprintf(parent, sizeof(parent), "%s", path);
	*strrchr(parent, '/') = '\0';
	(void)rmdir(parent); /* the last volume of this pod dir name (ENOTEMPTY otherwise) */
	return 0;
}

/* Lock volume @vkey and take its device mount down if no pod uses it (node_teardown()). */
static int node_teardown_locked(struct fv_ctx *cx, const char *vkey, dev_t was_devno)
{
	char path[PATH_MAX];
	int lock, r = node_gmp(cx, vkey, path, sizeof(path));

	if (r < 0)
		return r;
	lock = lock_volume(cx, vkey);
	if (lock < 0)
		return lock;
	r = node_teardown(cx, vkey, path, was_devno);
	fv_unlock(lock);
	return r;
}

/* Is the directory @path (ours, under the run dir) a mount point? */
static bool is_mount_point(const char *path)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };

	return fv_dir_open_quiet(path, &d) == 0 && fv_dir_mounted(&d, NULL) == 0;
}

/* Has pod dir name @name a device mount of a version before node mode keys (node_gmp())? */
static bool node_legacy(struct fv_ctx *cx, const char *name)
{
	char path[PATH_MAX];

	return node_gmp(cx, name, path, sizeof(path)) == 0 && is_mount_point(path);
}

/*
 * Call @fn for each volume key with a device mount directory under
 * <run>/<driver>/mounts/<a> (@a a pod dir name as node_vkey() makes it):
 * "<a>@<ident>" for each directory in it - or "<a>" alone when it is a
 * mount point itself (an older version's device mount: never walked into,
 * it is a volume's filesystem).
 */
static int node_each_name(struct fv_ctx *cx, const char *a,
			  int (*fn)(struct fv_ctx *cx, const char *vkey, void *arg), void *arg)
{
	char dir[PATH_MAX], vkey[256];
	struct dirent *f;
	DIR *sub;
	int r = node_mounts(cx, a, strlen(a), dir, sizeof(dir));

	if (r < 0)
		return r;
	if (is_mount_point(dir))
		return fn(cx, a, arg);
	sub = opendir(dir);
	if (!sub)
		return 0;
	while (r >= 0 && (f = readdir(sub))) {
		if (f->d_name[0] == '.' || strchr(f->d_name, '@'))
			continue;
		if (snprintf(vkey, sizeof(vkey), "%s@%s", a, f->d_name) < (int)sizeof(vkey))
			r = fn(cx, vkey, arg);
	}
	closedir(sub);
	return r;
}

/* node_each_name() for the pod dir name @name, or (NULL) for every name. */
static int node_each(struct fv_ctx *cx, const char *name,
		     int (*fn)(struct fv_ctx *cx, const char *vkey, void *arg), void *arg)
{
	char top[PATH_MAX], a[100];
	struct dirent *e;
	DIR *d;
	int r = 0;

	if (name)
		return fv_name_key(name, a, sizeof(a)) < 0 ? 0 : node_each_name(cx, a, fn, arg);
	if (node_mounts(cx, "", 0, top, sizeof(top)) < 0)
		return -ENAMETOOLONG;
	d = opendir(top);
	if (!d)
		return errno == ENOENT ? 0 : fv_fail(cx, NEG_ERRNO(), "cannot read '%s': %m", top);
	while (r >= 0 && (e = readdir(d)))
		if (e->d_name[0] != '.' && !strchr(e->d_name, '@'))
			r = node_each_name(cx, e->d_name, fn, arg);
	closedir(d);
	return r;
}

static int teardown_fn(struct fv_ctx *cx, const char *vkey, void *arg)
{
	int r = node_teardown_locked(cx, vkey, 0);

	if (r == -FV_ERR_CONFLICT) {
		/* not this pod's business: its own mount is gone */
		fv_log("unmount: %s", fv_ctx_message(cx));
		fv_ctx_reset_message(cx);
		r = 0;
	}
	return r;
}

/*
 * Node mode, unmount <poddir>: the pod's mount goes; the last pod of the
 * volume on this node takes the device mount and the node-side attach with
 * it.  Everything is found from the kernel: the pod mount's device names
 * the backend object (ops->ident_of()), hence the volume; when the pod
 * mount went before (a killed earlier call), every device mount of this
 * pod dir name that no pod uses goes.  A wiped state dir or a SIGKILL at
 * any step leaves a state the retry (or the collector) finishes.
 */
static int node_unmount(struct fv_ctx *cx, const char *dir)
{
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };
	char ident[PATH_MAX], vkey[256];
	struct fv_mntinfo mi, was;
	int lock, r = fv_dir_arg(cx, dir, 0, &pd);

	if (r < 0)
		return r;
	if (r == 0 && fv_dir_mounted(&pd, &mi) == 0) {
		r = ops_of(cx)->ident_of(cx, mi.devno, ident, sizeof(ident));
		if (r < 0)
			return r;
		if (r == 0) {
			char path[PATH_MAX];

			if (node_legacy(cx, fv_path_last(dir)))
				snprintf(vkey, sizeof(vkey), "%s", fv_path_last(dir));
			else
				r = node_vkey(cx, fv_path_last(dir), ident, vkey, sizeof(vkey));
			if (r == 0)
				r = node_gmp(cx, vkey, path, sizeof(path));
			if (r < 0)
				return r;
			lock = lock_volume(cx, vkey);
			if (lock < 0)
				return lock;
			r = fv_blkvol_unmount(cx, dir, &was);
			if (r == 0)
				r = node_teardown(cx, vkey, path, was.devno);
			fv_unlock(lock);
			return r;
		}
	}
	r = fv_blkvol_unmount(cx, dir, NULL);
	if (r < 0)
		return r;
	return node_each(cx, fv_path_last(dir), teardown_fn, NULL);
}

/*
 * Volume @name is mounted on this node (@mi): the options must name that
 * very device (@found and @dev are the backend's find() answer), or no pod
 * of theirs gets it.
 */
static int require_named_device(struct fv_ctx *cx, const char *name, int found, const char *dev,
				const struct fv_mntinfo *mi)
{
	struct stat st;

	if (found == 0 && stat(dev, &st) == 0 && st.st_rdev == mi->devno)
		return 0;
	return fv_fail(cx, -FV_ERR_CONFLICT, "volume '%s' is mounted on this node from '%s', "
		       "which is not the device these options name", name, mi->source);
}

/*
 * Node mode, mount <poddir> <json>: the whole node-side work, the first pod
 * attaching and mounting the device once per node, every pod binding it.
 * The volume lock makes parallel mounts and unmounts of one volume's pods
 * (contract §4.3) take turns on the shared part.
 */
static int node_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o)
{
	_cleanup_(vol_freep) void *v = NULL;
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	const char *name = fv_path_last(dir);
	char path[PATH_MAX], dev[PATH_MAX], vkey[256];
	struct fv_mntinfo mi;
	int lock, r = parse(cx, o, &v);

	if (r < 0)
		return r;
	if (node_legacy(cx, name) && strlen(name) < sizeof(vkey))
		snprintf(vkey, sizeof(vkey), "%s", name); /* until the older version's last pod goes */
	else
		r = node_vkey_of(cx, v, dir, vkey, sizeof(vkey));
	if (r == 0)
		r = node_gmp(cx, vkey, path, sizeof(path));
	if (r < 0)
		return r;
	lock = lock_volume(cx, vkey);
	if (lock < 0)
		return lock;
	r = fv_mkdir_p(path, 0750);
	if (r == 0)
		r = fv_dir_open_quiet(path, &gd); /* under our run dir: created here, ours */
	if (r < 0) {
		r = fv_fail(cx, r, "cannot create directory '%s': %s", path, strerror(-r));
		goto out;
	}
	if (fv_dir_mounted(&gd, &mi) == 0) {
		/* mounted for an earlier pod: these options must name that very device */
		r = ops_of(cx)->find(cx, v, dev, sizeof(dev));
		if (r >= 0)
			r = require_named_device(cx, name, r, dev, &mi);
		if (r < 0)
			goto out;
		if (mi.readonly && !o->readonly) {
			r = fv_fail(cx, -FV_ERR_CONFLICT, "volume '%s' is mounted read-only on this "
				    "node for another pod; a read-write pod has to wait until "
				    "those are gone", name);
			goto out;
		}
	} else {
		r = attach_and_mount(cx, v, o, vkey, &gd, NULL);
		if (r < 0)
			goto undo;
	}
	r = fv_blkvol_bind(cx, dir, path, o->readonly);
	if (r == 0)
		goto out;
undo:
	/*
	 * kubelet removes the dir of a failed mount and never unmounts it: what
	 * this call set up and no pod uses goes again (the message stays ours).
	 */
	{
		char msg[FV_MESSAGE_MAX];

		snprintf(msg, sizeof(msg), "%s", cx->message);
		(void)node_teardown(cx, vkey, path, 0);
		snprintf(cx->message, sizeof(cx->message), "%s", msg);
	}
out:
	fv_unlock(lock);
	return r;
}

int fv_blkvol_op_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o)
{
	_cleanup_(vol_freep) void *v = NULL;
	char path[PATH_MAX], dev[PATH_MAX];
	int found, r;

	if (fv_blkvol_node_mode(cx))
		return node_mount(cx, dir, o);
	r = parse(cx, o, &v); /* the same validation as every op */
	if (r < 0)
		return r;
	/* the backend object the options name, looked at (a hostile image file is refused here) */
	found = ops_of(cx)->find(cx, v, dev, sizeof(dev));
	if (found < 0)
		return found;
	/*
	 * The pod dir names the volume; its global path holds the device that
	 * mountdevice claimed for it.  The options name no device here.
	 */
	if (!fv_kubelet_global_path(dir, path, sizeof(path))) {
		_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };

		/* a missing or non-directory pod dir says so first */
		r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &pd);
		if (r < 0)
			return r;
		return fv_fail(cx, -EINVAL, "'%s' is not a kubelet pod volume directory "
			       "(<root>/pods/<uid>/volumes/<vendor>~<driver>/<name>)", dir);
	}
	{
		_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
		struct fv_mntinfo mi;

		/* the global path is this volume's; the options must name the device mounted there */
		if (fv_dir_open_quiet(path, &gd) == 0 && fv_dir_mounted(&gd, &mi) == 0) {
			r = require_named_device(cx, fv_path_last(dir), found, dev, &mi);
			if (r < 0)
				return r;
		}
	}
	return fv_blkvol_bind(cx, dir, path, o->readonly);
}

int fv_blkvol_op_unmount(struct fv_ctx *cx, const char *dir)
{
	if (fv_blkvol_node_mode(cx))
		return node_unmount(cx, dir);
	return fv_blkvol_unmount(cx, dir, NULL);
}

/*
 * expandfs <json> <device> <poddir> <new> <old>: the pod dir's mount says
 * which device this volume is; the options must name the same one, so
 * they can never grow another PV's image or LUN.
 */
int fv_blkvol_op_expandfs(struct fv_ctx *cx, const struct fv_opts *o, const char *device,
			  const char *dir, uint64_t new_size, uint64_t old_size)
{
	const struct fv_blkvol_ops *ops = ops_of(cx);
	_cleanup_(vol_freep) void *v = NULL;
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };
	char dev[PATH_MAX], type[64], mnt[PATH_MAX];
	struct fv_mntinfo mi;
	struct stat st;
	int r = parse(cx, o, &v);

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
	r = fv_blk_probe(cx, dev, type, sizeof(type));
	if (r != 0)
		return r < 0 ? r : fv_fail(cx, -ENXIO, "%s holds no filesystem", dev);
	r = fv_mnt_find_source(dev, NULL, mnt, sizeof(mnt));
	if (r != 0)
		snprintf(mnt, sizeof(mnt), "%s", pd.path);
	return fv_fs_grow(cx, dev, mnt, type);
}

/* --- garbage collection (docs/design.md, "Garbage collection") ------------------- */

struct gc_run {
	unsigned int max_release; /* 0: no limit */
	unsigned int released, young, busy;
	int err;		  /* the first real failure */
	char msg[FV_MESSAGE_MAX]; /* and its message */
};

/* A failure of one volume's release: in use is no failure of ours, anything else is kept. */
static void gc_failed(struct fv_ctx *cx, struct gc_run *g, const char *key, int r)
{
	const char *m = fv_ctx_message(cx)[0] ? fv_ctx_message(cx) : strerror(-r);

	if (r == -EBUSY || r == -FV_ERR_CONFLICT) {
		fv_log("gc: leaving '%s': %s", key, m);
		g->busy++;
	} else {
		fv_log("gc: cannot release '%s': %s", key, m);
		if (g->err == 0) {
			g->err = r;
			snprintf(g->msg, sizeof(g->msg), "cannot release '%s': %s", key, m);
		}
	}
	fv_ctx_reset_message(cx);
}

/*
 * Is the device a record names in use anywhere on the node?  A cache's
 * word only (the number may have been reused since): in use keeps the
 * volume, never the other way round - the backend's release asks the
 * kernel about its own device again.
 */
static bool record_device_busy(json_object *rec)
{
	json_object *d;

	return rec && json_object_object_get_ex(rec, "device", &d) &&
	       json_object_is_type(d, json_type_string) &&
	       fv_blk_busy(json_object_get_string(d)) != 0;
}

/*
 * Is @rec a volume record of this class (save_record())?  A backend may keep
 * records of its own in the same directory; they are none of the collector's.
 * Records of versions before the "blkvol" mark have a "device" and no "key".
 */
static bool class_record(json_object *rec)
{
	json_object *x;

	if (json_object_object_get_ex(rec, "blkvol", &x))
		return json_object_get_boolean(x);
	return !json_object_object_get_ex(rec, "key", &x) &&
	       json_object_object_get_ex(rec, "device", &x);
}

/*
 * One volume: released when its lock is free, its record (if any) is older
 * than the grace, and nothing uses it (the kernel says so; the backend's
 * release refuses a mounted device, node_teardown() a device mount with a
 * pod on it).  Keys: a trusted name (controller mode), "?<hint>" (a
 * waitforattach nobody followed up: locked as the name it hints), or a
 * node-mode "<name>@<ident>".
 */
static int gc_key(struct fv_ctx *cx, const char *key, void *arg)
{
	struct gc_run *g = arg;
	bool hinted = key[0] == '?';
	const char *name = hinted ? key + 1 : key;
	unsigned int age = UINT_MAX;
	char lockname[PATH_MAX + 64];
	json_object *rec = NULL;
	int lock, r;

	if (g->max_release && g->released >= g->max_release)
		return 0;
	if (!*name)
		return 0;
	snprintf(lockname, sizeof(lockname), "%s-vol-%s", cx->drv->name, name);
	lock = fv_lock_try(cx, lockname);
	if (lock == -EWOULDBLOCK) {
		g->busy++; /* an op on it is running */
		return 0;
	}
	if (lock < 0) {
		gc_failed(cx, g, key, lock);
		return 0;
	}
	if (fv_state_read(cx, key, &rec) != 0)
		rec = NULL; /* no record (state wiped): the kernel alone decides */
	if (rec && !class_record(rec))
		goto out;
	if (fv_state_age(cx, key, &age) == 0 && age < cx->cfg.gc_grace) {
		g->young++;
		goto out;
	}
	if (!hinted) {
		/* a fresh waitforattach of this name: kubelet is on its way to mountdevice */
		char hkey[PATH_MAX];

		hinted_key(name, hkey, sizeof(hkey));
		if (fv_state_age(cx, hkey, &age) == 0 && age < cx->cfg.gc_grace) {
			g->young++;
			goto out;
		}
	}
	if (!hinted && fv_blkvol_node_mode(cx)) {
		char path[PATH_MAX];

		r = node_gmp(cx, key, path, sizeof(path));
		if (r == 0)
			r = node_teardown(cx, key, path, 0);
	} else if (record_device_busy(rec)) {
		r = fv_fail(cx, -EBUSY, "its device is in use");
	} else {
		r = hinted ? release_record(cx, name, key, 0) : release_volume(cx, name, 0);
	}
	if (r < 0)
		gc_failed(cx, g, key, r);
	else
		g->released++;
out:
	json_object_put(rec);
	fv_unlock(lock);
	return 0;
}

/* A pass over the node-mode device mounts and the records; @max_look > 0 bounds the records looked at. */
static void gc_pass(struct fv_ctx *cx, struct gc_run *g, unsigned int max_look)
{
	int r;

	if (fv_blkvol_node_mode(cx)) {
		r = node_each(cx, NULL, gc_key, g);
		if (r < 0)
			gc_failed(cx, g, "device mounts", r);
	}
	r = fv_state_each(cx, max_look, gc_key, g);
	if (r < 0)
		gc_failed(cx, g, "records", fv_fail(cx, r, "cannot read the state records: %s",
						    strerror(-r)));
}

int fv_blkvol_op_gc(struct fv_ctx *cx)
{
	struct gc_run g = { 0 };
	char lockname[64];
	int lock;

	snprintf(lockname, sizeof(lockname), "%s-gc", cx->drv->name);
	lock = fv_lock(cx, lockname); /* one collector per driver at a time */
	if (lock < 0)
		return lock;
	gc_pass(cx, &g, 0);
	fv_unlock(lock);
	if (g.released || g.err)
		fv_log("gc: %u released, %u in use, %u younger than %u s", g.released, g.busy,
		       g.young, cx->cfg.gc_grace);
	return g.err ? fv_fail(cx, g.err, "%s", g.msg) : 0;
}

#define GC_MAYBE_LOOK 16 /* records an opportunistic pass looks at */

void fv_blkvol_gc_maybe(struct fv_ctx *cx)
{
	struct gc_run g = { .max_release = 1 };
	char dir[PATH_MAX], stamp[PATH_MAX + 16], lockname[64];
	char msg[FV_MESSAGE_MAX], detail[FV_MESSAGE_MAX];
	struct timespec now;
	struct stat st;
	int lock, fd;

	if (!cx->config_ok || cx->cfg.gc_interval == 0)
		return;
	if (snprintf(dir, sizeof(dir), "%s/%s", cx->cfg.run_dir, cx->drv->name) >= (int)sizeof(dir))
		return;
	snprintf(stamp, sizeof(stamp), "%s/gc.stamp", dir);
	/* the common case: one stat() */
	clock_gettime(CLOCK_REALTIME, &now);
	if (stat(stamp, &st) == 0 && now.tv_sec >= st.st_mtim.tv_sec &&
	    now.tv_sec - st.st_mtim.tv_sec < (time_t)cx->cfg.gc_interval)
		return;
	snprintf(msg, sizeof(msg), "%s", cx->message);
	snprintf(detail, sizeof(detail), "%s", cx->detail);
	fv_ctx_reset_message(cx); /* the pass's own failures are logged, never replied */
	snprintf(lockname, sizeof(lockname), "%s-gc", cx->drv->name);
	lock = fv_lock_try(cx, lockname);
	if (lock < 0)
		goto out; /* another collector runs */
	if (fv_mkdir_p(dir, 0700) == 0 &&
	    (fd = open(stamp, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) >= 0) {
		(void)futimens(fd, NULL);
		close(fd);
		gc_pass(cx, &g, GC_MAYBE_LOOK);
		if (g.released || g.err)
			fv_log("gc (opportunistic): %u released", g.released);
	}
	fv_unlock(lock);
out:
	snprintf(cx->message, sizeof(cx->message), "%s", msg);
	snprintf(cx->detail, sizeof(cx->detail), "%s", detail);
}
