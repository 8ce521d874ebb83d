/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iscsi: attachable block volumes on iSCSI LUNs, through open-iscsi
 * (iscsiadm + iscsid on the node).  Private to drivers/iscsi/:
 *
 *   options.c   option validation, CHAP credentials (file, Secret)
 *   iscsiadm.c  the iscsiadm transport: deadlines, exit codes, discovery, login
 *   sysfs.c     the kernel's view of sessions and LUN disks (libudev), and
 *               the logout decision
 *   owner.c     the owner records: which sessions and discovery records are ours
 *   pr.c        SCSI persistent reservations: the node's key, fencing a LUN
 *   ops.c       the backend steps of the block-volume class (fv/blkvol.h)
 */
#ifndef FV_ISCSI_H
#define FV_ISCSI_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fv/driver.h"
#include "fv/log.h"
#include "fv/util.h"

#define DEFAULT_FSTYPE "ext4"
#define DEFAULT_PORT 3260
#define DEFAULT_IFACE "default"
#define MAX_PORTALS 8
#define PORTAL_MAX 300 /* "[v6]:port" or a 253-char host name plus ":65535" */
#define IQN_MAX 223    /* RFC 3720 3.2.6.1 */
#define LUN_MAX 16383  /* SAM flat addressing */
#define CHAP_MAX 255
#define CRED_FILE_MAX (16 * 1024)

/* iscsiadm exit codes (open-iscsi include/iscsi_err.h) */
enum {
	ISCSI_ERR_SESS_NOT_FOUND = 2,
	ISCSI_ERR_TRANS = 4,
	ISCSI_ERR_LOGIN = 5,
	ISCSI_ERR_IDBM = 6,
	ISCSI_ERR_TRANS_TIMEOUT = 8,
	ISCSI_ERR_PDU_TIMEOUT = 11,
	ISCSI_ERR_TRANS_NOT_FOUND = 12,
	ISCSI_ERR_SESS_EXISTS = 15,
	ISCSI_ERR_FATAL_LOGIN = 19,
	ISCSI_ERR_ISCSID_NOTCONN = 20,
	ISCSI_ERR_NO_OBJS_FOUND = 21,
	ISCSI_ERR_SYSFS_LOOKUP = 22,
	ISCSI_ERR_LOGIN_AUTH_FAILED = 24,
};

struct chap {
	char user[CHAP_MAX + 1], pass[CHAP_MAX + 1];
	char user_in[CHAP_MAX + 1], pass_in[CHAP_MAX + 1];
};

struct creds {
	struct chap discovery, session;
};

struct iscsivol {
	char portal[MAX_PORTALS][PORTAL_MAX]; /* "host:port"; [0] is targetPortal */
	int nportals;
	const char *iqn;
	unsigned int lun;
	const char *iface;
	const char *credfile; /* the option as given, or NULL */
	char credrel[PATH_MAX]; /* scratch of the lexical check */
	bool has_secret;      /* CHAP from kubernetes.io/secret/<key> (node-mode mount) */
	struct creds secret;  /* wiped with the volume (blkvol.c) */
	bool ro;
	bool block; /* a raw block volume: read-only is the disk's own flag then */
};

/* options.c */
int iscsi_parse(struct fv_ctx *cx, const struct fv_opts *o, void *vol);
bool iscsi_valid_target_name(const char *s);
void iscsi_format_lun(unsigned int lun, char *buf, size_t len);
char *iscsi_trim(char *s);
/* The CHAP settings of @v (file or Secret) into @c; @c zeroed when there are none. */
int iscsi_get_creds(struct fv_ctx *cx, const struct iscsivol *v, struct creds *c);

/* iscsiadm.c */
/*
 * The end of the login phase (monotonic ms; 0: none).  Every iscsiadm run
 * is cut to what is left of it, so many portals that hang cannot add up
 * past kubelet's 10 min waitforattach timeout.
 */
extern uint64_t iscsi_login_deadline;
/*
 * Run iscsiadm with @argv (argv[0] is filled in) under the helper deadline.
 * Returns its exit status (>= 0), or a negative error with a message in
 * @why (timeout, not installed).  @out (may be NULL) gets the output.
 */
int iscsi_adm(struct fv_ctx *cx, const char **argv, unsigned int redact, char *why,
	      size_t whylen, char **out);
/* Discovery at @portal and login to @v's target, CHAP from @c (may be NULL). */
int iscsi_login_at(struct fv_ctx *cx, const struct iscsivol *v, const char *portal,
		   const struct creds *c, char *why, size_t whylen);

/* sysfs.c: the kernel's view, through libudev (no fixed limits) */
struct iscsi_session {
	int sid;
	char target[IQN_MAX + 32];
	char state[32];
	char iface[72];		       /* ifacename */
	char initiator[IQN_MAX + 32];  /* initiatorname: the identity the target sees */
	char addr[PORTAL_MAX];	       /* "addr:port" of its connection, "" unknown */
};

struct iscsi_disk {
	int sid;
	unsigned int lun;
	char name[32]; /* sdX */
	dev_t devt;
};

struct iscsi_view {
	struct iscsi_session *sessions;
	size_t nsessions;
	struct iscsi_disk *disks;
	size_t ndisks;
};

/*
 * iscsi_view_load() - the sessions to @iqn (all targets when NULL, compared
 * without case) and the disks of their LUNs.  Returns 0 or -errno; free
 * with iscsi_view_free() either way.
 */
