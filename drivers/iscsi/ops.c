/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iscsi: the backend steps of the block-volume class (fv/blkvol.h).
 *
 *   parse    every option validated lexically (options.c)
 *   handle   udev's by-path name of the LUN
 *   attach   sendtargets discovery + login (CHAP from a root-only file or, in
 *            node mode, the PV's Secret), idempotent; the LUN's disk, waited
 *            for event-driven
 *   find     the LUN's disk on a logged-in session
 *   release  the LUN's disk goes; the target is logged out when no LUN of it
 *            is in use on this node
 *   grow     rescan the LUN's capacity
 *
 * Sessions are shared by every LUN of a target (kubernetes#41041, #73181):
 * whether a target may be logged out is decided from the kernel alone - is
 * any disk of any session to it mounted or held (sysfs.c) - under a
 * per-target lock that every login and logout decision takes.  The state
 * record volume -> (portal, iqn, lun) is a cache for detach, which gets
 * only the PV name; nothing depends on it existing.
 */
#include <ctype.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/config.h"
#include "fv/lock.h"
#include "fv/mountutil.h"
#include "iscsi.h"
#ifdef FV_FAULT_ISCSI_WFA_OTHER_LUN
#include <unistd.h>
#endif

static int in_use(const struct iscsi_disk *dk, void *arg, char *why, size_t len)
{
	return iscsi_disk_in_use(dk, why, len);
}

/* Release this node's persistent reservation of disk @dk (key from its session's initiator). */
static void unfence_disk(const struct iscsi_view *v, const struct iscsi_disk *dk)
{
	char why[256];
	int r;

	for (size_t i = 0; i < v->nsessions; i++) {
		const struct iscsi_session *s = &v->sessions[i];

		if (s->sid != dk->sid || !s->initiator[0])
			continue;
		r = iscsi_pr_unfence(dk, iscsi_pr_key(s->initiator), why, sizeof(why));
		/*
		 * Not fatal: the release goes on.  The reservation stays with this
		 * node's key (safe: nobody else writes), this node can take it again,
		 * and another node needs it broken (docs/fencing.md).
		 */
		if (r < 0)
			fv_log("could not release the reservation of /dev/%s (LUN %u, key 0x%016llx): "
			       "%s", dk->name, dk->lun,
			       (unsigned long long)iscsi_pr_key(s->initiator), why);
	}
}

/*
 * Log our session to @iqn out - unless a disk of any session to it is still
 * in use on this node (mounted, held, swap, open exclusively).  Then, when
 * @lun >= 0, only that LUN's disks go, if unused (the in-tree plugin's
 * deleteDevice).  Only what is ours (owner.c) is logged out, removed or
 * deleted: an administrator's session to the same target, and its node
 * record, stay as they are.  Reservations of the LUNs that go are
 * released first.  -EBUSY when LUN @lun itself is still in use: nothing
 * goes, and the caller's caller is to come again.  Call with the target
 * lock held.
 */
static int release_target(struct fv_ctx *cx, const char *iqn, int lun)
{
	struct iscsi_view v;
	struct iscsi_own own;
	char why[512], busy[512];
	uint64_t t0 = fv_now_ms();
	size_t nours = 0;
	bool have_own;
	int r = iscsi_view_load(&v, iqn);

	if (r < 0) {
		r = fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r));
		goto out;
	}
	have_own = iscsi_own_read(cx, iqn, &own) == 0;
	/*
	 * The decision is over the sessions of our iface: what other ifaces'
	 * sessions to the target use does not keep ours (nor is it ours to end).
	 */
	if (have_own)
		iscsi_view_keep_iface(&v, own.iface);
	r = iscsi_release_decide(&v, lun, in_use, NULL, busy, sizeof(busy));
	if (r < 0) {
		r = fv_fail(cx, r, "cannot tell whether the disks of '%s' are in use: %s", iqn,
			    strerror(-r));
		goto out;
	}
	if (r == ISCSI_KEEP && lun >= 0) {
		/*
		 * This LUN itself is still used here by something that is not our
		 * mount (a pod's container that still has it in its mount namespace,
		 * an administrator's holder).  Success would end kubelet's calls
		 * with the session left logged in for good: refuse, and the caller
		 * puts the device mount back so that kubelet calls again.
		 */
		r = fv_fail(cx, -EBUSY, "LUN %d of '%s' is still in use on this node: %s; not "
			    "logging out (retried when it is no longer used)", lun, iqn, busy);
		goto out;
	}
	if (r == ISCSI_KEEP) {
		r = 0; /* a release of the whole target: a disk of it is in use, nothing goes */
		goto out;
	}
	if (r == ISCSI_DELETE_LUN) {
		fv_log("keeping the session to %s: %s", iqn, busy);
		for (size_t i = 0; i < v.ndisks; i++)
			if ((int)v.disks[i].lun == lun) {
				unfence_disk(&v, &v.disks[i]);
				for (size_t j = 0; j < v.nsessions; j++)
					if (v.sessions[j].sid == v.disks[i].sid && have_own &&
					    iscsi_own_session(&own, &v.sessions[j]))
						iscsi_delete_disk(&v.disks[i]);
			}
		r = 0;
		goto out;
	}
	for (size_t i = 0; i < v.ndisks; i++)
		unfence_disk(&v, &v.disks[i]);
	r = 0;
	for (size_t i = 0; i < v.nsessions; i++) {
		char sid[16];
		const char *argv[] = { NULL, "-m", "session", "-r", sid, "--logout", NULL };

		if (!have_own || !iscsi_own_session(&own, &v.sessions[i])) {
			fv_log("leaving session %d to %s (iface %s, %s): flexvol did not create it",
			       v.sessions[i].sid, iqn, v.sessions[i].iface, v.sessions[i].addr);
			continue;
		}
		nours++;
		snprintf(sid, sizeof(sid), "%d", v.sessions[i].sid);
		r = iscsi_adm(cx, argv, 0, why, sizeof(why), NULL);
		/* gone meanwhile: the goal is reached */
		if (r == ISCSI_ERR_SESS_NOT_FOUND || r == ISCSI_ERR_NO_OBJS_FOUND ||
		    r == ISCSI_ERR_SYSFS_LOOKUP)
			r = 0;
		if (r != 0) {
			r = fv_fail(cx, r < 0 ? r : -FV_ERR_HELPER,
				    "logout of session %d to '%s' failed: %s", v.sessions[i].sid, iqn,
				    why);
			goto out;
		}
	}
	if (have_own) {
		bool still = false;

		/* our record goes once no session of ours uses it (and never an administrator's) */
		iscsi_view_free(&v);
		if (iscsi_view_load(&v, iqn) == 0)
			for (size_t i = 0; i < v.nsessions; i++)
				still |= streq(v.sessions[i].iface, own.iface) &&
					 (!v.sessions[i].addr[0] || streq(v.sessions[i].addr, own.portal));
		if (!still) {
			const char *argv[] = { NULL, "-m", "node", "-o", "delete", "-T", own.iqn, "-p",
					       own.portal, "-I", own.iface, NULL };
			int k = iscsi_adm(cx, argv, 0, why, sizeof(why), NULL);

			if (k != 0 && k != ISCSI_ERR_NO_OBJS_FOUND)
				fv_log("could not delete our node record of %s at %s: %s", iqn,
				       own.portal, why);
			else
				(void)iscsi_own_remove(cx, iqn);
		}
	}
	if (nours > 0)
		fv_log("logged out of %s (%zu session%s) in %llu ms", iqn, nours,
		       nours == 1 ? "" : "s", (unsigned long long)(fv_now_ms() - t0));
out:
	iscsi_view_free(&v);
	return r;
}

