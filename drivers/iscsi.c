/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iscsi: attachable block volumes on iSCSI LUNs, through open-iscsi
 * (iscsiadm + iscsid on the node), attach:true.
 *
 *   attach         validate, return the by-path name of the LUN; touches nothing
 *   isattached     this node: a logged-in session to the target with the LUN's
 *                  disk (sysfs); another node: true (attach is logical)
 *   waitforattach  sendtargets discovery + login (CHAP from a root-only file),
 *                  idempotent; wait event-driven for the LUN's disk, return it
 *   mountdevice    the same login check, blkid probe, mkfs only when blank, mount
 *   mount/unmount  bind the global mount into the pod dir / undo, dir left empty
 *   unmountdevice  unmount; log the target out when no LUN of it is in use
 *   detach         this node: the same release, found from the PV name (state)
 *   expandfs       rescan the LUN's capacity, grow the filesystem online
 *
 * Sessions are shared by every LUN of a target (kubernetes#41041, #73181):
 * whether a target may be logged out is decided from the kernel alone - is
 * any disk of any session to it mounted or held (mountinfo device numbers,
 * sysfs holders) - under a per-target lock that every login and logout
 * decision takes.  The state record pv -> (portal, iqn, lun) is a cache
 * for detach, which gets only the PV name; nothing depends on it existing.
 *
 * The CHAP credentials file (option chapCredentialsFile) is node-local,
 * owned by root, not group/world accessible, not a symlink:
 *
 *	# key = value; '#' starts a comment line
 *	discovery.username = name	# sendtargets discovery CHAP
 *	discovery.password = secret
 *	discovery.username_in = name	# mutual (target authenticates to us)
 *	discovery.password_in = secret
 *	session.username = name		# login CHAP
 *	session.password = secret
 *	session.username_in = name
 *	session.password_in = secret
 *
 * Secrets go to iscsiadm on argv (flagged in the redact mask, never logged)
 * and are stored by open-iscsi in its root-only node database.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <libudev.h>
#include <stdio.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/config.h"
#include "fv/driver.h"
#include "fv/exec.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/state.h"
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
#define SYSFS_SESSIONS "/sys/class/iscsi_session"

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

struct iscsivol {
	char portal[MAX_PORTALS][PORTAL_MAX]; /* "host:port"; [0] is targetPortal */
	int nportals;
	const char *iqn;
	unsigned int lun;
	const char *iface;
	const char *credfile; /* absolute path, or NULL */
	const char *fstype;
	bool ro;
	const char *volume;
};

struct chap {
	char user[CHAP_MAX + 1], pass[CHAP_MAX + 1];
	char user_in[CHAP_MAX + 1], pass_in[CHAP_MAX + 1];
};

struct creds {
	struct chap discovery, session;
};

/* --- option validation (lexical only: attach runs in the controller-manager) --- */

static bool all_chars(const char *s, const char *set)
{
	return s[strspn(s, set)] == '\0';
}

#define LOWER_DIGITS "abcdefghijklmnopqrstuvwxyz0123456789"
#define HEX "0123456789abcdefABCDEF"

/* iqn.yyyy-mm.reversed.domain[:anything], eui.<16 hex>, naa.<16|32 hex> (RFC 3720 3.2.6.3) */
static bool valid_target_name(const char *s)
{
	size_t n = strlen(s);

	if (n > IQN_MAX)
		return false;
	if (!strncmp(s, "eui.", 4))
		return n == 4 + 16 && all_chars(s + 4, HEX);
	if (!strncmp(s, "naa.", 4))
		return (n == 4 + 16 || n == 4 + 32) && all_chars(s + 4, HEX);
	if (strncmp(s, "iqn.", 4) || n < 4 + 7 + 2)
		return false;
	/* the date: yyyy-mm */
	for (int i = 4; i < 11; i++)
		if (i == 8 ? s[i] != '-' : !isdigit((unsigned char)s[i]))
			return false;
	if (s[11] != '.' || s[12] == '.' || s[12] == ':' || s[12] == '-' || !s[12])
		return false;
	/* names are lower case after stringprep: letters, digits, '-', '.', ':' */
	return all_chars(s + 12, LOWER_DIGITS "-.:");
}

static bool valid_hostname(const char *h)
{
	size_t n = strlen(h), label = 0;

	if (!n || n > 253 || !all_chars(h, LOWER_DIGITS "ABCDEFGHIJKLMNOPQRSTUVWXYZ-."))
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || h[i] == '.') {
			if (!label || label > 63 || h[i - 1] == '-')
				return false;
			label = 0;
		} else {
			if (!label && h[i] == '-')
				return false;
			label++;
		}
	}
	return true;
}

/*
 * "host[:port]" with host an IPv4 address, "[IPv6]" or a DNS name; the
 * normalised "host:port" (port defaulted to 3260) goes to @ret.
 */
static bool parse_portal(const char *s, char *ret, size_t len)
{
	char host[PORTAL_MAX];
	const char *colon;
	uint64_t port = DEFAULT_PORT;
	unsigned char addr[16];

	if (!*s || strlen(s) >= sizeof(host))
		return false;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end || end - s - 1 >= (long)sizeof(host))
			return false;
		snprintf(host, sizeof(host), "%.*s", (int)(end - s - 1), s + 1);
		if (inet_pton(AF_INET6, host, addr) != 1)
			return false;
		colon = end[1] == ':' ? end + 1 : NULL;
		if (!colon && end[1])
			return false;
		snprintf(host, sizeof(host), "%.*s", (int)(end - s + 1), s);
	} else {
		colon = strchr(s, ':');
		if (colon && strchr(colon + 1, ':'))
			return false; /* a bare IPv6 address: must be bracketed */
		snprintf(host, sizeof(host), "%.*s", (int)(colon ? colon - s : (long)strlen(s)), s);
		if (inet_pton(AF_INET, host, addr) != 1) {
			/* not dotted-quad IPv4: then a DNS name, but never all digits and dots */
			if (all_chars(host, "0123456789.") || !valid_hostname(host))
				return false;
		}
	}
	if (colon && (fv_parse_u64(colon + 1, &port) < 0 || port < 1 || port > 65535))
		return false;
	return snprintf(ret, len, "%s:%u", host, (unsigned int)port) < (int)len;
}

