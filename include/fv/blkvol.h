/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node-side steps every attachable block-volume driver shares
 * (blkvol.c): format-if-blank and mount at kubelet's global path, bind
 * the global mount into pod dirs, unmount leaving the dir empty.  The
 * driver finds its device (loop binding, iSCSI LUN); these take it from
 * there.  Messages are set on failure (fv_fail).
 */
#ifndef FV_BLKVOL_H
#define FV_BLKVOL_H

#include <stdbool.h>
#include <stddef.h>

struct fv_ctx;
struct fv_mntinfo;
struct fv_dir;

/*
 * fv_blkvol_mountdevice() - mount block device @dev at the global path @gd
 * (fv_dir_arg(), must exist), read-only when @ro; the mount is made on the
 * verified directory itself (fv_dir_mount()).  Already mounted there from @dev is
 * success; mounted from anything else is -FV_ERR_CONFLICT.  The device is
 * probed with libblkid: a blank device gets @fstype (or @default_fstype)
 * unless @ro; a filesystem other than a requested @fstype is refused,
 * never reformatted.
 */
int fv_blkvol_mountdevice(struct fv_ctx *cx, const struct fv_dir *gd, const char *dev,
			  const char *fstype, const char *default_fstype, bool ro);

/*
 * fv_blkvol_bind() - bind the filesystem of @dev into the pod dir @dir
 * (taken literally, must exist: kubelet creates it), read-only when @ro.
 * The source is kubelet's global path for @dir when it holds @dev, else
 * any whole-fs mount of @dev.  Already bound from @dev is success.
 */
int fv_blkvol_bind(struct fv_ctx *cx, const char *dir, const char *dev, bool ro);

/*
 * fv_blkvol_unmount() - unmount @dir (taken literally: a symlink or magic
 * link in it is refused) completely and check it is left empty (kubelet
 * removes it with rmdir).  A missing or unmounted dir is success.  @ret (may be NULL) gets the topmost mount that was there, or
 * an empty source and devno 0 when nothing was mounted.
 */
int fv_blkvol_unmount(struct fv_ctx *cx, const char *dir, struct fv_mntinfo *ret);

/*
 * fv_kubelet_global_path() - kubelet's global mount path for the pod
 * volume dir @poddir:
 *   <root>/pods/<uid>/volumes/<vendor>~<driver>/<name>  ->
 *   <root>/plugins/kubernetes.io/flexvolume/<vendor>/<driver>/mounts/<name>
 * (docs/flexvolume-contract.md §2).  Returns false when @poddir has another shape.
 */
bool fv_kubelet_global_path(const char *poddir, char *ret, size_t len);

#endif
