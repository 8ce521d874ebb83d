/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iscsi options: lexical validation of every option (attach runs in the
 * controller-manager: no node access), and CHAP credentials - from the
 * node-local credentials file (controller and node mode) or, in node
 * mode, from the PV's Secret (kubernetes.io/secret/<key>).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <strings.h>
#include <sys/stat.h>


#include "fv/blkutil.h"
#include "fv/config.h"
#include "fv/kv.h"
#include "iscsi.h"

/* --- option validation (lexical only: attach runs in the controller-manager) --- */

static bool all_chars(const char *s, const char *set)
{
	return s[strspn(s, set)] == '\0';
}

#define LOWER_DIGITS "abcdefghijklmnopqrstuvwxyz0123456789"
#define HEX "0123456789abcdefABCDEF"

/* iqn.yyyy-mm.reversed.domain[:anything], eui.<16 hex>, naa.<16|32 hex> (RFC 3720 3.2.6.3) */
bool iscsi_valid_target_name(const char *s)
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

/*
 * "host[:port]" with host an IPv4 address, "[IPv6]" or a DNS name; the
 * normalised "host:port" (port defaulted to 3260) goes to @ret.
 */
static bool parse_portal(const char *s, char *ret, size_t len)
{
	char host[PORTAL_MAX];
	const char *colon;
	uint64_t port = DEFAULT_PORT;

	if (!*s || strlen(s) >= sizeof(host))
		return false;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end)
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
	}
	/* one validator for hosts in options (nfs server, iSCSI portals) */
	if (fv_host_check(host) < 0)
		return false;
	if (colon && (fv_parse_u64(colon + 1, &port) < 0 || port < 1 || port > 65535))
		return false;
	return snprintf(ret, len, "%s:%u", host, (unsigned int)port) < (int)len;
}

/* --- the credentials file ------------------------------------------------------ */

char *iscsi_trim(char *s)
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

/* @where: "credentials file '<path>'" or "the PV's Secret" */
static int check_chap(struct fv_ctx *cx, const char *where, const char *what, const struct chap *c)
{
	if (!c->user[0] != !c->pass[0])
		return fv_fail(cx, -FV_ERR_BADOPT, "%s: %s.username and %s.password go together",
			       where, what, what);
	if (!c->user_in[0] != !c->pass_in[0])
		return fv_fail(cx, -FV_ERR_BADOPT, "%s: %s.username_in and %s.password_in go "
			       "together", where, what, what);
	if (c->user_in[0] && !c->user[0])
		return fv_fail(cx, -FV_ERR_BADOPT, "%s: mutual CHAP (%s.*_in) needs %s.username and "
			       "%s.password too", where, what, what, what);
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
 * Read the credentials file @rel, a path below the node's credentials
 * directory (config chap_dir; iscsi_parse() confined it lexically).  It is
 * opened like the loop driver opens images: beneath the directory, taken
 * literally (RESOLVE_BENEATH|NO_SYMLINKS|NO_MAGICLINKS: no symlink, no
 * "..", no /proc magic link), O_PATH first and refused by its type before
 * any real open - so a device node (/dev/watchdog arms the watchdog on
 * open, a tape rewinds on close), a FIFO or a socket is only ever looked
 * at.  The file must be root-owned without group or world permission
 * bits; the directory root-owned and writable by root alone.  Messages
 * describe files inside the directory only.  No text of the file is ever
 * logged or quoted in a message, not even a key we do not know: messages
 * name the line number, and a known key's name.
 */
static int read_creds(struct fv_ctx *cx, const char *opt, struct creds *c)
{
	const char *dir = fv_ctx_config(cx)->chap_dir;
	char where[PATH_MAX + 32], path[PATH_MAX + 8], rel[PATH_MAX];
	_cleanup_close_ int dfd = -1, fd = -1;
	_cleanup_(erase_credbuf) char *buf = NULL;
	struct stat st;
	struct fv_kv it;
	char *key, *val;
	size_t len = 0;
	int r;

	memset(c, 0, sizeof(*c));
	/*
	 * Confined lexically before anything is looked at: one message for
	 * every path outside the directory, whatever it is (nothing about the
	 * node's other files - owner, mode, existence - reaches a PV author).
	 */
	if (fv_path_confine(dir, opt, rel, sizeof(rel)) < 0)
		return fv_fail(cx, -FV_ERR_BADOPT, "option 'chapCredentialsFile' must name a file in "
			       "the credentials directory '%s' (node config chap_dir), relative to "
			       "it or absolute inside it: '%s'", dir, opt);
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	/* the directory is the administrator's (node config): opened as configured */
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st) < 0)
		return fv_fail(cx, NEG_ERRNO(), "credentials directory '%s' (config chap_dir) is not "
			       "usable: %m", dir);
	if (st.st_uid != 0)
		return fv_fail(cx, -EPERM, "credentials directory '%s' is owned by uid %u, not root; "
			       "refusing it", dir, (unsigned int)st.st_uid);
	if (st.st_mode & 022)
		return fv_fail(cx, -EPERM, "credentials directory '%s' has mode %04o: writable by "
			       "group/world; refusing it (chmod 700)", dir,
			       (unsigned int)(st.st_mode & 07777));
	fd = fv_open_regular_beneath(dfd, rel, O_RDONLY, &st);
	if (fd == -EMEDIUMTYPE)
		return fv_fail(cx, -EPERM, "credentials file '%s' is not a regular file: it is %s",
			       path, fv_file_type(st.st_mode));
	if (fd == -ELOOP)
		return fv_fail(cx, -EPERM, "credentials file '%s' is or passes through a symlink: "
			       "refused (the option is taken literally)", path);
	if (fd == -ENOENT)
		return fv_fail(cx, -ENOENT, "credentials file '%s' does not exist", path);
	if (fd == -EXDEV)
		return fv_fail(cx, -EPERM, "credentials file '%s' resolves outside '%s'", path, dir);
	if (fd < 0)
		return fv_fail(cx, fd, "cannot open credentials file '%s': %s", path, strerror(-fd));
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
	fv_kv_init(&it, buf, len, CRED_FILE_MAX);
	while ((r = fv_kv_next(&it, &key, &val)) > 0) {
		char *field = chap_field(c, key);

		/* the key is not quoted: a typo'd key or a ':' for '=' may carry a secret */
		if (!field)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %u: unknown "
				       "key (discovery.* or session.* username, password, "
				       "username_in, password_in)", path, it.line);
		if (*field)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %u: '%s' is "
				       "set twice", path, it.line, key);
		if (!*val || strlen(val) > CHAP_MAX)
			return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %u: the value "
				       "of '%s' must be 1 to %d characters", path, it.line, key,
				       CHAP_MAX);
		for (const char *p = val; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %u: "
					       "control character in the value of '%s'", path,
					       it.line, key);
		strcpy(field, val);
	}
	if (r < 0)
		return fv_fail(cx, -FV_ERR_BADOPT, "credentials file '%s' line %u: not "
			       "'key = value'", path, it.line);
	snprintf(where, sizeof(where), "credentials file '%s'", path);
	r = check_chap(cx, where, "discovery", &c->discovery);
	if (r < 0)
		return r;
	return check_chap(cx, where, "session", &c->session);
}


