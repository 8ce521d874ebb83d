/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block class's pod mounts (fv/blkvol.h): a pod's bind of the volume's
 * device mount and its undo, for kubelet's mount and unmount (the device
 * mount found by kubelet's layout) and CSI's publish and unpublish (the
 * device mount named), and owns(): is a mount one the class made for a
 * volume.  Node mode's mount and unmount are blkvol-node.c's.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/mountutil.h"
#include "fv/state.h"
#include "fv/util.h"
#include "blkvol-internal.h"

int fv_blkvol_bind(struct fv_ctx *cx, const char *dir, const char *src, bool ro, bool strict)
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
		if (mi.devno != smi.devno)
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s'",
				       pd.path, mi.source);
		/*
		 * Bound already: Success only in the mode asked.  A
		 * writable bind of a read-only pod (a killed two-step mount of an
		 * older version, an operator) is made read-only - kubelet never
		 * calls mount again for a dir that is a mount point; a read-only
		 * bind of a read-write pod would fail every write later.
		 */
		if (strict && ro != mi.readonly)
			return fv_fail(cx, -EEXIST, "'%s' is published %s already; this publish "
				       "asks for %s", pd.path, mi.readonly ? "read-only" : "read-write",
				       ro ? "read-only" : "read-write");
		if (ro && !mi.readonly)
			return fv_dir_make_ro(cx, &pd);
		if (!ro && mi.readonly)
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted read-only, "
				       "and this pod asks for read-write; unmount it first",
				       pd.path);
		return 0;
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

/*
 * Volume @name is mounted on this node (@mi): the options must name that
 * very device (@found and @dev are the backend's find() answer), or no pod
 * of theirs gets it.
 */
int fv_blkvol_require_named_device(struct fv_ctx *cx, const char *name, int found, const char *dev,
				const struct fv_mntinfo *mi)
{
	struct stat st;

	if (found == 0 && stat(dev, &st) == 0 && st.st_rdev == mi->devno)
		return 0;
	return fv_fail(cx, -FV_ERR_CONFLICT, "volume '%s' is mounted on this node from '%s', "
		       "which is not the device these options name", name, mi->source);
}

/*
 * The pod bind at @dir from the device mount @gmp (the last component of
 * which names the volume): the device mounted there must be the one the
 * options name (@found and @dev are the backend's find() answer; @dev NULL:
 * the options name no device), or no pod of theirs gets it.
 */
static int bind_from(struct fv_ctx *cx, const char *dir, const char *gmp, int found,
		     const char *dev, const struct fv_opts *o, bool strict)
{
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	const char *name = fv_path_last(gmp);
	struct fv_mntinfo mi;
	int r;

	/* the device mount is this volume's; the options must name the device mounted there */
	if (fv_dir_open_quiet(gmp, &gd) == 0 && fv_dir_mounted(&gd, &mi) == 0) {
		r = dev ? fv_blkvol_require_named_device(cx, name, found, dev, &mi) : 0;
		if (r < 0)
			return r;
		/*
		 * Read-only pods came first (mountdevice ran with their
		 * options; kubelet skips it for a mounted path): the first
		 * read-write pod makes the device mount writable, under the
		 * volume lock that mountdevice and unmountdevice take.
		 */
		if (mi.readonly && !o->readonly) {
			int lock = fv_blkvol_lock_volume(cx, name);

			if (lock < 0)
				return lock;
			r = fv_dir_mounted(&gd, &mi);
			if (r == 0 && mi.readonly)
				r = fv_blkvol_writable(cx, &gd);
			fv_unlock(lock);
			if (r < 0)
				return r;
		}
	}
	return fv_blkvol_bind(cx, dir, gmp, o->readonly, strict);
}

/*
 * The options parsed with the same validation as every op, and the backend
 * object they name looked at (a hostile image file is refused here): find()'s
 * answer, with the device in @dev.
 */
static int find_named(struct fv_ctx *cx, const struct fv_opts *o, char *dev, size_t len)
{
	_cleanup_(fv_blkvol_vol_freep) void *v = NULL;
	int r = fv_blkvol_parse(cx, o, &v);

	return r < 0 ? r : blkvol_ops(cx)->find(cx, v, dev, len);
}