static int lock_target(struct fv_ctx *cx, const char *iqn)
{
	char name[IQN_MAX + 32], low[IQN_MAX + 1];
	size_t i;

	for (i = 0; iqn[i] && i < IQN_MAX; i++)
		low[i] = (char)tolower((unsigned char)iqn[i]);
	low[i] = '\0';
	snprintf(name, sizeof(name), "iscsi-target-%s", low);
	return fv_lock(cx, name);
}

/* Ask the target for its LUNs again (a LUN added after login). */
static void rescan_target(struct fv_ctx *cx, const struct iscsi_view *v)
{
	char why[512];

	for (size_t i = 0; i < v->nsessions; i++) {
		char sid[16];
		const char *argv[] = { NULL, "-m", "session", "-r", sid, "--rescan", NULL };

		snprintf(sid, sizeof(sid), "%d", v->sessions[i].sid);
		if (iscsi_adm(cx, argv, 0, why, sizeof(why), NULL) != 0)
			fv_log("rescan of session %d failed: %s", v->sessions[i].sid, why);
	}
}

/* After a device wait failed: which LUNs does the target have? */
static void explain_missing_lun(struct fv_ctx *cx, const struct iscsivol *v)
{
	struct iscsi_view view;
	char luns[256] = "", msg[512];
	size_t n = 0;

	if (iscsi_view_load(&view, v->iqn) == 0)
		for (; n < view.ndisks; n++) {
			size_t k = strlen(luns);

			snprintf(luns + k, sizeof(luns) - k, "%s%u", n ? ", " : "",
				 view.disks[n].lun);
		}
	iscsi_view_free(&view);
	snprintf(msg, sizeof(msg), "LUN %u of '%s' has no disk on this node; "
		 "the target's disks are LUN%s %s", v->lun, v->iqn, n == 1 ? "" : "s",
		 n ? luns : "(none)");
	fv_ctx_add_detail(cx, msg);
}