static int parse(struct fv_ctx *cx, const struct fv_opts *o, struct iscsivol *v)
{
	const char *s, *lun, *extra;
	char tmp[PATH_MAX];
	uint64_t n;
	int r;

	memset(v, 0, sizeof(*v));
	r = fv_opt_required(cx, o, "targetPortal", &s);
	if (r < 0)
		return r;
	if (!parse_portal(s, v->portal[0], sizeof(v->portal[0])))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'targetPortal' must be host[:port] (IPv4, [IPv6] or a DNS "
			       "name; port 1-65535, default 3260): '%s'",
			       s);
	v->nportals = 1;
	r = fv_opt(cx, o, "portals", &extra);
	if (r < 0)
		return r;
	if (r == 0) {
		const char *p = extra;

		while (*p) {
			size_t k = strcspn(p, ",");
			char one[PORTAL_MAX];

			if (k == 0 || k >= sizeof(one))
				return fv_fail(cx, -FV_ERR_BADOPT,
					       "option 'portals' must be a comma-separated list of "
					       "host[:port]: '%s'",
					       extra);
			snprintf(one, sizeof(one), "%.*s", (int)k, p);
			if (v->nportals == MAX_PORTALS)
				return fv_fail(cx, -FV_ERR_BADOPT,
					       "option 'portals' lists more than %d portals",
					       MAX_PORTALS - 1);
			if (!parse_portal(one, v->portal[v->nportals], sizeof(v->portal[0])))
				return fv_fail(cx, -FV_ERR_BADOPT,
					       "option 'portals': '%s' is not host[:port]", one);
			v->nportals++;
			p += k;
			if (*p && !*++p)
				return fv_fail(cx, -FV_ERR_BADOPT,
					       "option 'portals' ends with a comma: '%s'", extra);
		}
	}
	r = fv_opt_required(cx, o, "iqn", &v->iqn);
	if (r < 0)
		return r;
	if (!valid_target_name(v->iqn))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'iqn' is not an iSCSI name (iqn.yyyy-mm.domain[:name] in "
			       "lower case, eui.<16 hex>, naa.<16 or 32 hex>): '%s'",
			       v->iqn);
	r = fv_opt_required(cx, o, "lun", &lun);
	if (r < 0)
		return r;
	if (fv_parse_u64(lun, &n) < 0 || n > LUN_MAX)
		return fv_fail(cx, -FV_ERR_BADOPT, "option 'lun' must be a number from 0 to %d: '%s'",
			       LUN_MAX, lun);
	v->lun = (unsigned int)n;
	r = fv_opt(cx, o, "iface", &v->iface);
	if (r < 0)
		return r;
	if (r > 0)
		v->iface = DEFAULT_IFACE;
	if (strlen(v->iface) > 64 || v->iface[0] == '.' || v->iface[0] == '-' ||
	    !all_chars(v->iface, LOWER_DIGITS "ABCDEFGHIJKLMNOPQRSTUVWXYZ._-"))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'iface' must be an open-iscsi iface name ([A-Za-z0-9._-], "
			       "at most 64): '%s'",
			       v->iface);
	r = fv_opt(cx, o, "chapCredentialsFile", &v->credfile);
	if (r < 0)
		return r;
	if (r == 0 && (v->credfile[0] != '/' ||
		       fv_path_confine("/", v->credfile, tmp, sizeof(tmp)) < 0))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'chapCredentialsFile' must be an absolute path without "
			       "'..': '%s'",
			       v->credfile);
	r = fv_fs_check_option(cx, o->fstype);
	if (r < 0)
		return r;
	v->fstype = o->fstype;
	v->ro = o->readonly;
	v->volume = o->volume;
	return 0;
}

/* udev's path_id: LUNs below 256 in decimal, larger ones in SAM-2 hex */
static void format_lun(unsigned int lun, char *buf, size_t len)
{
	if (lun < 256)
		snprintf(buf, len, "lun-%u", lun);
	else
		snprintf(buf, len, "lun-0x%04x%04x00000000", lun & 0xffff, (lun >> 16) & 0xffff);
}

/* --- the credentials file ------------------------------------------------------ */

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

static char *chap_field(struct creds *c, const char *key)
{
	static const char *const names[] = { "username", "password", "username_in", "password_in" };
	struct chap *ch;
	const char *dot = strchr(key, '.');

	if (!dot)
		return NULL;
	if (!strncmp(key, "discovery.", 10))
		ch = &c->discovery;
	else if (!strncmp(key, "session.", 8))
		ch = &c->session;
	else
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (streq(dot + 1, names[i]))
			return i == 0 ? ch->user : i == 1 ? ch->pass : i == 2 ? ch->user_in : ch->pass_in;
	return NULL;
}

static int check_chap(struct fv_ctx *cx, const char *path, const char *what, const struct chap *c)
{
	if (!c->user[0] != !c->pass[0])
		return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s': %s.username and %s.password "
			       "go together", path, what, what);
	if (!c->user_in[0] != !c->pass_in[0])
		return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s': %s.username_in and "
			       "%s.password_in go together", path, what, what);
	if (c->user_in[0] && !c->user[0])
		return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s': mutual CHAP (%s.*_in) "
			       "needs %s.username and %s.password too", path, what, what, what);
	return 0;
}

/* the file's text holds secrets: wipe it before freeing, on every path */
static void erase_credbuf(char **p)
{
	if (*p)
		explicit_bzero(*p, CRED_FILE_MAX + 2);
	free(*p);
}

/*
 * Read the credentials file: a regular file (not a symlink), owned by root,
 * with no group or world permission bits.  It is opened like a hostile
 * file: O_NOFOLLOW, and O_NONBLOCK so that a FIFO cannot block the open
 * (fstat then refuses anything but a regular file, before any read).
 * No text of the file is ever logged or quoted in a message, not even a
 * key we do not know: messages name the line number, and a known key's
 * name.
 */
