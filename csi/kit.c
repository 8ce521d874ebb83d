/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kit the CSI service files share (csi.h): the opening steps of a call,
 * the one mapping of the op layer's errors to gRPC codes, the capability
 * check against the profile, a call's options as key/value pairs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csi.h"
#include "fv/blkutil.h"
#include "fv/config.h"
#include "fv/lock.h"
#include "fv/op.h"
#include "fv/ownerdir.h"
#include "fv/util.h"

typedef Csi__V1__VolumeCapability__AccessMode__Mode access_mode;

int csi_need(struct grpc_call *call, bool present, const char *what)
{
	if (present)
		return 0;
	return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "%s %s required", what,
			  strstr(what, " and ") ? "are" : "is");
}

/*
 * A volume ID we take as a volume name: one path component of PV-name
 * characters.  Anything else is no volume of ours.
 */
bool csi_volume_id_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || streq(s, ".") || streq(s, ".."))
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

int csi_no_volume(struct grpc_call *call, const char *id)
{
	return -grpc_fail(call, GRPC_NOT_FOUND, "no %s volume has the ID '%s'",
			  csi_plugin.drv->name, id);
}

int csi_open(struct grpc_call *call, struct fv_ctx *cx, const char *id)
{
	char err[FV_CONFIG_ERR_MAX];

	if (id && !csi_volume_id_ok(id))
		return csi_no_volume(call, id);
	memset(cx, 0, sizeof(*cx));
	cx->drv = csi_plugin.drv;
	if (fv_config_load(&cx->cfg, cx->drv->name, err, sizeof(err)) < 0)
		return -grpc_fail(call, GRPC_FAILED_PRECONDITION, "node configuration: %s", err);
	cx->config_ok = true;
	return 0;
}

enum grpc_code csi_code_of(int r)
{
	switch (-r) {
	case FV_ERR_BADOPT:
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
	case ENOTDIR:
		return GRPC_INVALID_ARGUMENT;
	case ENOENT:
		return GRPC_NOT_FOUND;
	case FV_ERR_TIMEOUT:
	case ETIMEDOUT:
		return GRPC_DEADLINE_EXCEEDED;
	case ENOSPC:
	case EDQUOT:
		return GRPC_RESOURCE_EXHAUSTED;
	case EFBIG:
		return GRPC_OUT_OF_RANGE; /* larger than the filesystem's largest file */
	case EOPNOTSUPP:
		return GRPC_UNIMPLEMENTED;
	case EEXIST:
		return GRPC_ALREADY_EXISTS; /* a name taken by another volume */
	case FV_ERR_CONFLICT:
	case FV_ERR_NOTBLANK:
	case EBUSY:
	case ENXIO:
	case ENOTEMPTY:
	case EPERM:
	case EAGAIN:
	case EBADMSG:
	case FV_OWNERDIR_E_UNOWNED:
	case FV_OWNERDIR_E_OWNED:
	case FV_OWNERDIR_E_NESTED:
	case FV_OWNERDIR_E_HOLDS:
		return GRPC_FAILED_PRECONDITION;
	default:
		return GRPC_INTERNAL;
	}
}

int csi_fail_with(struct grpc_call *call, int r, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	grpc_fail(call, csi_code_of(r), "%s", msg);
	return r;
}

int csi_fail(struct grpc_call *call, struct fv_ctx *cx, int r, const char *what)
{
	enum grpc_code code = csi_code_of(r);

	if (cx && cx->message[0])
		grpc_fail(call, code, "%s: %s%s%s", what, cx->message, cx->detail[0] ? ": " : "",
			  cx->detail);
	else
		grpc_fail(call, code, "%s: %s", what, fv_op_errstr(r));
	return r;
}

/*
 * A capability we serve: a filesystem, or a raw block device where the
 * profile has them (a staged driver of the block class: no filesystem to
 * choose), no mount flags (the op layer takes its mount options from the
 * node config), a mode of the profile's, and for staged filesystems one the
 * op layer makes and mounts (what NodeStageVolume will take; a driver
 * mounting its volumes itself, an NFS share, has no filesystem of its own
 * to choose).
 */