/* The LUN's disk on a logged-in session: 0 (its node in @dev), 1 none, <0. */
static int find_disk(const struct iscsivol *v, struct iscsi_disk *ret, char *dev, size_t len)
{
	struct iscsi_view view;
	const struct iscsi_disk *dk;
	int r = iscsi_view_load(&view, v->iqn);

	if (r < 0) {
		iscsi_view_free(&view);
		return r;
	}
	iscsi_view_keep_iface(&view, v->iface);
	dk = iscsi_view_lun(&view, v->lun);
	if (dk) {
		if (ret)
			*ret = *dk;
		snprintf(dev, len, "/dev/%s", dk->name);
	}
	iscsi_view_free(&view);
	return dk ? 0 : 1;
}

/* Equal without an early exit (secrets). */
static bool same_secret(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	unsigned char d = na != nb;

	for (size_t i = 0; i < CHAP_MAX; i++)
		d |= (unsigned char)((i < na ? a[i] : 0) ^ (i < nb ? b[i] : 0));
	return d == 0;
}

/*
 * CHAP per volume: a session that exists already was authenticated with
 * someone's credentials, not necessarily this volume's.  The kernel keeps
 * the CHAP settings each session logged in with (sysfs, root only): the
 * volume's must be the same, and a volume without credentials gets no LUN
 * of a CHAP session.  Secrets are compared, never logged or quoted.
 */
static int check_session_chap(struct fv_ctx *cx, const struct iscsivol *v,
			      const struct iscsi_view *view, const struct creds *c)
{
	for (size_t i = 0; i < view->nsessions; i++) {
		const struct iscsi_session *s = &view->sessions[i];
		struct chap have;
		bool same;
		int r;

		if (!streq(s->state, "LOGGED_IN"))
			continue;
		r = iscsi_session_chap(s->sid, &have);
		if (r < 0)
			continue; /* gone meanwhile */
		same = streq(have.user, c->session.user) && same_secret(have.pass, c->session.pass) &&
		       streq(have.user_in, c->session.user_in) &&
		       same_secret(have.pass_in, c->session.pass_in);
		explicit_bzero(&have, sizeof(have));
		if (same)
			continue;
		if (!c->session.user[0])
			return fv_fail(cx, -EACCES, "the session to '%s' (session %d) authenticated "
				       "with CHAP, and this volume has no CHAP credentials; refusing "
				       "LUN %u to it", v->iqn, s->sid, v->lun);
		return fv_fail(cx, -EACCES, "this volume's CHAP credentials are not the ones the "
			       "session to '%s' (session %d) logged in with; refusing LUN %u to it",
			       v->iqn, s->sid, v->lun);
	}
	return 0;
}

/*
 * The node-local attach: a session to the target (reused when there is
 * one), and the LUN's disk.  Call with the target lock held.
 */