static int read_creds(struct fv_ctx *cx, const char *path, struct creds *c)
{
	_cleanup_close_ int fd = -1;
	_cleanup_(erase_credbuf) char *buf = NULL;
	struct stat st;
	char *line, *next;
	size_t len = 0;
	int lineno = 0, r;

	memset(c, 0, sizeof(*c));
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ELOOP)
		return fv_fail(cx, -EPERM, "credentials file '%s' is a symlink; refusing it", path);
	if (fd < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot open credentials file '%s': %m", path);
	if (fstat(fd, &st) < 0)
		return fv_fail(cx, NEG_ERRNO(), "cannot stat credentials file '%s': %m", path);
	if (!S_ISREG(st.st_mode))
		return fv_fail(cx, -EPERM, "credentials file '%s' is not a regular file", path);
	if (st.st_uid != 0)
		return fv_fail(cx, -EPERM, "credentials file '%s' is owned by uid %u, not root; "
			       "refusing it", path, (unsigned int)st.st_uid);
	if (st.st_mode & 077)
		return fv_fail(cx, -EPERM, "credentials file '%s' has mode %04o: group/world may "
			       "access it; refusing it (chmod 600)", path,
			       (unsigned int)(st.st_mode & 07777));
	if (st.st_size > CRED_FILE_MAX)
		return fv_fail(cx, -EFBIG, "credentials file '%s' is larger than %d bytes", path,
			       CRED_FILE_MAX);
	buf = calloc(1, CRED_FILE_MAX + 2);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t k = read(fd, buf + len, CRED_FILE_MAX + 1 - len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return fv_fail(cx, NEG_ERRNO(), "cannot read credentials file '%s': %m", path);
		if (k == 0)
			break;
		len += (size_t)k;
		if (len > CRED_FILE_MAX)
			return fv_fail(cx, -EFBIG, "credentials file '%s' is larger than %d bytes",
				       path, CRED_FILE_MAX);
	}
	if (memchr(buf, '\0', len))
		return fv_fail(cx, -EINVAL, "credentials file '%s' is not text", path);
	for (line = buf; line && *line; line = next) {
		char *eq, *key, *val, *field;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		line = trim(line);
		if (!*line || *line == '#')
			continue;
		eq = strchr(line, '=');
		if (!eq)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %d: not "
				       "'key = value'", path, lineno);
		*eq = '\0';
		key = trim(line);
		val = trim(eq + 1);
		field = chap_field(c, key);
		/* the key is not quoted: a typo'd key or a ':' for '=' may carry a secret */
		if (!field)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %d: unknown "
				       "key (discovery.* or session.* username, password, "
				       "username_in, password_in)", path, lineno);
		if (*field)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %d: '%s' is "
				       "set twice", path, lineno, key);
		if (!*val || strlen(val) > CHAP_MAX)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %d: the value "
				       "of '%s' must be 1 to %d characters", path, lineno, key,
				       CHAP_MAX);
		for (const char *p = val; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %d: "
					       "control character in the value of '%s'", path,
					       lineno, key);
		strcpy(field, val);
	}
	r = check_chap(cx, path, "discovery", &c->discovery);
	if (r < 0)
		return r;
	return check_chap(cx, path, "session", &c->session);
}

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

/*
 * Run iscsiadm with @argv (argv[0] is filled in) under the helper deadline.
 * Returns its exit status (>= 0), or a negative error with a message in
 * @why (timeout, not installed).  @out (may be NULL) gets the output.
 */
/*
 * The end of the login phase (monotonic ms; 0: none).  Every iscsiadm run
 * is cut to what is left of it, so many portals that hang cannot add up
 * past kubelet's 10 min waitforattach timeout.
 */
static uint64_t login_deadline;

