/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the nfs driver (drivers/nfs/nfs.c) offers programs other than
 * kubelet: flexvol-provisioner checks the options a PV will carry with it.
 */
#ifndef FV_NFS_H
#define FV_NFS_H

struct fv_ctx;
struct fv_opts;

/*
 * fv_nfs_check_options() - the checks the nfs driver's mount applies to its
 * options (server, share, subPath, nfsVersion, mountOptions, readonly), so
 * that a class the driver would refuse fails at provisioning, with the
 * driver's own message in @cx.
 * Returns: 0, or <0 with the message set (fv/ctx.h).
 */
int fv_nfs_check_options(struct fv_ctx *cx, const struct fv_opts *o);

#endif
