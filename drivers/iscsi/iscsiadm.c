/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The iscsiadm transport: every call under the helper deadline (cut to the
 * login phase's budget), exit codes in words, the telling line of its
 * output; sendtargets discovery and login with CHAP on argv, redacted.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fv/config.h"
#include "fv/exec.h"
#include "fv/lock.h"

#include "iscsi.h"

/* --- iscsiadm ----------------------------------------------------------------- */

static const char *iscsi_err_text(int status)
{
	switch (status) {
	case 1: return "generic error";
	case ISCSI_ERR_SESS_NOT_FOUND: return "session not found";
	case 3: return "out of memory";
	case ISCSI_ERR_TRANS: return "cannot connect to the portal";
	case ISCSI_ERR_LOGIN: return "login failed";
	case ISCSI_ERR_IDBM: return "node database error";
	case 7: return "invalid argument";
	case ISCSI_ERR_TRANS_TIMEOUT: return "connection timed out";
	case 9: return "iscsid internal error";
	case 10: return "logout failed";
	case ISCSI_ERR_PDU_TIMEOUT: return "the portal did not answer (iSCSI PDU timed out)";
	case ISCSI_ERR_TRANS_NOT_FOUND: return "the iSCSI transport is not loaded (kernel module "
					       "iscsi_tcp missing?)";
	case 13: return "permission denied";
	case 14: return "the transport does not support the operation";
	case ISCSI_ERR_SESS_EXISTS: return "session exists";
	case 18: return "cannot talk to iscsid";
	case ISCSI_ERR_FATAL_LOGIN: return "the target refused the login (unknown target, or this "
					   "initiator is not allowed)";
	case ISCSI_ERR_ISCSID_NOTCONN: return "iscsid is not running";
	case ISCSI_ERR_NO_OBJS_FOUND: return "no matching records or sessions";
	case ISCSI_ERR_SYSFS_LOOKUP: return "sysfs lookup failed";
	case 23: return "host not found";
	case ISCSI_ERR_LOGIN_AUTH_FAILED: return "CHAP authentication failed";
	case 28: return "device or resource busy";
	default: return "failed";
	}
}

/*
 * The line of iscsiadm output that says why: its own "iscsiadm: ..." lines
 * (not chatter of libraries it uses), preferring the initiator's error.
 */
static void iscsiadm_reason(const char *out, char *buf, size_t max)
{
	const char *p, *first = NULL, *err = NULL;
	size_t first_n = 0, err_n = 0, len;

	for (p = out ? out : ""; *p; p += len + (p[len] != '\0')) {
		len = strcspn(p, "\n");
		if (len <= 10 || strncmp(p, "iscsiadm: ", 10))
			continue;
		if (!first) {
			first = p + 10;
			first_n = len - 10;
		}
		if (!err && memmem(p, len, "reported error", 14)) {
			err = p + 10;
			err_n = len - 10;
		}
	}
	if (err) {
		first = err;
		first_n = err_n;
	}
	if (!first) {
		fv_trim_output(out, buf, max);
		return;
	}
	if (first_n >= max)
		first_n = max - 1;
	for (size_t i = 0; i < first_n; i++)
		buf[i] = (unsigned char)first[i] < 0x20 ? ' ' : first[i];
	buf[first_n] = '\0';
}

/* --- open-iscsi's database lock -------------------------------------------------- */
/*
 * iscsiadm and iscsid take open-iscsi's database lock (idbm_lock()) by
 * link(2)ing LOCK_DIR/lock to LOCK_DIR/lock.write, and drop it by unlinking
 * the second name.  A holder that dies in between leaves the lock taken for
 * good, and iscsiadm kills are ours to make: a SIGKILL of this driver takes
 * its iscsiadm with it (PR_SET_PDEATHSIG), as does a helper deadline.  Every
 * later iscsiadm then spins 30 s on it and goes on (open-iscsi up to 2.1.9)
 * or fails (2.1.10 on): with our 30-120 s helper deadlines, a node whose
 * iSCSI calls all fail.  The lock names no owner, so we judge it stale when
 * it was taken more than STALE_MS ago (link(2) sets the inode's ctime) and
 * no running iscsiadm is older than the lock (a holder started before it
 * took it; one started since is waiting).  iscsid holds it for moments,
 * which the bound covers.  This reads the host's /proc: the drivers run in
 * the host's PID namespace, as open-iscsi does.
 */
#define DB_LOCK_TAKEN "/run/lock/iscsi/lock.write"
#define STALE_MS 5000
#define START_SLACK_MS 1000 /* the start time's granularity (clock ticks) and the lock's lag */

static uint64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Is a process named iscsiadm running that started @age_ms or longer ago? */
static bool iscsiadm_older_than(uint64_t age_ms)
{
	uint64_t boot_ms = clock_ms(CLOCK_BOOTTIME);
	long hz = sysconf(_SC_CLK_TCK);
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool found = false;

	if (!d)
		return true; /* cannot tell: the lock may be held */
	while (!found && (e = readdir(d))) {
		char path[64], buf[512], *comm, *end;
		unsigned long long start = 0;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if (fv_read_line(path, buf, sizeof(buf)) <= 0)
			continue;
		/* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
		comm = strchr(buf, '(');
		end = strrchr(buf, ')');
		if (!comm || !end || end - comm - 1 != 8 || strncmp(comm + 1, "iscsiadm", 8))
			continue;
		/* field 22, starttime: the 20th after the comm */
		char *f = end + 1;
		for (int i = 0; i < 20 && f; i++)
			f = strchr(f + 1, ' ');
		if (f)
			start = strtoull(f + 1, NULL, 10);
		if (!f || hz <= 0 || boot_ms - start * 1000 / (unsigned long long)hz + START_SLACK_MS >= age_ms)
			found = true;
	}
	closedir(d);
	return found;
}

static uint64_t lock_age_ms(const struct stat *st)
{
	uint64_t now = clock_ms(CLOCK_REALTIME);
	uint64_t taken = (uint64_t)st->st_ctim.tv_sec * 1000 + (uint64_t)st->st_ctim.tv_nsec / 1000000;

	return now > taken ? now - taken : 0;
}

static bool same_lock(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * Drop open-iscsi's database lock when its holder is gone (see above).  A
 * lock younger than STALE_MS that no running iscsiadm can hold (the retry
 * of a call killed a moment ago) is waited on until it is that old, at
 * most STALE_MS: released or taken again meanwhile, it is left alone.
 */
static void db_lock_unstale(void)
{
	struct stat st, again;
	uint64_t age;

	if (lstat(DB_LOCK_TAKEN, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	age = lock_age_ms(&st);
	if (iscsiadm_older_than(age))
		return;
	if (age < STALE_MS) {
		struct timespec ts = { .tv_sec = (STALE_MS - age) / 1000,
				       .tv_nsec = (long)((STALE_MS - age) % 1000) * 1000000 };

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		age = lock_age_ms(&st);
	}
	/*
	 * Released, or taken again (by a waiter after its holder let go): not
	 * stale.  The same lock needs no second scan: an iscsiadm older than it
	 * was running at the first, and one started since is younger.
	 */
	if (lstat(DB_LOCK_TAKEN, &again) < 0 || !same_lock(&st, &again))
		return;
	if (unlink(DB_LOCK_TAKEN) == 0)
		fv_log("removed open-iscsi's database lock %s: taken %llu ms ago by a process that is "
		       "gone (no running iscsiadm is older)", DB_LOCK_TAKEN, (unsigned long long)age);
}

uint64_t iscsi_login_deadline; /* see iscsi.h */

int iscsi_adm(struct fv_ctx *cx, const char **argv, unsigned int redact, char *why,
	      size_t whylen, char **out)
{
	struct fv_exec_opts o = fv_exec_opts_of(cx);
	unsigned int timeout = o.timeout_s;
	uint64_t now = fv_now_ms();
	struct fv_run run;
	int r;

	if (iscsi_login_deadline) {
		uint64_t left = iscsi_login_deadline > now ? (iscsi_login_deadline - now + 999) / 1000 : 1;

		if (left < timeout)
			timeout = (unsigned int)left;
	}
	db_lock_unstale();
	argv[0] = "iscsiadm";
	o.timeout_s = timeout;
	o.redact = redact;
	o.flags = FV_EXEC_STATUS;
	r = fv_exec(cx, argv, &o, &run);
	if (r == -FV_ERR_TIMEOUT)
		snprintf(why, whylen, "iscsiadm did not finish within %u s", timeout);
	else if (r == -ENOENT)
		snprintf(why, whylen, "iscsiadm not found in %s (install open-iscsi)",
			 fv_ctx_config(cx)->helper_path);
	else if (r < 0)
		snprintf(why, whylen, "cannot run iscsiadm: %s", strerror(-r));
	else if (run.status != 0) {
		char tail[300];

		iscsiadm_reason(run.output, tail, sizeof(tail));
		snprintf(why, whylen, "%s (iscsiadm status %d)%s%s", iscsi_err_text(run.status),
			 run.status, tail[0] ? ": " : "", tail);
	}
	if (r == 0) {
		r = run.status;
		if (out) {
			*out = run.output;
			run.output = NULL;
		}
	}
	fv_run_done(&run);
	return r;
}

/* --- login ---------------------------------------------------------------------- */

/*
 * Append "-n NAME -v VALUE" for each non-empty CHAP field, flagging the
 * secrets in @redact.  The mask has 32 bits: a secret past argv[31] could
 * not be hidden, so that is refused (-E2BIG) rather than logged.
 */
static int add_chap(const char **argv, int *n, unsigned int *redact, const char *prefix,
		    const struct chap *c, char names[4][96])
{
	const char *vals[] = { c->user, c->pass, c->user_in, c->pass_in };
	static const char *const keys[] = { "username", "password", "username_in", "password_in" };

	for (int i = 0; i < 4; i++) {
		if (!vals[i][0])
			continue;
		snprintf(names[i], 96, "%s.%s", prefix, keys[i]);
		argv[(*n)++] = "-n";
		argv[(*n)++] = names[i];
		argv[(*n)++] = "-v";
		if (i == 1 || i == 3) { /* secrets: never logged */
			if (*n >= 32)
				return -E2BIG;
			*redact |= 1U << *n;
		}
		argv[(*n)++] = vals[i];
	}
	return 0;
}

/*
 * sendtargets discovery at @portal; on success the portal the target
 * advertises for @iqn ("addr:port", preferring @portal itself) goes to @adv.
 *
 * It leaves nothing in open-iscsi's database.  Persistent
 * discovery ("-m discovery -t st") would write a discovery record and a
 * node record for EVERY target the portal advertises, with node.startup
 * as iscsid.conf says ("automatic" on some distributions: iscsid would log
 * in to all of them at its next start).  "-m discoverydb --discover -o
 * nonpersistent" only prints what the portal offers: no node record, and
 * no discovery record unless one exists already (then its settings are
 * used and it is left alone).  Discovery CHAP can reach iscsiadm only
 * through a discovery record: that one is ours, created for this discovery
 * and deleted right after it on every path, so its secret (0600 under the
 * iSCSI database directory) lives on disk for the seconds of the discovery.
 */
static void delete_discovery_record(struct fv_ctx *cx, const struct iscsivol *v,
				    const char *portal)
{
	const char *argv[] = { NULL, "-m", "discoverydb", "-t", "sendtargets", "-p", portal,
			       "-I", v->iface, "-o", "delete", NULL };
	char why[512];
	int r = iscsi_adm(cx, argv, 0, why, sizeof(why), NULL);

	if (r != 0 && r != ISCSI_ERR_NO_OBJS_FOUND)
		fv_log("could not delete the discovery record of %s: %s", portal, why);
}

/*
 * Does open-iscsi hold a discovery record for @portal (sendtargets)?
 * 1, 0, or <0 with @why.
 */
static int discovery_record_exists(struct fv_ctx *cx, const char *portal, char *why,
				   size_t whylen)
{
	const char *argv[] = { NULL, "-m", "discoverydb", "-t", "sendtargets", "-p", portal, NULL };
	int r = iscsi_adm(cx, argv, 0, why, whylen, NULL);

	if (r == 0)
		return 1;
	/* open-iscsi 2.1 answers a missing discovery record with a database error */
	if (r == ISCSI_ERR_NO_OBJS_FOUND || (r == ISCSI_ERR_IDBM && strstr(why, "not found")))
		return 0;
	return r < 0 ? r : -FV_ERR_HELPER;
}

/*
 * Discovery under the portal's lock: discovery records are keyed by portal,
 * so two targets behind one portal (two target locks) take turns here.
 * An existing discovery record that is not ours (the administrator's) is
 * used as it is by "-o nonpersistent" and never created, updated or
 * deleted; ours is claimed in the state dir before it is created.
 */
static int discover_locked(struct fv_ctx *cx, const struct iscsivol *v, const char *portal,
			   const struct creds *c, char **out, char *why, size_t whylen)
{
	char names[4][96];
	const char *argv[32];
	unsigned int redact = 0;
	bool chap = c && c->discovery.user[0];
	const char *disc[] = { NULL, "-m", "discoverydb", "-t", "sendtargets", "-p", portal,
			       "-I", v->iface, "--discover", "-o", "nonpersistent", NULL };
	int n, r, ours = iscsi_own_discovery(cx, portal, 0), exists;

	if (ours < 0)
		ours = 0;
	exists = discovery_record_exists(cx, portal, why, whylen);
	if (exists < 0)
		return exists;
	if (exists && ours) {
		/* ours, left by a killed call (with its secret): it goes first */
		delete_discovery_record(cx, v, portal);
		exists = discovery_record_exists(cx, portal, why, whylen);
		if (exists < 0)
			return exists;
	}
	if (!exists && ours)
		(void)iscsi_own_discovery(cx, portal, -1);
	if (exists) {
		fv_log("using the existing discovery record of %s as it is (not flexvol's)%s", portal,
		       chap ? "; the volume's discovery CHAP settings are not applied" : "");
		return iscsi_adm(cx, disc, 0, why, whylen, out);
	}
	if (!chap)
		return iscsi_adm(cx, disc, 0, why, whylen, out);
	/* the discovery record carries the discovery CHAP settings: claimed before it exists */
	r = iscsi_own_discovery(cx, portal, 1);
	if (r < 0) {
		snprintf(why, whylen, "cannot write the state record of the discovery record: %s",
			 strerror(-r));
		return r;
	}
	{
		const char *mk[] = { NULL, "-m", "discoverydb", "-t", "sendtargets", "-p", portal,
				     "-I", v->iface, "-o", "new", NULL };

		r = iscsi_adm(cx, mk, 0, why, whylen, NULL);
	}
	if (r == 0) {
		n = 0;
		argv[n++] = NULL;
		const char *head[] = { "-m", "discoverydb", "-t", "sendtargets", "-p", portal, "-I",
				       v->iface, "-o", "update", "-n",
				       "discovery.sendtargets.auth.authmethod", "-v", "CHAP" };
		for (size_t i = 0; i < ARRAY_SIZE(head); i++)
			argv[n++] = head[i];
		if (add_chap(argv, &n, &redact, "discovery.sendtargets.auth", &c->discovery,
			     names) < 0) {
			snprintf(why, whylen, "too many iscsiadm arguments to redact");
			r = -E2BIG;
		} else {
			argv[n] = NULL;
			r = iscsi_adm(cx, argv, redact, why, whylen, NULL);
			if (r == 0)
				r = iscsi_adm(cx, disc, 0, why, whylen, out);
		}
	}
	/* ours, with its secret: gone whatever happened */
	delete_discovery_record(cx, v, portal);
	if (discovery_record_exists(cx, portal, names[0], sizeof(names[0])) == 0)
		(void)iscsi_own_discovery(cx, portal, -1);
	return r;
}

static int discover(struct fv_ctx *cx, const struct iscsivol *v, const char *portal,
		    const struct creds *c, char *adv, size_t advlen, char *why, size_t whylen)
{
	_cleanup_free_ char *out = NULL;
	char *line, *save = NULL, name[PORTAL_MAX + 32];
	int lock, r;

	snprintf(name, sizeof(name), "iscsi-portal-%s", portal);
	lock = fv_lock(cx, name);
	if (lock < 0) {
		snprintf(why, whylen, "%s", fv_ctx_message(cx));
		return lock;
	}
	r = discover_locked(cx, v, portal, c, &out, why, whylen);
	fv_unlock(lock);
	if (r == ISCSI_ERR_LOGIN_AUTH_FAILED)
		snprintf(why, whylen, "discovery CHAP authentication failed (iscsiadm status 24)");
	if (r != 0)
		return r < 0 ? r : -FV_ERR_HELPER;
	/* lines: "<addr>:<port>,<tpgt> <target name>" */
	adv[0] = '\0';
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' '), *comma;

		if (!sp || strcasecmp(iscsi_trim(sp + 1), v->iqn))
			continue;
		*sp = '\0';
		comma = strrchr(line, ',');
		if (comma)
			*comma = '\0';
		if (!adv[0] || streq(iscsi_trim(line), portal))
			snprintf(adv, advlen, "%s", iscsi_trim(line));
	}
	if (!adv[0]) {
		snprintf(why, whylen, "the portal does not offer target '%s' (sendtargets discovery)",
			 v->iqn);
		return -ENOENT;
	}
	return 0;
}

/* Is any session to @iqn through @iface logged in?  (The kernel's view, sysfs.c.) */
static bool target_logged_in(const char *iqn, const char *iface)
{
	struct iscsi_view v;
	bool in = iscsi_view_load(&v, iqn) == 0;

	iscsi_view_keep_iface(&v, iface);
	in = in && iscsi_view_logged_in(&v);

	iscsi_view_free(&v);
	return in;
}

int iscsi_login_at(struct fv_ctx *cx, const struct iscsivol *v, const char *portal,
		   const struct creds *c, char *why, size_t whylen)
{
	char adv[PORTAL_MAX], names[4][96];
	struct iscsi_own own = { .sid = -1 };
	const char *argv[40];
	unsigned int redact = 0;
	bool chap = c && c->session.user[0];
	int n = 0, r;

	r = discover(cx, v, portal, c, adv, sizeof(adv), why, whylen);
	if (r != 0)
		return r;
	/*
	 * The node record (target, portal, iface) must be ours: one that
	 * exists without our claim is the administrator's, and is neither
	 * changed (its CHAP, its startup) nor deleted.  A claim of ours for
	 * another portal or iface (an earlier login elsewhere, killed) has its
	 * record deleted first.  Our claim is written before the record is
	 * created: a SIGKILL from here on leaves a record that is known ours.
	 */
	if (iscsi_own_read(cx, v->iqn, &own) == 0 &&
	    (!streq(own.portal, adv) || !streq(own.iface, v->iface))) {
		if (!target_logged_in(v->iqn, own.iface[0] ? own.iface : v->iface)) {
			const char *del[] = { NULL, "-m", "node", "-o", "delete", "-T", v->iqn, "-p",
					      own.portal, "-I", own.iface, NULL };
			char why2[512];

			(void)iscsi_adm(cx, del, 0, why2, sizeof(why2), NULL);
			(void)iscsi_own_remove(cx, v->iqn);
		}
		own.iqn[0] = '\0';
	}
	if (!own.iqn[0]) {
		const char *q[] = { NULL, "-m", "node", "-T", v->iqn, "-p", adv, "-I", v->iface, NULL };

		r = iscsi_adm(cx, q, 0, why, whylen, NULL);
		if (r == 0) {
			snprintf(why, whylen, "open-iscsi has a node record for this target at %s "
				 "(iface %s) that flexvol did not create; flexvol neither changes nor "
				 "deletes it: log in with it yourself (flexvol then uses that session) "
				 "or delete it", adv, v->iface);
			return -EEXIST;
		}
		if (r != ISCSI_ERR_NO_OBJS_FOUND)
			return r < 0 ? r : -FV_ERR_HELPER;
		snprintf(own.iqn, sizeof(own.iqn), "%s", v->iqn);
		snprintf(own.portal, sizeof(own.portal), "%s", adv);
		snprintf(own.iface, sizeof(own.iface), "%s", v->iface);
		own.sid = -1;
		r = iscsi_own_write(cx, &own);
		if (r < 0) {
			snprintf(why, whylen, "cannot write the state record of the node record: %s",
				 strerror(-r));
			return r;
		}
	}
	const char *mk[] = { NULL, "-m", "node", "-o", "new", "-T", v->iqn, "-p", adv, "-I",
			     v->iface, NULL };
	(void)iscsi_adm(cx, mk, 0, why, whylen, NULL);
	/* our settings on the node record: session CHAP, manual startup (kubelet decides) */
	argv[n++] = NULL;
	const char *head[] = { "-m", "node", "-T", v->iqn, "-p", adv, "-I", v->iface, "-o",
			       "update", "-n", "node.session.auth.authmethod", "-v",
			       chap ? "CHAP" : "None" };
	for (size_t i = 0; i < ARRAY_SIZE(head); i++)
		argv[n++] = head[i];
	if (chap && add_chap(argv, &n, &redact, "node.session.auth", &c->session, names) < 0) {
		snprintf(why, whylen, "too many iscsiadm arguments to redact");
		r = -E2BIG;
		goto fail;
	}
	argv[n++] = "-n";
	argv[n++] = "node.startup";
	argv[n++] = "-v";
	argv[n++] = "manual";
	argv[n] = NULL;
	r = iscsi_adm(cx, argv, redact, why, whylen, NULL);
	if (r != 0)
		goto fail;

	const char *login[] = { NULL, "-m", "node", "-T", v->iqn, "-p", adv, "-I", v->iface,
				"--login", NULL };
	r = iscsi_adm(cx, login, 0, why, whylen, NULL);
	if (r == ISCSI_ERR_SESS_EXISTS)
		r = 0; /* already logged in: what we wanted */
	if (r != 0)
		goto fail;
	/* the session's sid into our claim: only that session is ever logged out by us */
	{
		struct iscsi_view view;

		if (iscsi_view_load(&view, v->iqn) == 0)
			for (size_t i = 0; i < view.nsessions; i++) {
				const struct iscsi_session *se = &view.sessions[i];

				if (streq(se->iface, v->iface) && (!se->addr[0] || streq(se->addr, adv)) &&
				    se->sid > own.sid)
					own.sid = se->sid;
			}
		iscsi_view_free(&view);
		if (own.sid >= 0)
			(void)iscsi_own_write(cx, &own);
	}
	fv_log("logged in to %s at %s (discovered via %s, iface %s%s), session %d", v->iqn, adv,
	       portal, v->iface, chap ? ", CHAP" : "", own.sid);
	return 0;
fail:
	/* no session came of it: the record (with a CHAP secret) goes, unless a session uses it */
	if (!target_logged_in(v->iqn, v->iface)) {
		const char *del[] = { NULL, "-m", "node", "-o", "delete", "-T", v->iqn, "-p", adv,
				      "-I", v->iface, NULL };
		char why2[512];
		int k = iscsi_adm(cx, del, 0, why2, sizeof(why2), NULL);

		if (k != 0 && k != ISCSI_ERR_NO_OBJS_FOUND)
			fv_log("could not delete the node record of %s at %s: %s", v->iqn, adv, why2);
		else
			(void)iscsi_own_remove(cx, v->iqn);
	}
	return r < 0 ? r : -FV_ERR_HELPER;
}