int fv_blkvol_op_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o)
{
	char path[PATH_MAX], dev[PATH_MAX];
	int found;

	if (fv_blkvol_node_mode(cx))
		return fv_blkvol_node_mount(cx, dir, o);
	found = find_named(cx, o, dev, sizeof(dev));
	if (found < 0)
		return found;
	/*
	 * The pod dir names the volume; its global path holds the device that
	 * mountdevice claimed for it.  The options name no device here.
	 */
	if (!fv_blkvol_kubelet_path(dir, path, sizeof(path))) {
		_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 };
		int r;

		/* a missing or non-directory pod dir says so first */
		r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &pd);
		if (r < 0)
			return r;
		return fv_fail(cx, -EINVAL, "'%s' is not a kubelet pod volume directory "
			       "(<root>/pods/<uid>/volumes/<vendor>~<driver>/<name>)", dir);
	}
	return bind_from(cx, dir, path, found, dev, o, false);
}

int fv_blkvol_op_unmount(struct fv_ctx *cx, const char *dir)
{
	if (fv_blkvol_node_mode(cx))
		return fv_blkvol_node_unmount(cx, dir);
	return fv_blkvol_unmount(cx, dir, NULL);
}

/*
 * Whatever the attach mode: the device mount is named, staged by
 * mountdevice.  The volume context is optional in CSI's publish: options
 * without a key of the volume's name no device, and are not checked.
 */
int fv_blkvol_op_publish(struct fv_ctx *cx, const char *dir, const char *staged,
			 const struct fv_opts *o)
{
	char dev[PATH_MAX];
	bool named = false;
	int found;

	if (!staged)
		return fv_fail(cx, -EINVAL, "no device mount named for the publish of '%s'", dir);
	if (o->block)
		return fv_blkvol_publish_block(cx, dir, staged, o);
	found = fv_blkvol_staged_as_block(cx, staged, "publish", -FV_ERR_CONFLICT);
	if (found < 0)
		return found;
	for (size_t i = 0; i < o->n && !named; i++)
		named = strncmp(o->pairs[i].key, "kubernetes.io/", 14) != 0;
	found = 1;
	if (named)
		found = find_named(cx, o, dev, sizeof(dev));
	return found < 0 ? found : bind_from(cx, dir, staged, found, named ? dev : NULL, o, true);
}

int fv_blkvol_op_unpublish(struct fv_ctx *cx, const char *dir, const char *name)
{
	int r = fv_blkvol_unpublish_block(cx, dir); /* a target that is a file: raw block */

	return r != 1 ? r : fv_blkvol_unmount(cx, dir, NULL);
}

struct named_mount {
	dev_t devno;
	const char *name;
	bool found;
};

static bool named_mount_fn(const struct fv_mntline *m, void *arg)
{
	struct named_mount *a = arg;

	a->found = m->devno == a->devno && streq(m->root, "/") &&
		   streq(fv_path_last(m->target), a->name);
	return a->found;
}

int fv_blkvol_owns(struct fv_ctx *cx, const char *name, const char *path,
		   const struct fv_mntinfo *mi)
{
	const struct fv_blkvol_ops *ops = blkvol_ops(cx);
	struct named_mount a = { mi->devno, name, false };
	json_object *rec = NULL, *d;
	char ident[PATH_MAX];
	struct stat st;
	dev_t rdev;
	int r;

	/* a raw block volume's mount: a bind of its device's node */
	if (fv_mnt_node_devno(mi, &rdev) == 0)
		return fv_blkvol_owns_node(cx, name, rdev);
	r = fv_state_read(cx, name, &rec);
	if (r == 0) {
		/* the device number it recorded; else (an older record) its node's, while it is there */
		if (json_object_object_get_ex(rec, "rdev", &d) && json_object_is_type(d, json_type_int))
			r = (dev_t)json_object_get_int64(d) == mi->devno ? 1 : 0;
		else if (json_object_object_get_ex(rec, "device", &d) &&
			 json_object_is_type(d, json_type_string) &&
			 stat(json_object_get_string(d), &st) == 0)
			r = S_ISBLK(st.st_mode) && st.st_rdev == mi->devno ? 1 : 0;
		else
			r = -ENOENT; /* the device node is gone: the kernel's word below */
		json_object_put(rec);
		if (r >= 0)
			return r;
	}
	if (r < 0 && r != -ENOENT)
		return r;
	r = fv_mnt_each(named_mount_fn, &a);
	if (r < 0 || !a.found)
		return r < 0 ? r : 0;
	r = ops->ident_of ? ops->ident_of(cx, mi->devno, ident, sizeof(ident)) : 1;
	return r < 0 ? r : r == 0;
}