static int ensure_attached(struct fv_ctx *cx, const struct iscsivol *v, char *dev, size_t len,
			   bool *ret_new)
{
	const struct fv_config *cfg = fv_ctx_config(cx);
	struct iscsi_lunmatch m = { v->iqn, v->lun, v->iface };
	struct fv_devwait *w = NULL;
	struct iscsi_view view = { 0 };
	struct iscsi_disk dk;
	char errs[1536] = "", why[768];
	struct creds c;
	bool had_session, logged_in = false;
	uint64_t t0, t_login = 0;
	int r;

	r = find_disk(v, NULL, dev, len);
	if (r < 0)
		return fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r));
	if (r == 0) {
		/* the LUN's disk is there: its session's CHAP must be this volume's too */
		r = iscsi_get_creds(cx, v, &c);
		if (r < 0)
			return r;
		r = iscsi_view_load(&view, v->iqn);
		iscsi_view_keep_iface(&view, v->iface);
		if (r == 0)
			r = check_session_chap(cx, v, &view, &c);
		else
			r = fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r));
		explicit_bzero(&c, sizeof(c));
		iscsi_view_free(&view);
		return r;
	}
	r = fv_devwait_open(cx, &w); /* before the login: no event can be missed */
	if (r < 0)
		return r;
	t0 = fv_now_ms();
	r = iscsi_view_load(&view, v->iqn);
	if (r < 0) {
		r = fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r));
		goto out;
	}
	iscsi_view_keep_iface(&view, v->iface); /* the sessions of the iface the options name */
	had_session = iscsi_view_logged_in(&view);
	/* the volume's credentials, read (and checked) whether or not there is a session */
	r = iscsi_get_creds(cx, v, &c);
	if (r < 0)
		goto out;
	if (had_session) {
		r = check_session_chap(cx, v, &view, &c);
		explicit_bzero(&c, sizeof(c));
		if (r < 0)
			goto out;
		/* logged in for another LUN; this one may be new to the session */
		rescan_target(cx, &view);
	} else {
		/*
		 * All portals together get four helper deadlines (8 min by
		 * default), then the device wait its own: below kubelet's 10 min.
		 */
		iscsi_login_deadline = t0 + 4ULL * cfg->helper_timeout * 1000;
		for (int i = 0; i < v->nportals && !logged_in; i++) {
			size_t k = strlen(errs);

			if (fv_now_ms() >= iscsi_login_deadline) {
				snprintf(errs + k, sizeof(errs) - k, "%sgave up after %u s before "
					 "trying %s", k ? "; " : "", 4 * cfg->helper_timeout,
					 v->portal[i]);
				r = -FV_ERR_TIMEOUT;
				break;
			}
			r = iscsi_login_at(cx, v, v->portal[i], &c, why, sizeof(why));
			if (r == 0) {
				logged_in = true;
				break;
			}
			snprintf(errs + k, sizeof(errs) - k, "%s%s: %s", k ? "; " : "", v->portal[i],
				 why);
		}
		iscsi_login_deadline = 0; /* logout and rescans get their full deadline */
		explicit_bzero(&c, sizeof(c));
		if (!logged_in) {
			r = fv_fail(cx, r, "login to '%s' failed: %s", v->iqn, errs);
			/* leave nothing behind: a half-made session of ours goes */
			release_target(cx, v->iqn, -1);
			goto out;
		}
		t_login = fv_now_ms();
		*ret_new = true;
	}
	/* the LUN's disk may have come between our first look and the monitor */
	r = fv_devwait_run(cx, w, find_disk(v, &dk, dev, len) == 0 ? dk.name : NULL,
			   iscsi_match_lun, &m, cfg->device_timeout * 1000, dev, len);
	if (r < 0) {
		explain_missing_lun(cx, v);
		if (!had_session)
			release_target(cx, v->iqn, -1);
		goto out;
	}
	if (t_login)
		fv_log("latency: login %llu ms, login to device node %llu ms (%s)",
		       (unsigned long long)(t_login - t0), (unsigned long long)(fv_now_ms() - t_login),
		       dev);
out:
	iscsi_view_free(&view);
	fv_devwait_free(w);
	return r;
}

/*
 * One writer across nodes (docs/fencing.md): before a read-write mount,
 * this node takes the LUN's persistent reservation (WRITE EXCLUSIVE -
 * REGISTRANTS ONLY) under its own key; a reservation of another key is a
 * Failure that names it.  Read-only volumes take none (the reservation type
 * lets everyone read).  A target without persistent reservations is used
 * unfenced, and the log says so.
 */
