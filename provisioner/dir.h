/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Volume directories below the provisioner's root (the share, mounted by
 * kubelet).  Every path is relative to the root and is walked one component
 * at a time with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_XDEV): no '..', no symlink and no other mount on the way is ever
 * followed.  All functions return 0 or -errno and are idempotent.
 *
 * Ownership.  Every directory made here has an owner record: a small file
 * FVP_OWNER_PREFIX<hash of the name> next to it, in its parent, holding the
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
#ifndef FVP_DIR_H
#define FVP_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FVP_OWNER_PREFIX ".flexvol-owner-"

/* Refusals by the owner rules, returned negated beside -errno (which they never are). */
enum {
	FVP_E_UNOWNED = 5000, /* the directory exists and has no owner record */
	FVP_E_OWNED,	      /* its owner record names another claim */
	FVP_E_NESTED,	      /* a parent directory is itself a volume's */
	FVP_E_HOLDS,	      /* it holds other volumes' directories: never adopted */
};

/* An owner record. */
struct fvp_owner {
	char claim[72]; /* the claim's uid: the owner */
	char pv[96];	/* the PV made for it */
	char name[256]; /* the directory's name (the last component) */
	bool adopted;	/* the directory existed before and was adopted */
	uint64_t size;	/* the capacity asked for it (CSI's CreateVolume), 0: none */
};

enum fvp_dir_made {
	FVP_DIR_NEW,	 /* made now */
	FVP_DIR_OURS,	 /* made for this claim before (a retry, a restart, another replica) */
	FVP_DIR_ADOPTED, /* it existed without a record, and @adopt said take it */
};

/* Open the root (O_PATH | O_DIRECTORY).  Returns the fd or -errno. */
int fvp_root_open(const char *root);

/*
 * fvp_dir_make() - make @rel for claim @claim (PV @pv; @size, when not 0,
 * recorded as the capacity asked): its owner record,
 * parents (0755, no records), and the directory with @mode (chmod'ed past
 * the umask) and owner @uid / @gid when not -1.  A retry for the same claim
 * finishes the job (mode and owner set again).  Refused, nothing changed:
 * -FVP_E_UNOWNED when @rel exists without a record and !@adopt;
 * -FVP_E_OWNED when the record names another claim (it goes to *@other);
 * -FVP_E_NESTED when a parent is itself a volume directory (its path to
 * @inside); -FVP_E_HOLDS when the directory to adopt holds other volumes'
 * directories.  An adopted
 * directory keeps its mode and owner.
 */
int fvp_dir_make(int rootfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, const char *claim,
		 const char *pv, uint64_t size, bool adopt, enum fvp_dir_made *made,
		 struct fvp_owner *other, char *inside, size_t insidelen);

/*
 * fvp_dir_record() - write the record of an existing directory @rel made
 * before owner records existed, naming claim @claim (PV @pv).  1: written;
 * 0: it names @claim already; -FVP_E_OWNED another claim's (*@other);
 * -ENOENT no directory.  (--record-owners: a migration the administrator asks for.)
 */
int fvp_dir_record(int rootfd, const char *rel, const char *claim, const char *pv,
		   struct fvp_owner *other);

/* Read the owner record of @rel.  -ENOENT: none; -EBADMSG: not a record. */
int fvp_dir_owner(int rootfd, const char *rel, struct fvp_owner *ret);

/*
 * The three below act only when @rel's record names @claim (-FVP_E_OWNED
 * and *@other otherwise, may be NULL), and treat a directory without a
 * record as someone else's (-FVP_E_UNOWNED).  Both absent: 0.
 */

/* Remove @rel if it is empty (a claim that never got its PV), then its record. */
int fvp_dir_remove_empty(int rootfd, const char *rel, const char *claim, struct fvp_owner *other);

/* Remove @rel and everything below it, not leaving its filesystem; then its record. */
int fvp_dir_delete(int rootfd, const char *rel, const char *claim, struct fvp_owner *other);

/*
 * Rename @rel to "archived-<last component>" in the same parent (with
 * "-<UTC time>" added when that name is taken; a name that would pass 255
 * bytes is cut and gets a hash of the whole one), then remove its record.
 * The new relative path goes to @ret (may be NULL; "" when @rel was absent).
 */
int fvp_dir_archive(int rootfd, const char *rel, const char *claim, struct fvp_owner *other,
		    char *ret, size_t len);

/* The archive name for @last (and @stamp, or NULL) as fvp_dir_archive() makes it. */
void fvp_archive_name(const char *last, const char *stamp, char *out, size_t len);

#endif