/* --- CHAP from the PV's Secret (node mode: mount gets kubernetes.io/secret/<key>) --- */

#define SECRET_PREFIX "kubernetes.io/secret/"

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/*
 * Strict base64 (RFC 4648 §4, what Go's base64.StdEncoding writes): the
 * standard alphabet, padding required, no whitespace, no bits left over.
 * Returns the decoded length, or -EINVAL.
 */
static ssize_t b64_decode(const char *in, char *out, size_t max)
{
	size_t n = strlen(in), k = 0;

	if (n % 4)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 4) {
		int a = b64_value(in[i]), b = b64_value(in[i + 1]);
		int c = in[i + 2] == '=' ? -2 : b64_value(in[i + 2]);
		int d = in[i + 3] == '=' ? -2 : b64_value(in[i + 3]);
		bool last = i + 4 == n;

		if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2) ||
		    ((c == -2 || d == -2) && !last))
			return -EINVAL;
		if (c == -2 && (b & 0x0f))
			return -EINVAL; /* bits left over: not what an encoder writes */
		if (c >= 0 && d == -2 && (c & 0x03))
			return -EINVAL;
		if (k + 3 > max)
			return -ENOSPC;
		out[k++] = (char)(a << 2 | b >> 4);
		if (c >= 0)
			out[k++] = (char)((b & 0x0f) << 4 | c >> 2);
		if (d >= 0)
			out[k++] = (char)((c & 0x03) << 6 | d);
	}
	return (ssize_t)k;
}

/*
 * One CHAP setting of the volume's Secret, @key = @val (the value as it is,
 * at most CHAP_MAX + 3 bytes read), into v->secret.  Keys are the credentials
 * file's; the same rules hold, and messages name keys, never values.
 */
