/* SPDX-License-Identifier: Apache-2.0 */
/* Shared node-side steps of attachable block-volume drivers (fv/blkvol.h). */
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/log.h"
#include "fv/mountutil.h"

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

int fv_blkvol_bind(struct fv_ctx *cx, const char *dir, const char *dev, bool ro)
{
	_cleanup_(fv_dir_closep) struct fv_dir pd = { .parent = -1 }, gd = { .parent = -1 };
	char gmp[PATH_MAX];
	struct fv_mntinfo mi;
	int r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &pd);

	if (r < 0)
		return r;
	r = fv_dir_mounted(&pd, &mi);
	if (r < 0)
		return fv_fail(cx, r, "cannot tell whether '%s' is mounted: %s", pd.path,
			       strerror(-r));
	if (r == 0) {
		if (mount_is_dev(&mi, dev))
			return 0;
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s'", pd.path,
			       mi.source);
	}
	/*
	 * The source: kubelet's global path for this pod dir when it holds the
	 * whole filesystem of @dev, else the first whole-fs mount of @dev.
	 * Either is opened literally and checked again by descriptor.
	 */
	if (!fv_kubelet_global_path(pd.path, gmp, sizeof(gmp)) ||
	    fv_dir_open_quiet(gmp, &gd) < 0 || fv_dir_mounted(&gd, &mi) != 0 ||
	    !mount_is_dev(&mi, dev) || !streq(mi.root, "/")) {
		fv_dir_close(&gd);
		r = fv_mnt_find_source(dev, pd.path, gmp, sizeof(gmp));
		if (r != 0)
			return fv_fail(cx, -ENXIO, "%s is not mounted on this node (mountdevice first)",
				       dev);
		r = fv_dir_arg(cx, gmp, FV_DIRARG_MUST_EXIST, &gd);
		if (r < 0)
			return r;
		if (fv_dir_mounted(&gd, &mi) != 0 || !mount_is_dev(&mi, dev))
			return fv_fail(cx, -ENXIO, "%s is not mounted at '%s' any more", dev, gmp);
	}
	return fv_dir_bind(cx, &gd, &pd, ro);
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
