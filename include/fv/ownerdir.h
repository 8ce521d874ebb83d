/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Volume directories with owner records below a root: the share that
 * flexvol-provisioner's nfs backend and flexvol-csi's nfs Controller
 * service make volumes in (lib/ownerdir.c).  Every path is relative to the root and is walked one component
 * at a time with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_XDEV): no '..', no symlink and no other mount on the way is ever
 * followed.  All functions return 0 or -errno and are idempotent.
 *
 * Ownership.  Every directory made here has an owner record: a small file
 * FV_OWNERDIR_PREFIX<hash of the name> next to it, in its parent, holding the
 * uid of the claim it was made for.  Next to it and not inside it, so the
 * volume's pods never see or change it; a plain file, not an extended
 * attribute, because user xattrs need NFS 4.2 on both ends and trusted ones
 * are not passed over NFS at all.  It is written before the directory is
 * made (a crash in between leaves a record whose directory a retry makes),
 * with link(2) from a unique temporary file, which is atomic on NFS too: of
 * two writers, one wins.  Only a directory whose record names the claim is
 * reclaimed or cleaned up; a directory without one is never reused unless
 * the caller adopts it.
 */
#ifndef FV_OWNERDIR_H
#define FV_OWNERDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FV_OWNERDIR_PREFIX ".flexvol-owner-"

/* Refusals by the owner rules, returned negated beside -errno (which they never are). */
enum {
	FV_OWNERDIR_E_UNOWNED = 5000, /* the directory exists and has no owner record */
	FV_OWNERDIR_E_OWNED,	      /* its owner record names another claim */
	FV_OWNERDIR_E_NESTED,	      /* a parent directory is itself a volume's */
	FV_OWNERDIR_E_HOLDS,	      /* it holds other volumes' directories: never adopted */
};

/* An owner record. */
struct fv_owner {
	char claim[72]; /* the claim's uid: the owner */
	char pv[256];	/* the PV made for it (CSI: the CreateVolume name) */
	char name[256]; /* the directory's name (the last component) */
	bool adopted;	/* the directory existed before and was adopted */
	uint64_t size;	/* the capacity asked for it (CSI's CreateVolume), 0: none */
};

enum fv_ownerdir_made {
	FV_OWNERDIR_NEW,	 /* made now */
	FV_OWNERDIR_OURS,	 /* made for this claim before (a retry, a restart, another replica) */
	FV_OWNERDIR_ADOPTED, /* it existed without a record, and @adopt said take it */
};

/* Open the root (O_PATH | O_DIRECTORY).  Returns the fd or -errno. */
int fv_ownerdir_root_open(const char *root);

/*
 * fv_ownerdir_make() - make @rel for claim @claim (PV @pv; @size, when not 0,
 * recorded as the capacity asked): its owner record,
 * parents (0755, no records), and the directory with @mode (chmod'ed past
 * the umask) and owner @uid / @gid when not -1.  A retry for the same claim
 * finishes the job (mode and owner set again).  Refused, nothing changed:
 * -FV_OWNERDIR_E_UNOWNED when @rel exists without a record and !@adopt;
 * -FV_OWNERDIR_E_OWNED when the record names another claim (it goes to *@other);
 * -FV_OWNERDIR_E_NESTED when a parent is itself a volume directory (its path to
 * @inside); -FV_OWNERDIR_E_HOLDS when the directory to adopt holds other volumes'
 * directories.  An adopted
 * directory keeps its mode and owner.
 */
int fv_ownerdir_make(int rootfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, const char *claim,
		 const char *pv, uint64_t size, bool adopt, enum fv_ownerdir_made *made,
		 struct fv_owner *other, char *inside, size_t insidelen);

/*
 * fv_ownerdir_record() - write the record of an existing directory @rel made
 * before owner records existed, naming claim @claim (PV @pv).  1: written;
 * 0: it names @claim already; -FV_OWNERDIR_E_OWNED another claim's (*@other);
 * -ENOENT no directory.  (--record-owners: a migration the administrator asks for.)
 */
int fv_ownerdir_record(int rootfd, const char *rel, const char *claim, const char *pv,
		   struct fv_owner *other);

/*
 * fv_ownerdir_transfer() - the record of @rel, naming @from, made to name @to instead (its
 * other fields kept; replaced whole by rename(2), atomic on NFS too).  1: moved; 0: it names
 * @to already; -FV_OWNERDIR_E_OWNED another (*@other); -FV_OWNERDIR_E_UNOWNED a directory
 * without a record; -ENOENT neither.  (migrate: a directory handed between flexvol-provisioner,
 * whose records name a claim's uid, and flexvol-csi, whose name the volume ID.)
 */
int fv_ownerdir_transfer(int rootfd, const char *rel, const char *from, const char *to,
			 struct fv_owner *other);

/* Open the directory @rel below the root, confined as every walk here: fd, or -errno. */
int fv_ownerdir_open(int rootfd, const char *rel, int flags);

/* Read the owner record of @rel.  -ENOENT: none; -EBADMSG: not a record. */
int fv_ownerdir_owner(int rootfd, const char *rel, struct fv_owner *ret);

/*
 * The three below act only when @rel's record names @claim (-FV_OWNERDIR_E_OWNED
 * and *@other otherwise, may be NULL), and treat a directory without a
 * record as someone else's (-FV_OWNERDIR_E_UNOWNED).  Both absent: 0.
 */

/* Remove @rel if it is empty (a claim that never got its PV), then its record. */
int fv_ownerdir_remove_empty(int rootfd, const char *rel, const char *claim, struct fv_owner *other);

/* Remove @rel and everything below it, not leaving its filesystem; then its record. */
int fv_ownerdir_delete(int rootfd, const char *rel, const char *claim, struct fv_owner *other);

/*
 * Rename @rel to "archived-<last component>" in the same parent (with
 * "-<UTC time>" added when that name is taken; a name that would pass 255
 * bytes is cut and gets a hash of the whole one), then remove its record.
 * The new relative path goes to @ret (may be NULL; "" when @rel was absent).
 */
int fv_ownerdir_archive(int rootfd, const char *rel, const char *claim, struct fv_owner *other,
		    char *ret, size_t len);

/* The archive name for @last (and @stamp, or NULL) as fv_ownerdir_archive() makes it. */
void fv_ownerdir_archive_name(const char *last, const char *stamp, char *out, size_t len);

#endif
