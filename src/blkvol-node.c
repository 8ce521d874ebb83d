/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block-volume class in node mode (fv/blkvol.h; docs/design.md, "Two
 * attach modes"): mount and unmount do the whole node-side work, the device
 * mount shared by the pods of a volume under <run>/<driver>/mounts/.
 */
#include <dirent.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#include "internal.h"
#include "blkvol-internal.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/util.h"

/*
 * A node-mode key, "<name>@<ident>" (node_vkey()): each part a file name of
 * less than NODE_KEY_PART_MAX bytes, so that the whole key is one file name
 * too (at most NAME_MAX: a state record's, a lock's).
 */
#define NODE_KEY_PART_MAX 100
#define NODE_KEY_MAX (NAME_MAX + 1)

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
	char a[NODE_KEY_PART_MAX], b[NODE_KEY_PART_MAX];

	if (fv_name_key(name, a, sizeof(a)) < 0 || fv_name_key(ident, b, sizeof(b)) < 0)
		return fv_fail(cx, -EINVAL, "volume name '%s' cannot be a file name", name);
	if (snprintf(buf, len, "%s@%s", a, b) >= (int)len)
		return fv_fail(cx, -ENAMETOOLONG, "volume key '%s@%s' is too long", a, b);
	return 0;
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
int fv_blkvol_node_device_dir(struct fv_ctx *cx, const char *vkey, char *buf, size_t len)
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
int fv_blkvol_node_teardown(struct fv_ctx *cx, const char *vkey, const char *path, dev_t was_devno)
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
		char ident[PATH_MAX];

		/* only ever a device of ours: never a filesystem someone put here */
		r = blkvol_ops(cx)->ident_of(cx, mi.devno, ident, sizeof(ident));
		if (r != 0)
			return r < 0 ? r : fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds '%s', "
						   "not a device of this driver; leaving it",
						   path, mi.source);
		r = fv_blkvol_unmount_and_release(cx, vkey, &gd, NULL, true, false);
		if (r != 0)
			return r < 0 ? r : 0; /* 1: other pods on this node still use it */
		goto remove_dirs;
	} else if (was_devno) {
		int n = fv_mnt_count_devno(was_devno);

		if (n < 0) /* unreadable is not "unused" */
			return fv_fail(cx, n, "cannot read the mount table: %s", strerror(-n));
		if (n == 0)
			devno = was_devno; /* the device mount went before (a killed earlier call) */
	}
	r = fv_blkvol_release_volume(cx, vkey, devno);
	if (r < 0 || !exists)
		return r;
remove_dirs:
	(void)rmdir(path);
	snprintf(parent, sizeof(parent), "%s", path);
	*strrchr(parent, '/') = '\0';
	(void)rmdir(parent); /* the last volume of this pod dir name (ENOTEMPTY otherwise) */
	return 0;
}

/* Lock volume @vkey and take its device mount down if no pod uses it (fv_blkvol_node_teardown()). */
static int node_teardown_locked(struct fv_ctx *cx, const char *vkey, dev_t was_devno)
{
	char path[PATH_MAX];
	int lock, r = fv_blkvol_node_device_dir(cx, vkey, path, sizeof(path));

	if (r < 0)
		return r;
	lock = fv_blkvol_lock_volume(cx, vkey);
	if (lock < 0)
		return lock;
	r = fv_blkvol_node_teardown(cx, vkey, path, was_devno);
	fv_unlock(lock);
	return r;
}

/* Is the directory @path (ours, under the run dir) a mount point? */
static bool is_mount_point(const char *path)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };

	return fv_dir_open_quiet(path, &d) == 0 && fv_dir_mounted(&d, NULL) == 0;
}

/* Has pod dir name @name a device mount of a version before node mode keys (fv_blkvol_node_device_dir())? */
static bool node_legacy(struct fv_ctx *cx, const char *name)
{
	char path[PATH_MAX];

	return fv_blkvol_node_device_dir(cx, name, path, sizeof(path)) == 0 && is_mount_point(path);
}

/*
 * The key of the volume of pod dir name @name whose backend object is
 * @ident (NULL: the ident() of the options' volume @v): @name alone while
 * an older version's device mount of it stands, until its last pod goes
 * (node_legacy()); else node_vkey().
 */
