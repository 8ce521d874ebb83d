/* SPDX-License-Identifier: Apache-2.0 */
/* Mount helpers on libmount; the kernel's mountinfo is the only truth (fv/mountutil.h). */
#include <dirent.h>
#include <libmount.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/util.h"

static inline void mnt_unref_tablep(struct libmnt_table **t)
{
	mnt_unref_table(*t);
}

static inline void mnt_free_contextp(struct libmnt_context **c)
{
	mnt_free_context(*c);
}

static inline void mnt_free_iterp(struct libmnt_iter **i)
{
	mnt_free_iter(*i);
}

/* The kernel's table, without utab merging: what is mounted, not what was asked. */
static int load_table(struct libmnt_table **ret)
{
	struct libmnt_table *tb = mnt_new_table();
	int r;

	if (!tb)
		return -ENOMEM;
	r = mnt_table_parse_file(tb, "/proc/self/mountinfo");
	if (r < 0) {
		mnt_unref_table(tb);
		return r;
	}
	*ret = tb;
	return 0;
}

static void fill_info(struct libmnt_fs *fs, struct fv_mntinfo *ret)
{
	const char *s;

	if (!ret)
		return;
	memset(ret, 0, sizeof(*ret));
	snprintf(ret->source, sizeof(ret->source), "%s", (s = mnt_fs_get_source(fs)) ? s : "");
	snprintf(ret->fstype, sizeof(ret->fstype), "%s", (s = mnt_fs_get_fstype(fs)) ? s : "");
	snprintf(ret->root, sizeof(ret->root), "%s", (s = mnt_fs_get_root(fs)) ? s : "/");
	snprintf(ret->vfs_options, sizeof(ret->vfs_options), "%s",
		 (s = mnt_fs_get_vfs_options(fs)) ? s : "");
	ret->devno = mnt_fs_get_devno(fs);
	ret->readonly = mnt_optstr_get_option(ret->vfs_options, "ro", NULL, NULL) == 0;
}

int fv_mnt_find(const char *target, struct fv_mntinfo *ret)
{
	_cleanup_(mnt_unref_tablep) struct libmnt_table *tb = NULL;
	struct libmnt_fs *fs;
	int r = load_table(&tb);

	if (r < 0)
		return r;
	fs = mnt_table_find_target(tb, target, MNT_ITER_BACKWARD);
	if (!fs)
		return 1;
	fill_info(fs, ret);
	return 0;
}

int fv_mnt_find_source(const char *source, const char *exclude, char *ret, size_t len)
{
	_cleanup_(mnt_unref_tablep) struct libmnt_table *tb = NULL;
	_cleanup_(mnt_free_iterp) struct libmnt_iter *it = mnt_new_iter(MNT_ITER_FORWARD);
	struct libmnt_fs *fs;
	int r = load_table(&tb);

	if (r < 0)
		return r;
	if (!it)
		return -ENOMEM;
	while (mnt_table_next_fs(tb, it, &fs) == 0) {
		const char *src = mnt_fs_get_srcpath(fs), *root = mnt_fs_get_root(fs);
		const char *tgt = mnt_fs_get_target(fs);

		if (!src || !tgt || !streq(src, source) || (root && !streq(root, "/")))
			continue;
		if (exclude && streq(tgt, exclude))
			continue;
		snprintf(ret, len, "%s", tgt);
		return 0;
	}
	return 1;
}

int fv_mnt_count_devno(dev_t devno)
{
	_cleanup_(mnt_unref_tablep) struct libmnt_table *tb = NULL;
	_cleanup_(mnt_free_iterp) struct libmnt_iter *it = mnt_new_iter(MNT_ITER_FORWARD);
	struct libmnt_fs *fs;
	int r = load_table(&tb), n = 0;

	if (r < 0)
		return r;
	if (!it)
		return -ENOMEM;
	while (mnt_table_next_fs(tb, it, &fs) == 0)
		if (mnt_fs_get_devno(fs) == devno)
			n++;
	return n;
}

_Static_assert(FV_ERR_BASE > 5999, "FV_ERR_* must not overlap libmount's MNT_ERR_* (5000..5999)");

/*
 * libmount returns its own codes (-MNT_ERR_*, 5000 and up) besides -errno:
 * translate them to the nearest errno, so that no caller mistakes one for
 * an FV_ERR_* or an errno.  The message (mnt_context_get_excode) says more.
 */