static int iscsiadm(struct fv_ctx *cx, const char **argv, unsigned int redact, char *why,
		    size_t whylen, char **out)
{
	unsigned int timeout = fv_ctx_config(cx)->helper_timeout;
	uint64_t now = fv_now_ms();
	struct fv_run run;
	int r;

	if (login_deadline) {
		uint64_t left = login_deadline > now ? (login_deadline - now + 999) / 1000 : 1;

		if (left < timeout)
			timeout = (unsigned int)left;
	}
	argv[0] = "iscsiadm";
	r = fv_exec_status(cx, argv, redact, timeout, &run);
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

/* --- sysfs: sessions and their disks --------------------------------------------- */

struct session {
	int sid;
	char target[IQN_MAX + 32];
	char state[32];
};

struct lundisk {
	int sid;
	unsigned int lun;
	char name[32]; /* sdX */
	dev_t devt;
};

static int read_session(int sid, struct session *s)
{
	char path[128];

	s->sid = sid;
	snprintf(path, sizeof(path), SYSFS_SESSIONS "/session%d/targetname", sid);
	if (fv_read_line(path, s->target, sizeof(s->target)) < 0)
		return -ENOENT; /* went away between readdir and read: not an error */
	snprintf(path, sizeof(path), SYSFS_SESSIONS "/session%d/state", sid);
	if (fv_read_line(path, s->state, sizeof(s->state)) < 0)
		s->state[0] = '\0';
	return 0;
}

/* The sessions to @iqn (all of them when NULL), at most @max.  Returns the count. */
static int target_sessions(const char *iqn, struct session *list, int max)
{
	DIR *d = opendir(SYSFS_SESSIONS);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0; /* no iSCSI transport loaded: no sessions */
	while ((e = readdir(d)) && n < max) {
		struct session s;
		int sid;
		char c;

		if (sscanf(e->d_name, "session%d%c", &sid, &c) != 1 || read_session(sid, &s) < 0)
			continue;
		if (iqn && strcasecmp(s.target, iqn))
			continue;
		list[n++] = s;
	}
	closedir(d);
	return n;
}

static int read_devt(const char *sysdir, dev_t *ret)
{
	char path[PATH_MAX], buf[32];
	unsigned int maj, min;

	snprintf(path, sizeof(path), "%s/dev", sysdir);
	if (fv_read_line(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%u:%u", &maj, &min) != 2)
		return -ENOENT;
	*ret = makedev(maj, min);
	return 0;
}

/*
 * The disks of session @sid: <session>/device/target<H:C:T>/<H:C:T:L>/block/<sdX>.
 * Returns the count (at most @max).
 */
static int session_disks(int sid, struct lundisk *list, int max)
{
	char dir[128], tdir[PATH_MAX], bdir[PATH_MAX];
	DIR *d, *td, *bd;
	struct dirent *e, *te, *be;
	int n = 0;

	snprintf(dir, sizeof(dir), SYSFS_SESSIONS "/session%d/device", sid);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		if (strncmp(e->d_name, "target", 6))
			continue;
		snprintf(tdir, sizeof(tdir), "%s/%s", dir, e->d_name);
		td = opendir(tdir);
		if (!td)
			continue;
		while ((te = readdir(td)) && n < max) {
			unsigned int h, c, t, l;
			char x;

			if (sscanf(te->d_name, "%u:%u:%u:%u%c", &h, &c, &t, &l, &x) != 4)
				continue;
			snprintf(bdir, sizeof(bdir), "%s/%s/block", tdir, te->d_name);
			bd = opendir(bdir);
			if (!bd)
				continue; /* LUN 0 of tgt is a controller, not a disk */
			while ((be = readdir(bd)) && n < max) {
				char sys[PATH_MAX + 64];

				if (be->d_name[0] == '.')
					continue;
				snprintf(sys, sizeof(sys), "%s/%s", bdir, be->d_name);
				list[n].sid = sid;
				list[n].lun = l;
				snprintf(list[n].name, sizeof(list[n].name), "%s", be->d_name);
				if (read_devt(sys, &list[n].devt) == 0)
					n++;
			}
			closedir(bd);
		}
		closedir(td);
	}
	closedir(d);
	return n;
}

/*
 * The disk of LUN @lun of @iqn on a logged-in session.  Returns 0 (found,
 * "/dev/sdX" in @dev), 1 (not found).
 */
static int find_lun_disk(const char *iqn, unsigned int lun, struct lundisk *ret, char *dev,
			 size_t len)
{
	struct session s[16];
	struct lundisk disks[64];
	int ns = target_sessions(iqn, s, ARRAY_SIZE(s));

	for (int i = 0; i < ns; i++) {
		int nd;

		if (strcmp(s[i].state, "LOGGED_IN"))
			continue;
		nd = session_disks(s[i].sid, disks, ARRAY_SIZE(disks));
		for (int j = 0; j < nd; j++) {
			char node[64];
			struct stat st;

			if (disks[j].lun != lun)
				continue;
			snprintf(node, sizeof(node), "/dev/%s", disks[j].name);
			if (stat(node, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != disks[j].devt)
				continue;
			if (ret)
				*ret = disks[j];
			snprintf(dev, len, "%s", node);
			return 0;
		}
	}
	return 1;
}

/* Is the disk @name (or a partition of it) mounted anywhere, or held (dm, md)? */
static int disk_in_use(const struct lundisk *dk, char *why, size_t len)
{
	char dir[128], sub[PATH_MAX];
	DIR *d;
	struct dirent *e;
	int r = fv_mnt_count_devno(dk->devt);

	if (r < 0)
		return r;
	if (r > 0) {
		snprintf(why, len, "/dev/%s (LUN %u) is mounted", dk->name, dk->lun);
		return 1;
	}
	snprintf(dir, sizeof(dir), "/sys/block/%s/holders", dk->name);
	if (fv_path_is_empty(dir) == 0) {
		snprintf(why, len, "/dev/%s (LUN %u) is held by another device", dk->name, dk->lun);
		return 1;
	}
	/* partitions: /sys/block/sdX/sdXN */
	snprintf(dir, sizeof(dir), "/sys/block/%s", dk->name);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		dev_t pt;

		if (strncmp(e->d_name, dk->name, strlen(dk->name)))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
		if (read_devt(sub, &pt) == 0 && fv_mnt_count_devno(pt) > 0) {
			snprintf(why, len, "/dev/%s (LUN %u) is mounted", e->d_name, dk->lun);
			closedir(d);
			return 1;
		}
	}
	closedir(d);
	return 0;
}

/* Remove the SCSI device of an unused LUN disk (the session stays for its siblings). */
static void delete_disk(const struct lundisk *dk)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "/sys/block/%s/device/delete", dk->name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		fv_log("could not remove /dev/%s (LUN %u): %m", dk->name, dk->lun);
	else
		fv_log("removed /dev/%s (LUN %u); the session stays for other LUNs", dk->name,
		       dk->lun);
	if (fd >= 0)
		close(fd);
}

/*
 * Log every session to @iqn out - unless a disk of any of them is still in
 * use on this node (mounted, held).  Then, when @lun >= 0, only that LUN's
 * disks go, if unused (the in-tree plugin's deleteDevice).  Call with the
 * target lock held.
 */
static int release_target(struct fv_ctx *cx, const char *iqn, int lun)
{
	struct session s[16];
	struct lundisk disks[64];
	char why[512], busy[512] = "";
	int ns = target_sessions(iqn, s, ARRAY_SIZE(s));
	uint64_t t0 = fv_now_ms();

	for (int i = 0; i < ns; i++) {
		int nd = session_disks(s[i].sid, disks, ARRAY_SIZE(disks));

		for (int j = 0; j < nd; j++) {
			int r = disk_in_use(&disks[j], why, sizeof(why));

			if (r < 0)
				return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
			if (r > 0 && (int)disks[j].lun == lun)
				return 0; /* this very LUN is in use: nothing to release */
			if (r > 0 && !busy[0])
				snprintf(busy, sizeof(busy), "%s", why);
		}
	}
	if (busy[0]) {
		fv_log("keeping the session to %s: %s", iqn, busy);
		for (int i = 0; i < ns && lun >= 0; i++) {
			int nd = session_disks(s[i].sid, disks, ARRAY_SIZE(disks));

			for (int j = 0; j < nd; j++)
				if ((int)disks[j].lun == lun)
					delete_disk(&disks[j]);
		}
		return 0;
	}
	for (int i = 0; i < ns; i++) {
		char sid[16];
		const char *argv[] = { NULL, "-m", "session", "-r", sid, "--logout", NULL };
		int r;

		snprintf(sid, sizeof(sid), "%d", s[i].sid);
		r = iscsiadm(cx, argv, 0, why, sizeof(why), NULL);
		/* gone meanwhile: the goal is reached */
		if (r == ISCSI_ERR_SESS_NOT_FOUND || r == ISCSI_ERR_NO_OBJS_FOUND ||
		    r == ISCSI_ERR_SYSFS_LOOKUP)
			r = 0;
		if (r != 0)
			return fv_fail(cx, r < 0 ? r : -FV_ERR_HELPER,
				       "logout of session %d to '%s' failed: %s", s[i].sid, iqn, why);
	}
	if (ns > 0) {
		/* forget the node records: no stale CHAP secrets, no login at iscsid start */
		const char *argv[] = { NULL, "-m", "node", "-T", iqn, "-o", "delete", NULL };
		int r = iscsiadm(cx, argv, 0, why, sizeof(why), NULL);

		if (r != 0 && r != ISCSI_ERR_NO_OBJS_FOUND)
			fv_log("could not delete the node records of %s: %s", iqn, why);
		fv_log("logged out of %s (%d session%s) in %llu ms", iqn, ns, ns == 1 ? "" : "s",
		       (unsigned long long)(fv_now_ms() - t0));
	}
	return 0;
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
 * It leaves nothing in open-iscsi's database (issue 9 item 7).  Persistent
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
	int r = iscsiadm(cx, argv, 0, why, sizeof(why), NULL);

	if (r != 0 && r != ISCSI_ERR_NO_OBJS_FOUND)
		fv_log("could not delete the discovery record of %s: %s", portal, why);
}

static int discover(struct fv_ctx *cx, const struct iscsivol *v, const char *portal,
		    const struct creds *c, char *adv, size_t advlen, char *why, size_t whylen)
{
	_cleanup_free_ char *out = NULL;
	char names[4][96];
	const char *argv[32];
	unsigned int redact = 0;
	bool chap = c && c->discovery.user[0];
	char *line, *save = NULL;
	const char *disc[] = { NULL, "-m", "discoverydb", "-t", "sendtargets", "-p", portal,
			       "-I", v->iface, "--discover", "-o", "nonpersistent", NULL };
	int n, r;

	if (chap) {
		/* the discovery record carries the discovery CHAP settings */
		const char *mk[] = { NULL, "-m", "discoverydb", "-t", "sendtargets", "-p", portal,
				     "-I", v->iface, "-o", "new", NULL };

		r = iscsiadm(cx, mk, 0, why, whylen, NULL);
		if (r != 0) {
			delete_discovery_record(cx, v, portal);
			return r < 0 ? r : -FV_ERR_HELPER;
		}
		n = 0;
		argv[n++] = NULL;
		const char *head[] = { "-m", "discoverydb", "-t", "sendtargets", "-p", portal, "-I",
				       v->iface, "-o", "update", "-n",
				       "discovery.sendtargets.auth.authmethod", "-v", "CHAP" };
		for (size_t i = 0; i < ARRAY_SIZE(head); i++)
			argv[n++] = head[i];
		if (add_chap(argv, &n, &redact, "discovery.sendtargets.auth", &c->discovery,
			     names) < 0) {
			delete_discovery_record(cx, v, portal);
			snprintf(why, whylen, "too many iscsiadm arguments to redact");
			return -E2BIG;
		}
		argv[n] = NULL;
		r = iscsiadm(cx, argv, redact, why, whylen, NULL);
		if (r == 0)
			r = iscsiadm(cx, disc, 0, why, whylen, &out);
		/* ours, with its secret: gone whatever happened */
		delete_discovery_record(cx, v, portal);
	} else {
		r = iscsiadm(cx, disc, 0, why, whylen, &out);
	}
	if (r == ISCSI_ERR_LOGIN_AUTH_FAILED)
		snprintf(why, whylen, "discovery CHAP authentication failed (iscsiadm status 24)");
	if (r != 0)
		return r < 0 ? r : -FV_ERR_HELPER;
	/* lines: "<addr>:<port>,<tpgt> <target name>" */
	adv[0] = '\0';
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' '), *comma;

		if (!sp || strcasecmp(trim(sp + 1), v->iqn))
			continue;
		*sp = '\0';
		comma = strrchr(line, ',');
		if (comma)
			*comma = '\0';
		if (!adv[0] || streq(trim(line), portal))
			snprintf(adv, advlen, "%s", trim(line));
	}
	if (!adv[0]) {
		snprintf(why, whylen, "the portal does not offer target '%s' (sendtargets discovery)",
			 v->iqn);
		return -ENOENT;
	}
	return 0;
}