static int node_key(struct fv_ctx *cx, const char *name, const void *v, const char *ident,
		    char *buf, size_t len)
{
	char own[PATH_MAX];
	int r;

	if (node_legacy(cx, name) && strlen(name) < len) {
		snprintf(buf, len, "%s", name);
		return 0;
	}
	if (!ident) {
		r = blkvol_ops(cx)->ident(cx, v, own, sizeof(own));
		if (r < 0)
			return r;
		ident = own;
	}
	return node_vkey(cx, name, ident, buf, len);
}

/*
 * Lock the volume of pod dir name @name (node_key(), @v and @ident as
 * there): its key into @vkey, its device mount directory into @path.
 * Returns the lock (release it with fv_unlock()) or <0.
 */
static int node_lock(struct fv_ctx *cx, const char *name, const void *v, const char *ident,
		     char *vkey, size_t vlen, char *path, size_t plen)
{
	int r = node_key(cx, name, v, ident, vkey, vlen);

	if (r == 0)
		r = fv_blkvol_node_device_dir(cx, vkey, path, plen);
	return r < 0 ? r : fv_blkvol_lock_volume(cx, vkey);
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
	char dir[PATH_MAX], vkey[NODE_KEY_MAX];
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
int fv_blkvol_node_each(struct fv_ctx *cx, const char *name,
		     int (*fn)(struct fv_ctx *cx, const char *vkey, void *arg), void *arg)
{
	char top[PATH_MAX], a[NODE_KEY_PART_MAX];
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
int fv_blkvol_node_unmount(struct fv_ctx *cx, const char *dir)
{
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };
	char ident[PATH_MAX], vkey[NODE_KEY_MAX];
	struct fv_mntinfo mi, was;
	int lock, r = fv_dir_arg(cx, dir, 0, &pd);

	if (r < 0)
		return r;
	if (r == 0 && fv_dir_mounted(&pd, &mi) == 0) {
		r = blkvol_ops(cx)->ident_of(cx, mi.devno, ident, sizeof(ident));
		if (r < 0)
			return r;
		if (r == 0) {
			char path[PATH_MAX];

			lock = node_lock(cx, fv_path_last(dir), NULL, ident, vkey, sizeof(vkey), path,
					 sizeof(path));
			if (lock < 0)
				return lock;
			r = fv_blkvol_unmount(cx, dir, &was);
			if (r == 0)
				r = fv_blkvol_node_teardown(cx, vkey, path, was.devno);
			fv_unlock(lock);
			return r;
		}
	}
	r = fv_blkvol_unmount(cx, dir, NULL);
	if (r < 0)
		return r;
	return fv_blkvol_node_each(cx, fv_path_last(dir), teardown_fn, NULL);
}

/*
 * Node mode, mount <poddir> <json>: the whole node-side work, the first pod
 * attaching and mounting the device once per node, every pod binding it.
 * The volume lock makes parallel mounts and unmounts of one volume's pods
 * (contract §4.3) take turns on the shared part.
 */
int fv_blkvol_node_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o)
{
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	const char *name = fv_path_last(dir);
	char path[PATH_MAX], dev[PATH_MAX], vkey[NODE_KEY_MAX];
	struct fv_mntinfo mi;
	int lock, r = fv_blkvol_parse(cx, o, &v);

	if (r < 0)
		return r;
	lock = node_lock(cx, name, v, NULL, vkey, sizeof(vkey), path, sizeof(path));
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
		r = blkvol_ops(cx)->find(cx, v, dev, sizeof(dev));
		if (r >= 0)
			r = fv_blkvol_require_named_device(cx, name, r, dev, &mi);
		if (r < 0)
			goto out;
		/* read-only pods came first: the first read-write pod makes it writable */
		if (mi.readonly && !o->readonly) {
			r = fv_blkvol_writable(cx, &gd);
			if (r < 0)
				goto out;
		}
	} else {
		r = fv_blkvol_attach_and_mount(cx, v, o, vkey, &gd, NULL);
		if (r < 0)
			goto undo;
	}
	r = fv_blkvol_bind(cx, dir, path, o->readonly, false);
	if (r == 0)
		goto out;
undo:
	/*
	 * kubelet removes the dir of a failed mount and never unmounts it: what
	 * this call set up and no pod uses goes again (the message stays ours).
	 */
	{
		struct fv_saved_message saved;

		fv_ctx_save_message(cx, &saved);
		(void)fv_blkvol_node_teardown(cx, vkey, path, 0);
		fv_ctx_restore_message(cx, &saved, false);
	}
out:
	fv_unlock(lock);
	return r;
}