static int fence(struct fv_ctx *cx, const struct iscsivol *v, const char *dev)
{
	struct iscsi_view view;
	const struct iscsi_disk *dk;
	char why[256], initiator[IQN_MAX + 32] = "";
	uint64_t key, holder = 0;
	int r = iscsi_view_load(&view, v->iqn);

	if (r < 0) {
		iscsi_view_free(&view);
		return fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r));
	}
	iscsi_view_keep_iface(&view, v->iface);
	dk = iscsi_view_lun(&view, v->lun);
	if (dk)
		for (size_t i = 0; i < view.nsessions; i++)
			if (view.sessions[i].sid == dk->sid)
				snprintf(initiator, sizeof(initiator), "%s", view.sessions[i].initiator);
	if (!dk || !initiator[0]) {
		iscsi_view_free(&view);
		return fv_fail(cx, -ENXIO, "cannot find the session of %s (LUN %u of '%s') to "
			       "reserve the LUN", dev, v->lun, v->iqn);
	}
	key = iscsi_pr_key(initiator);
	r = iscsi_pr_fence(dk, key, &holder, why, sizeof(why));
	iscsi_view_free(&view);
	if (r == -EBUSY && holder)
		return fv_fail(cx, -FV_ERR_CONFLICT, "LUN %u of '%s' is reserved for writing by "
			       "another node (SCSI persistent reservation key 0x%016llx; this node, "
			       "initiator %s, has key 0x%016llx): one writer at a time. If that node "
			       "is dead, break its reservation (docs/fencing.md)", v->lun, v->iqn,
			       (unsigned long long)holder, initiator, (unsigned long long)key);
	if (r == -EBUSY)
		return fv_fail(cx, -FV_ERR_CONFLICT, "LUN %u of '%s' is reserved for writing by "
			       "another node (reservation conflict; this node's key is 0x%016llx)",
			       v->lun, v->iqn, (unsigned long long)key);
	if (r == -EOPNOTSUPP) {
		fv_log("LUN %u of %s: the target has no persistent reservations (%s); NOT fenced",
		       v->lun, v->iqn, why);
		return 0;
	}
	if (r < 0)
		return fv_fail(cx, r, "cannot reserve LUN %u of '%s' (%s): %s", v->lun, v->iqn, dev,
			       why);
	fv_debug("LUN %u of %s reserved with key 0x%016llx (%s)", v->lun, v->iqn,
		 (unsigned long long)key, initiator);
	return 0;
}

/* --- the backend steps ------------------------------------------------------------ */

static int iscsi_handle(struct fv_ctx *cx, const void *vol, char **ret_handle)
{
	const struct iscsivol *v = vol;
	char lun[48];

	iscsi_format_lun(v->lun, lun, sizeof(lun));
	/* udev's by-path name for the LUN (the real device comes from waitforattach) */
	if (asprintf(ret_handle, "/dev/disk/by-path/ip-%s-iscsi-%s-%s", v->portal[0], v->iqn,
		     lun) < 0)
		return -ENOMEM;
	return 0;
}

#ifdef FV_FAULT_ISCSI_WFA_OTHER_LUN
/*
 * A deliberate defect, built only by `make FV_FAULT=ISCSI_WFA_OTHER_LUN
 * O=<own dir>` (tests/kube/vmnode.mk, check-kube-vm-faults): waitforattach
 * answers with the disk of another LUN of the same target, once one is
 * there (within 10 s).  The lane's cases must fail on it.
 */
static void fault_other_lun(const struct iscsivol *v, char *dev, size_t len)
{
	uint64_t end = fv_now_ms() + 10000;

	do {
		struct iscsi_view view;
		bool found = false;

		if (iscsi_view_load(&view, v->iqn) == 0)
			for (size_t i = 0; i < view.ndisks && !found; i++)
				if (view.disks[i].lun != v->lun) {
					snprintf(dev, len, "/dev/%s", view.disks[i].name);
					found = true;
				}
		iscsi_view_free(&view);
		if (found)
			return;
		usleep(200 * 1000);
	} while (fv_now_ms() < end);
}
#endif

/*
 * A raw block volume's read-only stage makes the LUN's disk read-only on
 * this node (BLKROSET): no bind of a device node can (docs/design.md, "Raw
 * block volumes"), and a read-only stage takes no reservation, so nothing
 * else would keep this node from writing.  The flag goes with the disk when
 * the release deletes it; release() clears it where the disk stays.  The
 * node is opened O_PATH and checked first, the device itself only through it.
 */
