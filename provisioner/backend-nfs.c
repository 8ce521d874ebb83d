/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The flexvol/nfs backend: one directory below --root (the share, mounted
 * into this pod by kubelet) per claim, mounted by the PV through the nfs
 * driver with subPath.  Class parameters: params.c; confined directory work:
 * dir.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "fv/ownerdir.h"
#include "events.h"
#include "fv/kubejson.h"
#include "params.h"

/* Is this class on the share this instance serves (--share)? */
static bool our_share(const struct fvp_site *s, const char *server, const char *share)
{
	size_t n;

	if (!s->share)
		return true;
	if (!server || !share)
		return false;
	n = strlen(server);
	/* "server:/path", trailing slashes on either side ignored */
	if (strncmp(s->share, server, n) || s->share[n] != ':')
		return false;
	for (const char *a = s->share + n + 1, *b = share;; a++, b++) {
		while (*a == '/' && (a[1] == '/' || !a[1]))
			a++;
		while (*b == '/' && (b[1] == '/' || !b[1]))
			b++;
		if (*a != *b)
			return false;
		if (!*a)
			return true;
	}
}

static int nfs_class_check(const struct fvp_site *s, json_object *sc, char *err, size_t errlen)
{
	struct fvp_class c;
	int r;

	r = fvp_class_parse(sc, &c, err, errlen);
	if (r < 0)
		return r;
	if (!our_share(s, c.server, c.share))
		return fvp_fail(err, errlen, 1, "class %s names %s:%s, this instance serves %s",
				 c.name, c.server, c.share, s->share);
	return 0;
}

static int nfs_prepare(const struct fvp_site *s, json_object *sc, json_object *pvc,
		       const char *pv_name, struct fvp_volume *vol, char *err, size_t errlen)
{
	json_object *options = NULL;
	char msg[FVP_ERR_MAX];
	struct fvp_class c;
	int r;

	(void)s;
	memset(vol, 0, sizeof(*vol));
	r = fvp_class_parse(sc, &c, err, errlen);
	if (r < 0)
		return r;
	r = fvp_path_expand(c.path_pattern, pvc, pv_name, vol->asset, sizeof(vol->asset), msg,
			    sizeof(msg));
	if (r == 0)
		r = fvp_pv_options(&c, vol->asset, &options, msg, sizeof(msg));
	if (r < 0)
		return fvp_fail(err, errlen, r, "StorageClass '%s': %s", c.name, msg);
	vol->flex_volume = json_object_new_object();
	if (!vol->flex_volume) {
		json_object_put(options);
		return -ENOMEM;
	}
	fv_json_set_str(vol->flex_volume, "driver", FVP_PROVISIONER);
	if (c.read_only)
		json_object_object_add(vol->flex_volume, "readOnly", json_object_new_boolean(1));
	json_object_object_add(vol->flex_volume, "options", options);
	vol->on_delete = fvp_on_delete_name(c.on_delete);
	snprintf(vol->where, sizeof(vol->where), "%s:%s/%s", c.server, c.share, vol->asset);
	return 0;
}

/* The message for a failure of fvp_dir_* on @sub; @making: fv_ownerdir_make's. */
static int dir_fail(char *err, size_t errlen, int r, const char *what, const char *sub,
		    bool making, const struct fv_owner *other, const char *inside)
{
	switch (r) {
	case -FV_OWNERDIR_E_UNOWNED:
		if (making)
			return fvp_fail(err, errlen, r,
					 "%s '%s': it exists already and has no owner record, so it "
					 "may be someone else's; not reused (remove it, or set the "
					 "class parameter adoptExisting: \"true\" to adopt such "
					 "directories)", what, sub);
		return fvp_fail(err, errlen, r,
				 "%s '%s': it has no owner record, so this provisioner did not make "
				 "it for this volume; not touched (PVs made before owner records: "
				 "--record-owners)", what, sub);
	case -FV_OWNERDIR_E_OWNED:
		return fvp_fail(err, errlen, r, "%s '%s': it is owned by claim %s (PV %s), not this one",
				 what, sub, other->claim, other->pv[0] ? other->pv : "?");
	case -FV_OWNERDIR_E_NESTED:
		return fvp_fail(err, errlen, r,
				 "%s '%s': it would be inside the directory of another volume, '%s'",
				 what, sub, inside && *inside ? inside : "?");
	case -FV_OWNERDIR_E_HOLDS:
		return fvp_fail(err, errlen, r, "%s '%s': it holds the directories of other "
				 "volumes; not adopted", what, sub);
	case -EBADMSG:
		return fvp_fail(err, errlen, r, "%s '%s': its owner record is not one of ours; not "
				 "touched", what, sub);
	case -ENOTDIR:
	case -ELOOP:
		return fvp_fail(err, errlen, r, "%s '%s': a symlink or a file is in the way "
				 "(symlinks are never followed)", what, sub);
	case -EXDEV:
		return fvp_fail(err, errlen, r, "%s '%s': another mount is in the way", what, sub);
	default:
		return fvp_fail(err, errlen, r, "%s '%s': %s", what, sub, strerror(-r));
	}
}