static bool target_logged_in(const char *iqn);

static int login_at(struct fv_ctx *cx, const struct iscsivol *v, const char *portal,
		    const struct creds *c, char *why, size_t whylen)
{
	char adv[PORTAL_MAX], names[4][96];
	const char *argv[40];
	unsigned int redact = 0;
	bool chap = c && c->session.user[0];
	int n = 0, r;

	r = discover(cx, v, portal, c, adv, sizeof(adv), why, whylen);
	if (r != 0)
		return r;
	/*
	 * Exactly one node record, ours: "-o new" for this target, portal and
	 * iface (discovery wrote none).  Its status is not checked: a record
	 * left by an earlier, killed call may exist, and a real failure shows
	 * in the update that follows ("no records found").  Until that update
	 * the record has iscsid.conf's node.startup; a SIGKILL in between
	 * leaves this one record, which the retry updates and the logout
	 * deletes.
	 */
	const char *mk[] = { NULL, "-m", "node", "-o", "new", "-T", v->iqn, "-p", adv, "-I",
			     v->iface, NULL };
	(void)iscsiadm(cx, mk, 0, why, whylen, NULL);
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
	r = iscsiadm(cx, argv, redact, why, whylen, NULL);
	if (r != 0)
		goto fail;

	const char *login[] = { NULL, "-m", "node", "-T", v->iqn, "-p", adv, "-I", v->iface,
				"--login", NULL };
	r = iscsiadm(cx, login, 0, why, whylen, NULL);
	if (r == ISCSI_ERR_SESS_EXISTS)
		r = 0; /* already logged in: what we wanted */
	if (r != 0)
		goto fail;
	fv_log("logged in to %s at %s (discovered via %s, iface %s%s)", v->iqn, adv, portal,
	       v->iface, chap ? ", CHAP" : "");
	return 0;
fail:
	/* no session came of it: the record (with a CHAP secret) goes, unless a session uses it */
	if (!target_logged_in(v->iqn)) {
		const char *del[] = { NULL, "-m", "node", "-o", "delete", "-T", v->iqn, "-p", adv,
				      "-I", v->iface, NULL };
		char why2[512];
		int k = iscsiadm(cx, del, 0, why2, sizeof(why2), NULL);

		if (k != 0 && k != ISCSI_ERR_NO_OBJS_FOUND)
			fv_log("could not delete the node record of %s at %s: %s", v->iqn, adv, why2);
	}
	return r < 0 ? r : -FV_ERR_HELPER;
}