int iscsi_view_load(struct iscsi_view *v, const char *iqn);
void iscsi_view_free(struct iscsi_view *v);
/*
 * Keep only the sessions through open-iscsi iface @iface (and their disks):
 * a volume uses the sessions of the iface its options name.
 */
void iscsi_view_keep_iface(struct iscsi_view *v, const char *iface);
/* The CHAP settings session @sid logged in with (sysfs, root only); absent ones "". */
int iscsi_session_chap(int sid, struct chap *c);
/* The device root (/dev, FLEXVOL_DEV_ROOT in the unit tests). */
const char *iscsi_dev_root(void);
/* Any session of @v logged in? */
bool iscsi_view_logged_in(const struct iscsi_view *v);
/* The disk of LUN @lun on a logged-in session of @v, or NULL. */
const struct iscsi_disk *iscsi_view_lun(const struct iscsi_view *v, unsigned int lun);

/*
 * Is disk @dk in use on this node: mounted (or a partition of it), held by
 * another block device (dm, md, LVM; on the disk or a partition), swap, or
 * held open exclusively by anything (O_EXCL probe: mounts in other mount
 * namespaces too)?  1 (with a reason in @why), 0, -errno.
 */
int iscsi_disk_in_use(const struct iscsi_disk *dk, char *why, size_t len);

/* What releasing LUN @lun (-1: none in particular) of a target may do. */
enum iscsi_release {
	ISCSI_KEEP,	  /* that very LUN (or, for -1, any LUN) is in use: nothing goes */
	ISCSI_DELETE_LUN, /* another LUN is in use: only the LUN's disk goes, the session stays */
	ISCSI_LOGOUT,	  /* nothing of the target is in use: log every session out */
};

typedef int (*iscsi_in_use_fn)(const struct iscsi_disk *dk, void *arg, char *why, size_t len);

/*
 * iscsi_release_decide() - the logout decision over every disk of every
 * session in @v (the target's), asking @in_use for each.  Returns an enum
 * iscsi_release (>= 0), or -errno from @in_use; @why says what is in use.
 */
int iscsi_release_decide(const struct iscsi_view *v, int lun, iscsi_in_use_fn in_use, void *arg,
			 char *why, size_t len);

/*
 * Is the iSCSI disk @devt well: its session logged in, the disk running?
 * From sysfs alone.  0 yes, 1 no (why in @msg), <0 cannot tell.
 */
int iscsi_devt_health(dev_t devt, char *msg, size_t len);

/* The target and LUN behind block device @devt (sysfs parents): 0 found, 1 not. */
int iscsi_devt_target(dev_t devt, char *iqn, size_t len, unsigned int *lun);

/* udev match for fv_devwait_run(): a disk of LUN m->lun under a session to m->iqn. */
struct iscsi_lunmatch {
	const char *iqn;
	unsigned int lun;
	const char *iface; /* NULL: any */
};
struct udev_device;
bool iscsi_match_lun(struct udev_device *d, void *arg);

/* Make the SCSI layer read the capacity of disk @devt again (sd_rescan); its size in bytes. */
int iscsi_disk_rescan(dev_t devt, uint64_t *ret_bytes);

/* Remove the SCSI device of an unused LUN disk (the session stays for its siblings). */
void iscsi_delete_disk(const struct iscsi_disk *dk);

/* owner.c: the sessions, node records and discovery records that are ours */
struct iscsi_own {
	char iqn[IQN_MAX + 32];
	char portal[PORTAL_MAX]; /* the node record's portal */
	char iface[72];
	int sid; /* -1: not known (killed between the login and the record) */
	char boot_id[64];
};
/* Our node record / session of @iqn: 0 (in @o), 1 none, <0. */
int iscsi_own_read(struct fv_ctx *cx, const char *iqn, struct iscsi_own *o);
/* Write @o (with this boot's id) BEFORE creating what it describes. */
int iscsi_own_write(struct fv_ctx *cx, const struct iscsi_own *o);
int iscsi_own_remove(struct fv_ctx *cx, const char *iqn);
/* Is session @s the one of our record @o? */
bool iscsi_own_session(const struct iscsi_own *o, const struct iscsi_session *s);
/* The discovery record of @portal: @op 0 is it ours? (1, 0), 1 claim it, -1 forget it. */
int iscsi_own_discovery(struct fv_ctx *cx, const char *portal, int op);

/* pr.c: SCSI-3 persistent reservations (fencing, docs/fencing.md) */
/* This node's reservation key: derived from the session's initiator name, never 0. */
uint64_t iscsi_pr_key(const char *initiator);
/*
 * iscsi_pr_fence() - register @key on disk @dk and hold WRITE EXCLUSIVE -
 * REGISTRANTS ONLY.  0 (held by @key, also when it was already), -EBUSY
 * (another key holds it: *@holder, 0 when unknown), -EOPNOTSUPP (the target
 * has no persistent reservations), other -errno with @why.
 */
int iscsi_pr_fence(const struct iscsi_disk *dk, uint64_t key, uint64_t *holder, char *why,
		   size_t whylen);
/* iscsi_pr_unfence() - release @key's reservation of @dk and unregister it.  0 or -errno. */
int iscsi_pr_unfence(const struct iscsi_disk *dk, uint64_t key, char *why, size_t whylen);

#endif