bool csi_capability_served(const Csi__V1__VolumeCapability *cap, char *why, size_t len)
{
	access_mode m = cap->access_mode ? cap->access_mode->mode : 0;
	bool block = cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;

	if (block && !csi_plugin.block)
		snprintf(why, len, "raw block volumes are not served for %s volumes (access type "
			 "mount only)", csi_plugin.drv->name);
	else if (!block && cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT)
		snprintf(why, len, "an access type (mount%s) is required",
			 csi_plugin.block ? " or block" : "");
	else if (!block && cap->mount->n_mount_flags)
		snprintf(why, len, "mount flags are not accepted (the node config sets mount options)");
	else if (m <= 0 || m >= 32 || !(csi_plugin.modes & CSI_MODE(m)))
		snprintf(why, len, "access mode %d is not served (%s)", (int)m,
			 csi_plugin.mounts ? "every mode but the multi-node single-writer one"
					   : "single node modes only");
	else if (!block && csi_plugin.stages && *cap->mount->fs_type &&
		 !fv_fs_supported(cap->mount->fs_type))
		snprintf(why, len, "fsType '%s' is not served (ext2, ext3, ext4, xfs)",
			 cap->mount->fs_type);
	else
		return true;
	return false;
}

int csi_check_capability(struct grpc_call *call, const Csi__V1__VolumeCapability *cap,
			 const char **fstype, bool *ro)
{
	char why[256];

	if (!csi_capability_served(cap, why, sizeof(why)))
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "%s", why);
	*ro = (csi_plugin.ro_modes & CSI_MODE(cap->access_mode->mode)) != 0;
	*fstype = csi_is_block(cap) ? NULL : cap->mount->fs_type;
	return 0;
}

int csi_opts(struct grpc_call *call, struct fv_ctx *cx, const char *id, const char *fstype,
	     bool ro, struct csi_map ctx, struct csi_map secrets, struct fv_opts *o)
{
	struct fv_opt_pair *pairs = calloc(ctx.n + 3 + secrets.n, sizeof(*pairs));
	size_t k = 0;
	int r;

	if (!pairs)
		return -grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
	for (size_t i = 0; i < ctx.n; i++) {
		/*
		 * kubelet's keys in a FlexVolume call; in a volume context, a PV
		 * author's attempt to set what only kubelet may (the fsType and
		 * read-write of the capability, a Secret's value in clear)
		 */
		if (strncmp(ctx.map[i]->key, "kubernetes.io/", 14) == 0) {
			free(pairs);
			return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume context key '%s': "
					  "kubernetes.io/ keys are not volume attributes",
					  ctx.map[i]->key);
		}
		pairs[k++] = (struct fv_opt_pair){ ctx.map[i]->key, ctx.map[i]->value };
	}
	if (fstype && *fstype)
		pairs[k++] = (struct fv_opt_pair){ "kubernetes.io/fsType", fstype };
	pairs[k++] = (struct fv_opt_pair){ "kubernetes.io/readwrite", ro ? "ro" : "rw" };
	pairs[k++] = (struct fv_opt_pair){ "kubernetes.io/pvOrVolumeName", id };
	for (size_t i = 0; i < secrets.n; i++)
		pairs[k + i] = (struct fv_opt_pair){ secrets.map[i]->key, secrets.map[i]->value };
	r = fv_opts_set(cx, pairs, k, o);
	o->secrets = pairs + k;
	o->nsecrets = secrets.n;
	o->owned = pairs; /* fv_opts_done() frees it, failed or not */
	return r < 0 ? csi_fail(call, cx, r, "volume context") : 0;
}

int csi_lock_volume(struct grpc_call *call, struct fv_ctx *cx, const char *id, char *name,
		    size_t len)
{
	int fd;

	fv_lock_volume_name(cx, id, name, len);
	fd = fv_lock(cx, name);
	if (fd < 0)
		csi_fail(call, cx, fd, "lock");
	return fd;
}