static int take_secret(struct fv_ctx *cx, struct iscsivol *v, const char *key, const char *val,
		       size_t n)
{
	char *field = chap_field(&v->secret, key);

	if (!field)
		return fv_fail(cx, -FV_ERR_BADOPT, "Secret key '%.64s' is not a CHAP setting "
			       "(discovery.* or session.* username, password, username_in, "
			       "password_in)", key);
	if (n == 0 || n > CHAP_MAX || strnlen(val, n) != n)
		return fv_fail(cx, -FV_ERR_BADOPT, "Secret key '%s' must hold 1 to %d characters",
			       key, CHAP_MAX);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)val[i] < 0x20 || val[i] == 0x7f)
			return fv_fail(cx, -FV_ERR_BADOPT, "Secret key '%s' holds a control "
				       "character", key);
	memcpy(field, val, n);
	field[n] = '\0';
	v->has_secret = true;
	return 0;
}

/*
 * The volume's Secret -> v->secret: kubelet's kubernetes.io/secret/<key>
 * entries (base64, contract §2) in a FlexVolume call, a CSI call's
 * node-stage secrets as they are.
 */
static int parse_secret(struct fv_ctx *cx, const struct fv_opts *o, struct iscsivol *v)
{
	char buf[CHAP_MAX + 4];
	int r = 0;

	for (size_t i = 0; r == 0 && i < o->n; i++) {
		const char *key = o->pairs[i].key, *val = o->pairs[i].value;
		const char *k = key + strlen(SECRET_PREFIX);
		ssize_t n;

		if (strncmp(key, SECRET_PREFIX, strlen(SECRET_PREFIX)))
			continue;
		if (!chap_field(&v->secret, k))
			return take_secret(cx, v, k, "", 0); /* its message */
		if (!val)
			return fv_fail(cx, -FV_ERR_BADOPT, "Secret key '%s' is not a string", k);
		n = b64_decode(val, buf, sizeof(buf));
		if (n < 0) {
			explicit_bzero(buf, sizeof(buf));
			return fv_fail(cx, -FV_ERR_BADOPT, "Secret key '%s' is not %s", k,
				       n == -ENOSPC ? "at most 255 bytes" : "strict base64");
		}
		r = take_secret(cx, v, k, buf, (size_t)n);
		explicit_bzero(buf, sizeof(buf));
	}
	for (size_t i = 0; r == 0 && i < o->nsecrets; i++)
		r = take_secret(cx, v, o->secrets[i].key, o->secrets[i].value,
				strnlen(o->secrets[i].value, CHAP_MAX + 1));
	if (r < 0 || !v->has_secret)
		return r;
	r = check_chap(cx, "the PV's Secret", "discovery", &v->secret.discovery);
	if (r == 0)
		r = check_chap(cx, "the PV's Secret", "session", &v->secret.session);
	return r;
}

int iscsi_get_creds(struct fv_ctx *cx, const struct iscsivol *v, struct creds *c)
{
	int r = 0;

	memset(c, 0, sizeof(*c));
	if (v->has_secret)
		*c = v->secret;
	else if (v->credfile)
		r = read_creds(cx, v->credfile, c);
	if (r < 0)
		explicit_bzero(c, sizeof(*c)); /* a half-read file's secrets */
	return r;
}

int iscsi_parse(struct fv_ctx *cx, const struct fv_opts *o, void *vol)
{
	struct iscsivol *v = vol;
	const char *s, *lun, *extra;
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
	if (!iscsi_valid_target_name(v->iqn))
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
	/*
	 * Lexical only here (attach runs in the controller-manager, which has
	 * no node config): no "..", no control character.  The confinement to
	 * the node's credentials directory is read_creds()'s, on the node.
	 */
	if (r == 0 && fv_path_confine("/", v->credfile, v->credrel, sizeof(v->credrel)) < 0)
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'chapCredentialsFile' must be a file name in the credentials "
			       "directory (node config chap_dir, default /etc/flexvol/chap), "
			       "relative to it or absolute, without '..': '%s'",
			       v->credfile);
	r = parse_secret(cx, o, v);
	if (r < 0)
		return r;
	if (v->has_secret && v->credfile)
		return fv_fail(cx, -FV_ERR_BADOPT, "CHAP comes from option 'chapCredentialsFile' or "
			       "from the PV's Secret, not both");
	v->ro = o->readonly;
	v->block = o->block;
	return 0;
}

/* udev's path_id: LUNs below 256 in decimal, larger ones in SAM-2 hex */
void iscsi_format_lun(unsigned int lun, char *buf, size_t len)
{
	if (lun < 256)
		snprintf(buf, len, "lun-%u", lun);
	else
		snprintf(buf, len, "lun-0x%04x%04x00000000", lun & 0xffff, (lun >> 16) & 0xffff);
}

