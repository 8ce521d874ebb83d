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

int fv_blkvol_mountdevice(struct fv_ctx *cx, const char *gmp, const char *dev,
			  const char *fstype, const char *default_fstype, bool ro)
{
	struct fv_mntinfo mi;
	char have[64];
	const char *use;
	int r = fv_mnt_find(gmp, &mi);

	if (r < 0)
		return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
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
	r = fv_blk_probe(cx, dev, have, sizeof(have));
	if (r < 0)
		return r;
	if (r == 1) {
		use = fstype ? fstype : default_fstype;
		if (ro)
			return fv_fail(cx, -FV_ERR_NOTBLANK,
				       "%s is blank and the volume is read-only: nothing to mount", dev);
		r = fv_fs_make(cx, dev, use);
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
	return fv_mnt_mount(cx, dev, gmp, use, ro ? "ro" : "rw", false);
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
	char poddir[PATH_MAX], gmp[PATH_MAX];
	struct fv_mntinfo mi;
	int r = fv_prepare_dir(cx, dir, poddir, sizeof(poddir));

	if (r < 0)
		return r;
	if (fv_mnt_find(poddir, &mi) == 0) {
		if (mount_is_dev(&mi, dev))
			return 0;
		return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s'", poddir,
			       mi.source);
	}
	if (!fv_kubelet_global_path(poddir, gmp, sizeof(gmp)) || fv_mnt_find(gmp, &mi) != 0 ||
	    !mount_is_dev(&mi, dev) || !streq(mi.root, "/")) {
		r = fv_mnt_find_source(dev, poddir, gmp, sizeof(gmp));
		if (r != 0)
			return fv_fail(cx, -ENXIO, "%s is not mounted on this node (mountdevice first)",
				       dev);
	}
	return fv_mnt_mount(cx, gmp, poddir, NULL, ro ? "bind,ro" : "bind", false);
}

int fv_blkvol_unmount(struct fv_ctx *cx, const char *dir, struct fv_mntinfo *ret)
{
	char path[PATH_MAX];
	int r = fv_canonical_dir(dir, path, sizeof(path));

	if (ret)
		memset(ret, 0, sizeof(*ret));
	if (r == 1)
		return 0; /* nothing there: nothing mounted */
	if (r < 0)
		return fv_fail(cx, r, "cannot resolve '%s': %s", dir, strerror(-r));
	if (ret && fv_mnt_find(path, ret) != 0)
		memset(ret, 0, sizeof(*ret));
	r = fv_mnt_umount_all(cx, path, false);
	if (r < 0)
		return r;
	r = fv_dir_is_empty(path);
	if (r == 0)
		return fv_fail(cx, -ENOTEMPTY, "'%s' is not empty after unmount", path);
	return r < 0 ? fv_fail(cx, r, "cannot read '%s': %s", path, strerror(-r)) : 0;
}