struct lunmatch {
	const char *iqn;
	unsigned int lun;
};

/* udev: a disk whose scsi_device is H:C:T:<lun> under an iSCSI session to <iqn> */
static bool match_lun(struct udev_device *d, void *arg)
{
	const struct lunmatch *m = arg;
	const char *type = udev_device_get_devtype(d);
	struct udev_device *sd, *p;
	unsigned int h, c, t, l;
	char x;

	if (!type || !streq(type, "disk"))
		return false;
	sd = udev_device_get_parent_with_subsystem_devtype(d, "scsi", "scsi_device");
	if (!sd || sscanf(udev_device_get_sysname(sd), "%u:%u:%u:%u%c", &h, &c, &t, &l, &x) != 4 ||
	    l != m->lun)
		return false;
	for (p = udev_device_get_parent(sd); p; p = udev_device_get_parent(p)) {
		const char *name = udev_device_get_sysname(p);
		char path[PATH_MAX], target[IQN_MAX + 32];
		int sid;

		if (!name || sscanf(name, "session%d%c", &sid, &x) != 1)
			continue;
		snprintf(path, sizeof(path), "%s/iscsi_session/%s/targetname",
			 udev_device_get_syspath(p), name);
		return fv_read_line(path, target, sizeof(target)) > 0 && !strcasecmp(target, m->iqn);
	}
	return false;
}

/* Ask the target for its LUNs again (a LUN added after login). */
static void rescan_target(struct fv_ctx *cx, const char *iqn)
{
	struct session s[16];
	char why[512];
	int ns = target_sessions(iqn, s, ARRAY_SIZE(s));

	for (int i = 0; i < ns; i++) {
		char sid[16];
		const char *argv[] = { NULL, "-m", "session", "-r", sid, "--rescan", NULL };

		snprintf(sid, sizeof(sid), "%d", s[i].sid);
		if (iscsiadm(cx, argv, 0, why, sizeof(why), NULL) != 0)
			fv_log("rescan of session %d failed: %s", s[i].sid, why);
	}
}

/* After a device wait failed: which LUNs does the target have? */
static void explain_missing_lun(struct fv_ctx *cx, const struct iscsivol *v)
{
	struct session s[16];
	struct lundisk disks[64];
	char luns[256] = "", msg[512];
	int ns = target_sessions(v->iqn, s, ARRAY_SIZE(s)), n = 0;

	for (int i = 0; i < ns; i++) {
		int nd = session_disks(s[i].sid, disks, ARRAY_SIZE(disks));

		for (int j = 0; j < nd; j++) {
			size_t k = strlen(luns);

			snprintf(luns + k, sizeof(luns) - k, "%s%u", n++ ? ", " : "", disks[j].lun);
		}
	}
	snprintf(msg, sizeof(msg), "LUN %u of '%s' has no disk on this node; "
		 "the target's disks are LUN%s %s", v->lun, v->iqn, n == 1 ? "" : "s",
		 n ? luns : "(none)");
	fv_ctx_add_detail(cx, msg);
}

static bool target_logged_in(const char *iqn)
{
	struct session s[16];
	int ns = target_sessions(iqn, s, ARRAY_SIZE(s));

	for (int i = 0; i < ns; i++)
		if (streq(s[i].state, "LOGGED_IN"))
			return true;
	return false;
}

/*
 * The node-local attach: a session to the target (reused when there is
 * one), and the LUN's disk.  Call with the target lock held.
 */
static int ensure_attached(struct fv_ctx *cx, const struct iscsivol *v, char *dev, size_t len)
{
	const struct fv_config *cfg = fv_ctx_config(cx);
	struct lunmatch m = { v->iqn, v->lun };
	struct fv_devwait *w = NULL;
	struct lundisk dk;
	char errs[1536] = "", why[768];
	struct creds c;
	bool had_session, logged_in = false;
	uint64_t t0, t_login = 0;
	int r;

	if (find_lun_disk(v->iqn, v->lun, NULL, dev, len) == 0)
		return 0;
	r = fv_devwait_open(cx, &w); /* before the login: no event can be missed */
	if (r < 0)
		return r;
	t0 = fv_now_ms();
	had_session = target_logged_in(v->iqn);
	if (had_session) {
		/* logged in for another LUN; this one may be new to the session */
		rescan_target(cx, v->iqn);
	} else {
		if (v->credfile) {
			r = read_creds(cx, v->credfile, &c);
			if (r < 0)
				goto out;
		}
		/*
		 * All portals together get four helper deadlines (8 min by
		 * default), then the device wait its own: below kubelet's 10 min.
		 */
		login_deadline = t0 + 4ULL * cfg->helper_timeout * 1000;
		for (int i = 0; i < v->nportals && !logged_in; i++) {
			size_t k = strlen(errs);

			if (fv_now_ms() >= login_deadline) {
				snprintf(errs + k, sizeof(errs) - k, "%sgave up after %u s before "
					 "trying %s", k ? "; " : "", 4 * cfg->helper_timeout,
					 v->portal[i]);
				r = -FV_ERR_TIMEOUT;
				break;
			}
			r = login_at(cx, v, v->portal[i], v->credfile ? &c : NULL, why, sizeof(why));
			if (r == 0) {
				logged_in = true;
				break;
			}
			snprintf(errs + k, sizeof(errs) - k, "%s%s: %s", k ? "; " : "", v->portal[i],
				 why);
		}
		login_deadline = 0; /* logout and rescans get their full deadline */
		if (v->credfile)
			explicit_bzero(&c, sizeof(c));
		if (!logged_in) {
			r = fv_fail(cx, r, "login to '%s' failed: %s", v->iqn, errs);
			/* leave nothing behind: a half-made session of ours goes */
			release_target(cx, v->iqn, -1);
			goto out;
		}
		t_login = fv_now_ms();
	}
	/* the LUN's disk may have come between our first look and the monitor */
	r = fv_devwait_run(cx, w, find_lun_disk(v->iqn, v->lun, &dk, dev, len) == 0 ? dk.name : NULL,
			   match_lun, &m, cfg->device_timeout * 1000, dev, len);
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
	fv_devwait_free(w);
	return r;
}