static int disk_set_ro(struct fv_ctx *cx, const char *dev, bool ro)
{
	_cleanup_close_ int pfd = open(dev, O_PATH | O_NOFOLLOW | O_CLOEXEC), fd = -1;
	char self[32];
	struct stat st;
	int v = ro;

	if (pfd < 0 || fstat(pfd, &st) < 0 || !S_ISBLK(st.st_mode))
		return fv_fail(cx, -ENXIO, "%s is not a block device", dev);
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	fd = open(self, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, BLKROSET, &v) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot make %s %s: %m", dev,
			       ro ? "read-only" : "read-write");
	fv_log("%s is %s on this node", dev, ro ? "read-only" : "read-write");
	return 0;
}

/*
 * Sessions are per target, LUNs carry no owner: the claim of a volume on
 * its LUN is its mount (the class refuses a disk mounted for another
 * volume), and the target lock, held until the mount is done, keeps a
 * sibling's logout decision from racing it.
 */
static int iscsi_attach(struct fv_ctx *cx, const void *vol, const char *name, const char *hint,
			char *dev, size_t len, int *ret_lock)
{
	const struct iscsivol *v = vol;
	int lock = lock_target(cx, v->iqn), r;

	if (lock < 0)
		return lock;
	bool new_session = false;

	r = ensure_attached(cx, v, dev, len, &new_session);
	/* the claim of a trusted name (mountdevice, node-mode mount) is where a writer fences */
	if (r == 0 && name && !v->ro) {
		r = fence(cx, v, dev);
		/* refused: a session this very call made goes again (nobody else will release it) */
		if (r < 0 && new_session) {
			char msg[1024];

			snprintf(msg, sizeof(msg), "%s", fv_ctx_message(cx));
			(void)release_target(cx, v->iqn, -1);
			fv_ctx_reset_message(cx);
			fv_fail(cx, r, "%s", msg);
		}
	}
	/* a raw block stage: the disk's own flag is its mode */
	if (r == 0 && name && v->block)
		r = disk_set_ro(cx, dev, v->ro);
	if (r < 0) {
		fv_unlock(lock);
		return r;
	}
#ifdef FV_FAULT_ISCSI_WFA_OTHER_LUN
	if (!name) /* waitforattach */
		fault_other_lun(v, dev, len);
#endif
	*ret_lock = lock;
	return 0;
}

static int iscsi_find(struct fv_ctx *cx, const void *vol, char *dev, size_t len)
{
	int r = find_disk(vol, NULL, dev, len);

	return r < 0 ? fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r)) : r;
}

static int iscsi_record(struct fv_ctx *cx, const void *vol, json_object *rec)
{
	const struct iscsivol *v = vol;
	json_object *ps = json_object_new_array();

	if (!ps)
		return -ENOMEM;
	for (int i = 0; i < v->nportals; i++)
		json_object_array_add(ps, json_object_new_string(v->portal[i]));
	json_object_object_add(rec, "iqn", json_object_new_string(v->iqn));
	json_object_object_add(rec, "lun", json_object_new_int((int)v->lun));
	json_object_object_add(rec, "portals", ps);
	json_object_object_add(rec, "iface", json_object_new_string(v->iface));
	return 0;
}

/* The target of a state record: 0 found, 1 none. */
static int record_target(json_object *rec, char *iqn, size_t len, unsigned int *lun)
{
	json_object *x;
	int64_t n;

	if (!rec || !json_object_object_get_ex(rec, "iqn", &x) ||
	    !json_object_is_type(x, json_type_string) ||
	    !iscsi_valid_target_name(json_object_get_string(x)))
		return 1;
	snprintf(iqn, len, "%s", json_object_get_string(x));
	n = json_object_object_get_ex(rec, "lun", &x) ? json_object_get_int64(x) : 0;
	*lun = n >= 0 && n <= LUN_MAX ? (unsigned int)n : 0;
	return 0;
}

