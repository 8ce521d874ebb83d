/* SPDX-License-Identifier: Apache-2.0 */
/*
 * StorageClass parameters of a flexvol/nfs class, the directory path pattern,
 * and the flexVolume options of a PV.  Pure functions (no I/O), unit-tested in
 * tests/unit/test-provisioner.c.
 */
#ifndef FVP_PARAMS_H
#define FVP_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "fv/macro.h"

/* The largest volume a provisioner makes: whole MiB that an off_t holds (an image's size). */
#define FVP_SIZE_MAX ((uint64_t)INT64_MAX >> 20 << 20)

/* Write a printf-style message to @err (@len bytes) and return @r: every error path of the provisioner. */
int fvp_fail(char *err, size_t len, int r, const char *fmt, ...) _printf_(4, 5);

struct json_object;

#define FVP_PROVISIONER "flexvol/nfs"
#define FVP_PATH_MAX 1024 /* the nfs driver's SHARE_MAX: subPath must fit its check */
#define FVP_ERR_MAX 512

enum fvp_on_delete { FVP_ARCHIVE, FVP_DELETE, FVP_RETAIN };

/*
 * One class, parsed and checked.  Strings are borrowed from the class's JSON
 * object and live as long as it does.
 */
struct fvp_class {
	const char *name;
	const char *server;
	const char *share;
	const char *path_pattern; /* default "${namespace}-${pvc}-${pv}" */
	enum fvp_on_delete on_delete;
	mode_t mode;		  /* default 0777 */
	bool has_uid, has_gid;
	uid_t uid;
	gid_t gid;
	const char *nfs_version;   /* or NULL */
	const char *mount_options; /* or NULL */
	bool read_only;
	const char *reclaim_policy; /* "Delete" (default) or "Retain" */
	bool adopt_existing;	    /* adoptExisting: take a directory that exists without an owner */
	bool allow_unscoped;	    /* allowUnscopedClaimValues: claim values outside ${namespace}/ */
};

/*
 * fvp_class_parse() - check a StorageClass object (the API's JSON) and fill @c.
 * Unknown parameters, bad values, and nfs options the nfs driver would refuse
 * are errors.  Returns 0, or -EINVAL with a message in @err.
 */
int fvp_class_parse(struct json_object *sc, struct fvp_class *c, char *err, size_t errlen);

const char *fvp_on_delete_name(enum fvp_on_delete d);
int fvp_on_delete_parse(const char *s, enum fvp_on_delete *ret);

/*
 * fvp_path_expand() - the class's path pattern for one claim.
 *
 * Variables: ${namespace} ${pvc} ${pv}, and the nfs-subdir-external-provisioner
 * forms ${.PVC.namespace} ${.PVC.name} ${.PVC.labels.KEY} ${.PVC.annotations.KEY}.
 * The literal text may hold [A-Za-z0-9._-] and '/' (nested directories);
 * a value may hold [A-Za-z0-9._-] only (never a '/').  Components are never
 * empty, "." or "..", at most 255 bytes; the whole path at most FVP_PATH_MAX.
 * A label or annotation the claim lacks is an error, not an empty string.
 * Returns 0 with the relative path in @out, or -EINVAL / -ENAMETOOLONG with a
 * message in @err.
 */
int fvp_path_expand(const char *pattern, struct json_object *pvc, const char *pv_name, char *out,
		    size_t outlen, char *err, size_t errlen);

/*
 * fvp_check_subpath() - is @p a relative path the provisioner may create or
 * remove below its root: components of [A-Za-z0-9._-], not "." or "..",
 * no empty component.  Used on PVs read back from the API too.
 */
bool fvp_check_subpath(const char *p);

/*
 * fvp_pv_options() - the flexVolume options of the PV for @c and @subpath, as a
 * new JSON object, after the nfs driver's own option checks (the ones mount will
 * apply, kubernetes.io/readwrite included for readOnly).  Returns 0 and
 * *ret (owned by the caller), or -EINVAL with the driver's message in @err.
 */
int fvp_pv_options(const struct fvp_class *c, const char *subpath, struct json_object **ret,
		   char *err, size_t errlen);

#endif