/* --- state: pv -> target, for detach -------------------------------------------- */

static int save_state(struct fv_ctx *cx, const struct iscsivol *v, const char *dev)
{
	json_object *o = json_object_new_object(), *ps = json_object_new_array();
	int r;

	if (!o || !ps) {
		json_object_put(o);
		json_object_put(ps);
		return -ENOMEM;
	}
	for (int i = 0; i < v->nportals; i++)
		json_object_array_add(ps, json_object_new_string(v->portal[i]));
	json_object_object_add(o, "iqn", json_object_new_string(v->iqn));
	json_object_object_add(o, "lun", json_object_new_int((int)v->lun));
	json_object_object_add(o, "portals", ps);
	json_object_object_add(o, "iface", json_object_new_string(v->iface));
	json_object_object_add(o, "device", json_object_new_string(dev));
	r = fv_state_write(cx, v->volume, o);
	json_object_put(o);
	return r;
}

/* The target of @volume from its state record: 0 found, 1 none. */
static int state_target(struct fv_ctx *cx, const char *volume, char *iqn, size_t len,
			unsigned int *lun)
{
	json_object *o = NULL, *x;
	int r = fv_state_read(cx, volume, &o);

	if (r != 0)
		return 1;
	r = 1;
	if (json_object_object_get_ex(o, "iqn", &x) && json_object_is_type(x, json_type_string) &&
	    valid_target_name(json_object_get_string(x))) {
		snprintf(iqn, len, "%s", json_object_get_string(x));
		*lun = json_object_object_get_ex(o, "lun", &x) ? (unsigned int)json_object_get_int(x)
							       : 0;
		r = 0;
	}
	json_object_put(o);
	return r;
}

/*
 * The iSCSI target and LUN behind block device number @devt, from sysfs:
 * /sys/dev/block/M:m -> .../sessionN/targetX/H:C:T:L/block/sdX.
 */
static int devt_target(dev_t devt, char *iqn, size_t len, unsigned int *lun)
{
	char link[64], path[PATH_MAX], tn[128];
	const char *p;
	int sid = -1;
	unsigned int h, c, t, l = 0;
	bool have_lun = false;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(devt), minor(devt));
	if (!realpath(link, path))
		return 1;
	for (p = strtok(path, "/"); p; p = strtok(NULL, "/")) {
		char x;
		int s;

		if (sscanf(p, "session%d%c", &s, &x) == 1)
			sid = s;
		else if (sscanf(p, "%u:%u:%u:%u%c", &h, &c, &t, &l, &x) == 4)
			have_lun = true;
	}
	if (sid < 0 || !have_lun)
		return 1;
	snprintf(tn, sizeof(tn), SYSFS_SESSIONS "/session%d/targetname", sid);
	if (fv_read_line(tn, iqn, len) <= 0)
		return 1;
	*lun = l;
	return 0;
}

/* --- ops ----------------------------------------------------------------------- */

static int iscsi_attach(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			char **ret_device)
{
	struct iscsivol v;
	char lun[48];
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	format_lun(v.lun, lun, sizeof(lun));
	/* udev's by-path name for the LUN (the real device comes from waitforattach) */
	if (asprintf(ret_device, "/dev/disk/by-path/ip-%s-iscsi-%s-%s", v.portal[0], v.iqn, lun) < 0)
		return -ENOMEM;
	return 0;
}

static int iscsi_isattached(struct fv_ctx *cx, const struct fv_opts *o, const char *node,
			    bool *ret_attached)
{
	char dev[64];
	struct iscsivol v;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	/*
	 * attach is logical: the controller-manager cannot see another node's
	 * sessions, and answers "attached" to keep the ADC from re-attaching.
	 */
	if (!fv_ctx_node_is_local(cx, node)) {
		*ret_attached = true;
		return 0;
	}
	*ret_attached = find_lun_disk(v.iqn, v.lun, NULL, dev, sizeof(dev)) == 0;
	return 0;
}

static int attach_locked(struct fv_ctx *cx, const struct iscsivol *v, char *dev, size_t len)
{
	int lock, r;

	if (!v->volume)
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'kubernetes.io/pvOrVolumeName' is required");
	lock = lock_target(cx, v->iqn);
	if (lock < 0)
		return lock;
	r = ensure_attached(cx, v, dev, len);
	if (r == 0)
		r = save_state(cx, v, dev);
	fv_unlock(lock);
	return r;
}

static int iscsi_waitforattach(struct fv_ctx *cx, const char *device, const struct fv_opts *o,
			       char **ret_device)
{
	char dev[64];
	struct iscsivol v;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	r = attach_locked(cx, &v, dev, sizeof(dev));
	if (r < 0)
		return r;
	*ret_device = strdup(dev);
	return *ret_device ? 0 : -ENOMEM;
}

static int iscsi_mountdevice(struct fv_ctx *cx, const char *dir, const char *device,
			     const struct fv_opts *o)
{
	_cleanup_(fv_dir_closep) struct fv_dir gd = { .parent = -1 };
	char dev[64];
	struct iscsivol v;
	int lock, r = parse(cx, o, &v);

	if (r < 0)
		return r;
	if (!v.volume)
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'kubernetes.io/pvOrVolumeName' is required");
	r = fv_dir_arg(cx, dir, FV_DIRARG_MUST_EXIST, &gd); /* kubelet made it: never created here */
	if (r < 0)
		return r;
	/*
	 * Under the target lock up to the mount: a sibling volume's logout
	 * decision then sees this LUN in use.  The session may have gone since
	 * waitforattach (a sibling's teardown): log in again.
	 */
	lock = lock_target(cx, v.iqn);
	if (lock < 0)
		return lock;
	r = ensure_attached(cx, &v, dev, sizeof(dev));
	if (r == 0 && device[0] && !streq(device, dev))
		fv_log("mountdevice: kubelet passed %s, LUN %u of %s is %s", device, v.lun, v.iqn,
		       dev);
	if (r == 0)
		r = fv_blkvol_mountdevice(cx, &gd, dev, v.fstype, DEFAULT_FSTYPE, v.ro);
	if (r == 0)
		r = save_state(cx, &v, dev);
	fv_unlock(lock);
	return r;
}