static int nfs_create(const struct fvp_site *s, json_object *sc, json_object *pvc,
		      const struct fvp_volume *vol, enum fvp_made *made, char *err, size_t errlen)
{
	const char *ns = fv_json_str_in(pvc, "metadata", "namespace"), *name = fv_json_str_in(pvc, "metadata", "name"),
		   *uid = fv_json_str_in(pvc, "metadata", "uid");
	struct fv_owner other;
	struct fvp_class c;
	enum fv_ownerdir_made m = FV_OWNERDIR_NEW;
	char pv[96], inside[FVP_PATH_MAX + 1] = "";
	int r;

	r = fvp_class_parse(sc, &c, err, errlen);
	if (r < 0)
		return r;
	snprintf(pv, sizeof(pv), "pvc-%s", uid ? uid : "");
	r = fv_ownerdir_make(s->rootfd, vol->asset, c.mode, c.has_uid ? c.uid : (uid_t)-1,
			 c.has_gid ? c.gid : (gid_t)-1, uid ? uid : "", pv, 0, c.adopt_existing, &m,
			 &other, inside, sizeof(inside));
	if (r < 0)
		return dir_fail(err, errlen, r, "cannot create directory", vol->asset, true, &other,
				inside);
	fvp_log_info("claim %s/%s: directory %s %s (mode %04o%s)", ns, name, vol->asset,
		 m == FV_OWNERDIR_NEW ? "created" : m == FV_OWNERDIR_OURS ? "made before for this claim, kept" :
		 "adopted", (unsigned int)(m == FV_OWNERDIR_ADOPTED ? 0 : c.mode),
		 m == FV_OWNERDIR_ADOPTED ? ", as it was" : c.has_uid || c.has_gid ? ", owner set" : "");
	*made = m == FV_OWNERDIR_NEW ? FVP_MADE_NEW : m == FV_OWNERDIR_OURS ? FVP_MADE_BEFORE :
		FVP_MADE_ADOPTED;
	if (m == FV_OWNERDIR_ADOPTED)
		fvp_fail(err, errlen, 0, "directory '%s' existed without an owner record and was "
			  "adopted (class parameter adoptExisting); its mode and owner are as they were",
			  vol->asset);
	return 0;
}

static int nfs_cleanup(const struct fvp_site *s, json_object *sc, json_object *pvc,
		       const char *pv_name, char *err, size_t errlen)
{
	const char *uid = fv_json_str_in(pvc, "metadata", "uid");
	char sub[FVP_PATH_MAX + 1];
	struct fv_owner other;
	struct fvp_class c;
	int r;

	if (fvp_class_parse(sc, &c, err, errlen) < 0)
		return 1;
	if (!our_share(s, c.server, c.share))
		return fvp_fail(err, errlen, 1, "class %s is not on this instance's share", c.name);
	if (fvp_path_expand(c.path_pattern, pvc, pv_name, sub, sizeof(sub), err, errlen) < 0)
		return 1;
	r = fv_ownerdir_remove_empty(s->rootfd, sub, uid ? uid : "", &other);
	if (r == -ENOTEMPTY)
		return fvp_fail(err, errlen, 1, "directory %s is not empty: kept", sub);
	if (r == -FV_OWNERDIR_E_UNOWNED || r == -FV_OWNERDIR_E_OWNED || r == -EBADMSG) {
		dir_fail(err, errlen, r, "directory", sub, false, &other, NULL);
		return 1;
	}
	if (r < 0)
		return fvp_fail(err, errlen, r, "directory %s not removed: %s", sub, strerror(-r));
	return fvp_fail(err, errlen, 0, "directory %s removed (if it was there and empty)", sub);
}