int fv_mnt_errno(int r)
{
	if (r >= 0 || r > -5000)
		return r;
	switch (-r) {
	case MNT_ERR_NOFSTAB:
	case MNT_ERR_NOSOURCE:
		return -ENOENT;
	case MNT_ERR_NOFSTYPE:
		return -ENODEV; /* no filesystem type given or found */
	case MNT_ERR_MOUNTOPT:
	case MNT_ERR_AMBIFS:
		return -EINVAL;
	case MNT_ERR_LOCK:
		return -EAGAIN;
	default:
		return -EIO; /* loop device, flags, namespaces, ...: an I/O-side failure */
	}
}

int fv_mnt_mount(struct fv_ctx *cx, const char *source, const char *target, const char *fstype,
		 const char *options, bool helpers)
{
	_cleanup_(mnt_free_contextp) struct libmnt_context *m = mnt_new_context();
	char buf[1024] = "";
	int r, ex;

	if (!m)
		return -ENOMEM;
	mnt_context_set_optsmode(m, MNT_OMODE_IGNORE); /* never consult fstab */
	mnt_context_disable_mtab(m, 1);		       /* never write utab */
	mnt_context_disable_helpers(m, !helpers);
	if (mnt_context_set_source(m, source) || mnt_context_set_target(m, target) ||
	    (fstype && mnt_context_set_fstype(m, fstype)) ||
	    (options && mnt_context_set_options(m, options)))
		return -ENOMEM;
	fv_log("mount: %s on %s type %s (%s)", source, target, fstype ? fstype : "-",
	       options ? options : "");
	r = mnt_context_mount(m);
	ex = mnt_context_get_excode(m, r, buf, sizeof(buf));
	if (ex == MNT_EX_SUCCESS)
		return 0;
	if (mnt_context_helper_executed(m))
		return fv_fail(cx, -FV_ERR_HELPER, "mount of '%s' on '%s' failed (helper status %d)",
			       source, target, mnt_context_get_helper_status(m));
	return fv_fail(cx, r > 0 ? -r : (r < 0 ? fv_mnt_errno(r) : -EIO), "mount of '%s' on '%s' failed: %s",
		       source, target, buf[0] ? buf : strerror(r > 0 ? r : EIO));
}

int fv_mnt_umount_all(struct fv_ctx *cx, const char *target, bool lazy)
{
	for (int i = 0; i < 64; i++) {
		int r = fv_mnt_find(target, NULL);

		if (r == 1)
			return 0;
		if (r < 0)
			return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
		fv_log("umount: %s", target);
		if (umount2(target, UMOUNT_NOFOLLOW) == 0 || errno == EINVAL)
			continue;
		if (errno == EBUSY && lazy && umount2(target, UMOUNT_NOFOLLOW | MNT_DETACH) == 0) {
			fv_log("umount: %s was busy, detached lazily", target);
			continue;
		}
		return fv_fail(cx, NEG_ERRNO(), "unmount of '%s' failed: %m", target);
	}
	return fv_fail(cx, -EBUSY, "'%s' is still mounted after 64 unmounts", target);
}

int fv_canonical_dir(const char *path, char *ret, size_t len)
{
	char buf[PATH_MAX];

	if (!realpath(path, buf))
		return errno == ENOENT ? 1 : NEG_ERRNO();
	if (strlen(buf) >= len)
		return -ENAMETOOLONG;
	strcpy(ret, buf);
	return 0;
}

int fv_prepare_dir(struct fv_ctx *cx, const char *path, char *ret, size_t len)
{
	struct stat st;
	int r = fv_mkdir_p(path, 0750);

	if (r < 0)
		return fv_fail(cx, r, "cannot create directory '%s': %s", path, strerror(-r));
	r = fv_canonical_dir(path, ret, len);
	if (r != 0)
		return fv_fail(cx, r < 0 ? r : -ENOENT, "cannot resolve '%s'", path);
	if (stat(ret, &st) < 0 || !S_ISDIR(st.st_mode))
		return fv_fail(cx, -ENOTDIR, "'%s' is not a directory", path);
	return 0;
}

int fv_dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int r = 1;

	if (!d)
		return errno == ENOENT ? 1 : NEG_ERRNO();
	while ((e = readdir(d)))
		if (!streq(e->d_name, ".") && !streq(e->d_name, "..")) {
			r = 0;
			break;
		}
	closedir(d);
	return r;
}