static int iscsi_release(struct fv_ctx *cx, const char *name, dev_t devno, json_object *rec)
{
	struct iscsivol v = { .lun = 0 };
	char iqn[IQN_MAX + 32], dev[64];
	struct iscsi_disk dk;
	uint64_t t0 = fv_now_ms();
	json_object *x;
	int lock, r;

	/* the kernel knows which target the mount was on; the record is the fallback */
	if (!(devno && iscsi_devt_target(devno, iqn, sizeof(iqn), &v.lun) == 0) &&
	    record_target(rec, iqn, sizeof(iqn), &v.lun) != 0)
		return 0; /* never attached here, or already released */
	v.iqn = iqn;
	if (find_disk(&v, &dk, dev, sizeof(dev)) == 0 && fv_mnt_count_devno(dk.devt) > 0)
		return fv_fail(cx, -EBUSY, "LUN %u of '%s' (%s) is still mounted; not releasing it",
			       v.lun, iqn, dev);
	/* a read-only raw block stage's flag: cleared where the disk outlives the release */
	if (rec && json_object_object_get_ex(rec, "block", &x) && json_object_get_boolean(x) &&
	    json_object_object_get_ex(rec, "readonly", &x) && json_object_get_boolean(x) &&
	    find_disk(&v, &dk, dev, sizeof(dev)) == 0 && disk_set_ro(cx, dev, false) < 0) {
		fv_log("%s", fv_ctx_message(cx));
		fv_ctx_reset_message(cx);
	}
	lock = lock_target(cx, iqn);
	if (lock < 0)
		return lock;
	r = release_target(cx, iqn, (int)v.lun);
	fv_unlock(lock);
	fv_log("latency: release %llu ms", (unsigned long long)(fv_now_ms() - t0));
	return r;
}

/* The identity of a LUN: its target (iSCSI names compare case-insensitively) and number. */
static void lun_ident(const char *iqn, unsigned int lun, char *buf, size_t len)
{
	size_t i;

	for (i = 0; iqn[i] && i + 1 < len; i++)
		buf[i] = (char)tolower((unsigned char)iqn[i]);
	buf[i] = '\0';
	snprintf(buf + i, len - i, "-%u", lun);
}

static int iscsi_ident(struct fv_ctx *cx, const void *vol, char *buf, size_t len)
{
	const struct iscsivol *v = vol;

	lun_ident(v->iqn, v->lun, buf, len);
	return 0;
}

static int iscsi_ident_of(struct fv_ctx *cx, dev_t devno, char *buf, size_t len)
{
	char iqn[IQN_MAX + 32];
	unsigned int lun;

	if (iscsi_devt_target(devno, iqn, sizeof(iqn), &lun) != 0)
		return 1;
	lun_ident(iqn, lun, buf, len);
	return 0;
}

static int iscsi_health(struct fv_ctx *cx, dev_t devno, json_object *rec, char *msg, size_t len)
{
	int r = iscsi_devt_health(devno, msg, len);

	return r < 0 ? fv_fail(cx, r, "cannot read the iSCSI sessions: %s", strerror(-r)) : r;
}

static int iscsi_grow(struct fv_ctx *cx, const void *vol, const char *dev, uint64_t new_size)
{
	const struct iscsivol *v = vol;
	uint64_t bytes;
	struct stat st;
	int r = stat(dev, &st) < 0 ? NEG_ERRNO() : iscsi_disk_rescan(st.st_rdev, &bytes);

	if (r < 0)
		return fv_fail(cx, r, "cannot rescan %s: %s", dev, strerror(-r));
	if (bytes < new_size)
		return fv_fail(cx, -ENOSPC, "LUN %u of '%s' has %llu bytes after a rescan, less than "
			       "the requested %llu: grow the LUN on the target first", v->lun,
			       v->iqn, (unsigned long long)bytes, (unsigned long long)new_size);
	fv_log("expandfs: %s is %llu bytes", dev, (unsigned long long)bytes);
	return 0;
}

static const struct fv_blkvol_ops iscsi_ops = {
	.vol_size = sizeof(struct iscsivol),
	.default_fstype = DEFAULT_FSTYPE,
	.parse = iscsi_parse,
	.handle = iscsi_handle,
	.attach = iscsi_attach,
	.find = iscsi_find,
	.release = iscsi_release,
	.record = iscsi_record,
	.grow = iscsi_grow,
	.ident = iscsi_ident,
	.ident_of = iscsi_ident_of,
	.health = iscsi_health,
};

const struct fv_driver fv_driver_iscsi = {
	.name = "iscsi",
	FV_BLKVOL_OPS(&iscsi_ops),
};