static int iscsi_mount(struct fv_ctx *cx, const char *dir, const struct fv_opts *o)
{
	char dev[64];
	struct iscsivol v;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	if (find_lun_disk(v.iqn, v.lun, NULL, dev, sizeof(dev)) != 0)
		return fv_fail(cx, -ENXIO, "LUN %u of '%s' is not attached on this node", v.lun,
			       v.iqn);
	return fv_blkvol_bind(cx, dir, dev, v.ro);
}

static int iscsi_unmount(struct fv_ctx *cx, const char *dir)
{
	return fv_blkvol_unmount(cx, dir, NULL);
}

/* Release LUN @lun of @iqn - the whole target when nothing else of it is in use - under its lock. */
static int release_locked(struct fv_ctx *cx, const char *iqn, unsigned int lun)
{
	int lock = lock_target(cx, iqn), r;

	if (lock < 0)
		return lock;
	r = release_target(cx, iqn, (int)lun);
	fv_unlock(lock);
	return r;
}

static int iscsi_unmountdevice(struct fv_ctx *cx, const char *dir)
{
	const char *volume = fv_path_last(dir); /* the global path ends in the volume name */
	char iqn[IQN_MAX + 32];
	struct fv_mntinfo was;
	unsigned int lun;
	uint64_t t0 = fv_now_ms();
	int r = fv_blkvol_unmount(cx, dir, &was);

	if (r < 0)
		return r;
	/* the kernel knows which target the mount was on; the state is the fallback */
	if ((was.devno && devt_target(was.devno, iqn, sizeof(iqn), &lun) == 0) ||
	    state_target(cx, volume, iqn, sizeof(iqn), &lun) == 0) {
		r = release_locked(cx, iqn, lun);
		if (r < 0)
			return r;
	}
	fv_log("latency: unmountdevice %llu ms", (unsigned long long)(fv_now_ms() - t0));
	(void)fv_state_remove(cx, volume);
	return 0;
}

static int iscsi_detach(struct fv_ctx *cx, const char *volume, const char *node)
{
	char iqn[IQN_MAX + 32], dev[64];
	struct lundisk dk;
	unsigned int lun;
	int r;

	if (!fv_ctx_node_is_local(cx, node))
		return 0; /* nothing of another node's is reachable from here */
	if (state_target(cx, volume, iqn, sizeof(iqn), &lun) != 0)
		return 0; /* never attached here, or already released */
	if (find_lun_disk(iqn, lun, &dk, dev, sizeof(dev)) == 0 && fv_mnt_count_devno(dk.devt) > 0)
		return fv_fail(cx, -EBUSY, "LUN %u of '%s' (%s) is still mounted; not detaching",
			       lun, iqn, dev);
	r = release_locked(cx, iqn, lun);
	if (r < 0)
		return r;
	(void)fv_state_remove(cx, volume);
	return 0;
}

static int iscsi_expandfs(struct fv_ctx *cx, const struct fv_opts *o, const char *device,
			  const char *dir, uint64_t new_size, uint64_t old_size)
{
	char dev[64], path[128], buf[32], type[64], mnt[PATH_MAX];
	struct lundisk dk;
	struct iscsivol v;
	uint64_t sectors;
	int fd, r = parse(cx, o, &v);

	if (r < 0)
		return r;
	if (find_lun_disk(v.iqn, v.lun, &dk, dev, sizeof(dev)) != 0)
		return fv_fail(cx, -ENXIO, "LUN %u of '%s' is not attached on this node", v.lun,
			       v.iqn);
	/* make the SCSI layer read the LUN's capacity again (sd_rescan) */
	snprintf(path, sizeof(path), "/sys/block/%s/device/rescan", dk.name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1) {
		r = NEG_ERRNO();
		if (fd >= 0)
			close(fd);
		return fv_fail(cx, r, "cannot rescan %s: %s", dev, strerror(-r));
	}
	close(fd);
	snprintf(path, sizeof(path), "/sys/block/%s/size", dk.name);
	if (fv_read_line(path, buf, sizeof(buf)) < 0 || fv_parse_u64(buf, &sectors) < 0)
		return fv_fail(cx, -EIO, "cannot read the size of %s", dev);
	if (sectors * 512 < new_size)
		return fv_fail(cx, -ENOSPC, "LUN %u of '%s' has %llu bytes after a rescan, less than "
			       "the requested %llu: grow the LUN on the target first", v.lun,
			       v.iqn, (unsigned long long)(sectors * 512),
			       (unsigned long long)new_size);
	r = fv_blk_probe(cx, dev, type, sizeof(type));
	if (r != 0)
		return r < 0 ? r : fv_fail(cx, -ENXIO, "%s holds no filesystem", dev);
	r = fv_mnt_find_source(dev, NULL, mnt, sizeof(mnt));
	if (r != 0)
		return fv_fail(cx, -ENXIO, "%s is not mounted: cannot grow online", dev);
	fv_log("expandfs: %s is %llu bytes, growing %s at %s", dev,
	       (unsigned long long)(sectors * 512), type, mnt);
	return fv_fs_grow(cx, dev, mnt, type);
}

const struct fv_driver fv_driver_iscsi = {
	.name = "iscsi",
	.caps = {
		.attach = true,
		.selinux_relabel = true,
		.supports_metrics = true,
		.fsgroup = true,
		.requires_fs_resize = true,
	},
	.attach = iscsi_attach,
	.isattached = iscsi_isattached,
	.detach = iscsi_detach,
	.waitforattach = iscsi_waitforattach,
	.mountdevice = iscsi_mountdevice,
	.unmountdevice = iscsi_unmountdevice,
	.mount = iscsi_mount,
	.unmount = iscsi_unmount,
	.expandfs = iscsi_expandfs,
};