static int nfs_reclaim(const struct fvp_site *s, json_object *pv, const char *on_delete,
		       char *done, size_t donelen, char *err, size_t errlen)
{
	json_object *spec = fv_json_get(pv, "spec"), *opts = fvp_pv_driver_options(pv, FVP_PROVISIONER);
	const char *sub = fv_json_str(opts, "subPath"), *claim = fv_json_str_in(spec, "claimRef", "uid");
	char archived[FVP_PATH_MAX + 64] = "";
	enum fvp_on_delete action = FVP_ARCHIVE;
	struct fv_owner other;
	int r;

	if (!opts)
		return fvp_fail(err, errlen, 1, "not a %s volume", FVP_PROVISIONER);
	if (!our_share(s, fv_json_str(opts, "server"), fv_json_str(opts, "share")))
		return fvp_fail(err, errlen, 1, "not on this instance's share");
	if (!fvp_check_subpath(sub))
		return fvp_fail(err, errlen, -EINVAL,
				 "subPath '%s' is not a directory this provisioner made; not touched",
				 sub ? sub : "");
	if (!claim || !*claim)
		return fvp_fail(err, errlen, -EINVAL, "the PV has no claimRef.uid: its owner is "
				 "unknown; directory %s not touched", sub);
	if (on_delete && fvp_on_delete_parse(on_delete, &action) < 0)
		return fvp_fail(err, errlen, -EINVAL,
				 "onDelete '%s' is not archive, delete or retain; nothing done",
				 on_delete);
	switch (action) {
	case FVP_DELETE:
		r = fv_ownerdir_delete(s->rootfd, sub, claim, &other);
		break;
	case FVP_ARCHIVE:
		r = fv_ownerdir_archive(s->rootfd, sub, claim, &other, archived, sizeof(archived));
		break;
	case FVP_RETAIN:
	default:
		r = 0;
		break;
	}
	if (r < 0)
		return dir_fail(err, errlen, r, action == FVP_DELETE ? "cannot delete directory" :
				"cannot archive directory", sub, false, &other, NULL);
	snprintf(done, donelen, "directory %s %s%s", sub,
		 action == FVP_DELETE ? "deleted" : action == FVP_RETAIN ? "retained" :
		 archived[0] ? "archived as " : "already archived or absent", archived);
	return 0;
}

static int nfs_record_owner(const struct fvp_site *s, json_object *pv, char *err, size_t errlen)
{
	json_object *spec = fv_json_get(pv, "spec"), *opts = fvp_pv_driver_options(pv, FVP_PROVISIONER);
	const char *sub = fv_json_str(opts, "subPath"), *claim = fv_json_str_in(spec, "claimRef", "uid"),
		   *name = fv_json_str_in(pv, "metadata", "name");
	struct fv_owner other;
	int r;

	if (!opts || !our_share(s, fv_json_str(opts, "server"), fv_json_str(opts, "share")) || !fvp_check_subpath(sub) ||
	    !claim || !*claim || !name)
		return 0;
	r = fv_ownerdir_record(s->rootfd, sub, claim, name, &other);
	if (r == 1)
		return fvp_fail(err, errlen, 1, "owner record written for directory %s (claim %s)",
				 sub, claim);
	if (r == 0 || r == -ENOENT)
		return 0;
	return dir_fail(err, errlen, r, "cannot record the owner of directory", sub, false, &other,
			NULL);
}

const struct fvp_backend fvp_backend_nfs = {
	.name = FVP_PROVISIONER,
	.can_expand = false, /* a directory has no size to grow: see docs/provisioner.md */
	.class_check = nfs_class_check,
	.prepare = nfs_prepare,
	.create = nfs_create,
	.cleanup = nfs_cleanup,
	.reclaim = nfs_reclaim,
	.record_owner = nfs_record_owner,
};
