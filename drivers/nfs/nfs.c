/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nfs: NFS shares mounted straight into the pod directory, attach:false.
 *
 *   mount <dir> <json>   validate every option, then libmount with helpers
 *                        enabled, so /sbin/mount.nfs does the protocol work,
 *                        inside fv_fork_call(): its output lands in our log
 *                        and in the reply, and at the deadline its whole
 *                        process group is killed.  Already mounted from the
 *                        same source: probe it (statfs in a child with a
 *                        short deadline); healthy is Success, a stale handle
 *                        or a dead probe is unmounted and mounted afresh.
 *   unmount <dir>        never stat()s the target (that hangs on a dead
 *                        server): mountinfo says what is mounted; umount2 in
 *                        a child with a deadline, then MNT_FORCE (a child
 *                        too: a forced unmount can hang as well,
 *                        csi-driver-nfs#569), then MNT_DETACH, which never
 *                        waits for the server.  The dir is left empty.
 *
 * Every other op slot is empty: the dispatcher answers "Not supported".
 *
 * Options (all strings, contract §2):
 *   server        hostname, IPv4 address or bracketed IPv6 address ("[fd00::1]")
 *   share         the export path, absolute
 *   subPath       optional: a directory inside the share, relative, no ".."
 *   nfsVersion    optional: 3, 4, 4.0, 4.1, 4.2 (default: mount.nfs negotiates)
 *   mountOptions  optional: comma list from the allow-list below
 *   kubernetes.io/readwrite = ro   mounts read-only
 * nosuid,nodev are always added and can not be undone: a share is someone
 * else's filesystem, and a setuid binary or device node on it must not
 * work in a pod.
 */
#include <arpa/inet.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "fv/config.h"
#include "fv/driver.h"
#include "fv/exec.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/nfs.h"
#include "fv/state.h"
#include "fv/util.h"

#define SHARE_MAX 1024	 /* NFS paths: the v3 MNTPATHLEN, generous for v4 */
#define SOURCE_MAX (SHARE_MAX * 2 + 300)
#define OPTIONS_MAX 1024

struct nfsvol {
	char server[256];	      /* as given: name, IPv4 or [IPv6] */
	char path[SHARE_MAX * 2 + 2]; /* share + "/" + subPath, normalised */
	char source[SOURCE_MAX];      /* server:path, what mount.nfs and mountinfo show */
	char options[OPTIONS_MAX];    /* for libmount */
	bool ro;
};

/* --- validation ------------------------------------------------------------ */

static int check_server(struct fv_ctx *cx, const char *s, struct nfsvol *v)
{
	int r = fv_host_check(s);

	if (r == -EAFNOSUPPORT)
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'server': an IPv6 address must be in brackets, e.g. '[%s]'", s);
	if (r < 0)
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'server' must be a hostname, an IPv4 address or a bracketed "
			       "IPv6 address: '%s'",
			       s);
	/* mount.nfs wants IPv6 in brackets ("[fd00::1]:/export") */
	snprintf(v->server, sizeof(v->server), "%s", s);
	return 0;
}

/*
 * One path for mount.nfs' "server:path" and the kernel's mount options: no
 * ',' '=' or spaces (they would split or extend the option string), no
 * quotes, backslashes or ':' , only printable ASCII; components are never
 * empty, "." or "..".  Writes the components joined by '/' to @out.
 */
static int check_path(const char *s, char *out, size_t len)
{
	size_t o = 0;

	for (const char *p = s; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f || strchr(",=:\"'\\`", *p))
			return -EINVAL;
	out[0] = '\0';
	for (const char *p = s; *p;) {
		size_t n = strcspn(p, "/");

		if (!n || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		if (o + n + 2 > len)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p, n);
		o += n;
		out[o] = '\0';
		p += n;
		if (*p == '/' && !p[1])
			break; /* one trailing slash is fine */
		if (*p)
			p++;
	}
	return 0;
}

/* The allow-list for mountOptions: what changes caching, timeouts, transport, locking. */
enum val { V_NONE, V_NUM, V_ENUM };
struct allowed {
	const char *name;
	enum val val;
	const char *words; /* V_ENUM: "|a|b|" */
};

static const struct allowed allowed[] = {
	{ "hard", V_NONE, NULL },     { "soft", V_NONE, NULL },	     { "softreval", V_NONE, NULL },
	{ "nosoftreval", V_NONE, NULL }, { "intr", V_NONE, NULL },   { "nointr", V_NONE, NULL },
	{ "ac", V_NONE, NULL },	      { "noac", V_NONE, NULL },	     { "cto", V_NONE, NULL },
	{ "nocto", V_NONE, NULL },    { "lock", V_NONE, NULL },	     { "nolock", V_NONE, NULL },
	{ "resvport", V_NONE, NULL }, { "noresvport", V_NONE, NULL }, { "rdirplus", V_NONE, NULL },
	{ "nordirplus", V_NONE, NULL }, { "sharecache", V_NONE, NULL },
	{ "nosharecache", V_NONE, NULL }, { "noatime", V_NONE, NULL }, { "relatime", V_NONE, NULL },
	{ "nodiratime", V_NONE, NULL }, { "noexec", V_NONE, NULL },   { "sync", V_NONE, NULL },
	{ "nosuid", V_NONE, NULL },   { "nodev", V_NONE, NULL },
	{ "ro", V_NONE, NULL },	      { "timeo", V_NUM, NULL },	     { "retrans", V_NUM, NULL },
	{ "rsize", V_NUM, NULL },     { "wsize", V_NUM, NULL },	     { "acregmin", V_NUM, NULL },
	{ "acregmax", V_NUM, NULL },  { "acdirmin", V_NUM, NULL },   { "acdirmax", V_NUM, NULL },
	{ "actimeo", V_NUM, NULL },   { "port", V_NUM, NULL },	     { "mountport", V_NUM, NULL },
	{ "nconnect", V_NUM, NULL },  { "retry", V_NUM, NULL },
	{ "proto", V_ENUM, "|tcp|tcp6|udp|udp6|rdma|rdma6|" },
	{ "mountproto", V_ENUM, "|tcp|tcp6|udp|udp6|" },
	{ "sec", V_ENUM, "|sys|krb5|krb5i|krb5p|none|" },
	{ "lookupcache", V_ENUM, "|all|none|pos|positive|" },
	{ "local_lock", V_ENUM, "|none|all|flock|posix|" },
};

static int check_mount_option(struct fv_ctx *cx, const char *opt, size_t n)
{
	char name[64], value[64] = "", word[70];
	const char *eq = memchr(opt, '=', n);
	size_t nl = eq ? (size_t)(eq - opt) : n;

	if (!n)
		return fv_fail(cx, -FV_ERR_BADOPT, "option 'mountOptions' has an empty entry");
	if (nl >= sizeof(name) || (eq && n - nl - 1 >= sizeof(value)))
		return fv_fail(cx, -FV_ERR_BADOPT, "option 'mountOptions': '%.*s' is too long",
			       (int)n, opt);
	snprintf(name, sizeof(name), "%.*s", (int)nl, opt);
	if (eq)
		snprintf(value, sizeof(value), "%.*s", (int)(n - nl - 1), eq + 1);
	if (streq(name, "vers") || streq(name, "nfsvers") || streq(name, "minorversion") ||
	    streq(name, "v3") || streq(name, "v4"))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'mountOptions': set the version with option 'nfsVersion', "
			       "not '%s'",
			       name);
	if (streq(name, "suid") || streq(name, "dev") || streq(name, "exec") ||
	    streq(name, "rw"))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'mountOptions': '%s' is not allowed (shares are always mounted "
			       "nosuid,nodev; read-write comes from the volume)",
			       name);
	for (size_t i = 0; i < ARRAY_SIZE(allowed); i++) {
		const struct allowed *a = &allowed[i];
		uint64_t num;

		if (!streq(a->name, name))
			continue;
		if (a->val == V_NONE && !eq)
			return 0;
		if (a->val == V_NUM && eq && strlen(value) <= 9 && fv_parse_u64(value, &num) == 0)
			return 0;
		snprintf(word, sizeof(word), "|%s|", value);
		if (a->val == V_ENUM && eq && value[0] && !strchr(value, '|') &&
		    strstr(a->words, word))
			return 0;
		return fv_fail(cx, -FV_ERR_BADOPT, "option 'mountOptions': bad value in '%.*s' (%s)",
			       (int)n, opt,
			       a->val == V_NONE ? "takes no value" :
			       a->val == V_NUM	? "a number" :
						  "one of the listed words");
	}
	return fv_fail(cx, -FV_ERR_BADOPT,
		       "option 'mountOptions': '%.*s' is not in the allowed list (hard, soft, timeo, "
		       "retrans, rsize, wsize, ac*, noac, cto, nocto, lock, nolock, proto, port, sec, "
		       "nconnect, lookupcache, local_lock, noatime, noexec, ro, ...)",
		       (int)n, opt);
}

/* Options -> struct nfsvol.  Nothing on the node is touched before all of it passed. */
static int parse(struct fv_ctx *cx, const struct fv_opts *o, struct nfsvol *v)
{
	char share[SHARE_MAX + 1], sub[SHARE_MAX + 1] = "";
	const char *server, *sh, *sp = NULL, *ver = NULL, *mo = NULL;
	size_t ol;
	int r;

	memset(v, 0, sizeof(*v));
	r = fv_opt_required(cx, o, "server", &server);
	if (r < 0)
		return r;
	r = fv_opt_required(cx, o, "share", &sh);
	if (r < 0)
		return r;
	if ((r = fv_opt(cx, o, "subPath", &sp)) < 0 || (r = fv_opt(cx, o, "nfsVersion", &ver)) < 0 ||
	    (r = fv_opt(cx, o, "mountOptions", &mo)) < 0)
		return r;

	r = check_server(cx, server, v);
	if (r < 0)
		return r;
	if (sh[0] != '/' || strlen(sh) > SHARE_MAX ||
	    (!streq(sh, "/") && check_path(sh + 1, share, sizeof(share)) < 0))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'share' must be an absolute export path without '..', empty "
			       "components, spaces, ',', '=', ':' or quotes: '%s'",
			       sh);
	if (streq(sh, "/"))
		share[0] = '\0';
	if (sp && (sp[0] == '/' || strlen(sp) > SHARE_MAX || check_path(sp, sub, sizeof(sub)) < 0))
		return fv_fail(cx, -FV_ERR_BADOPT,
			       "option 'subPath' must be a relative directory inside the share, "
			       "without '..', empty components, spaces, ',', '=', ':' or quotes: '%s'",
			       sp);
	snprintf(v->path, sizeof(v->path), "/%s%s%s", share, share[0] && sub[0] ? "/" : "", sub);
	snprintf(v->source, sizeof(v->source), "%s:%s", v->server, v->path);

	/* nosuid,nodev first and always; the user's list cannot undo them (suid/dev refused) */
	ol = (size_t)snprintf(v->options, sizeof(v->options), "nosuid,nodev");
	if (ver) {
		if (!streq(ver, "3") && !streq(ver, "4") && !streq(ver, "4.0") &&
		    !streq(ver, "4.1") && !streq(ver, "4.2"))
			return fv_fail(cx, -FV_ERR_BADOPT,
				       "option 'nfsVersion' must be 3, 4, 4.0, 4.1 or 4.2: '%s'", ver);
		ol += (size_t)snprintf(v->options + ol, sizeof(v->options) - ol, ",vers=%s", ver);
	}
	if (mo) {
		if (strlen(mo) > 512)
			return fv_fail(cx, -FV_ERR_BADOPT, "option 'mountOptions' is too long");
		for (const char *p = mo;;) {
			size_t n = strcspn(p, ",");

			r = check_mount_option(cx, p, n);
			if (r < 0)
				return r;
			if (n == 2 && !strncmp(p, "ro", 2))
				v->ro = true;
			if (!p[n])
				break;
			p += n + 1;
		}
		ol += (size_t)snprintf(v->options + ol, sizeof(v->options) - ol, ",%s", mo);
	}
	if (o->readonly)
		v->ro = true;
	if (v->ro)
		snprintf(v->options + ol, sizeof(v->options) - ol, ",ro");
	return 0;
}

/* --- the pod dir, literally ------------------------------------------------------ */

/*
 * The pod dir, taken literally (fv_dir_arg()), but only up to its parent:
 * the last component may be a dead NFS mount, and any lookup INTO it (stat,
 * realpath, even an O_PATH open crossing the mount) can hang.  Whether it is
 * mounted comes from mountinfo (the literal, symlink-free path is exactly
 * what the kernel shows there); the directory itself is looked at only when
 * it is not a mount point, i.e. local.
 */
static int pod_dir(struct fv_ctx *cx, const char *arg, unsigned int flags, struct fv_dir *d)
{
	return fv_dir_arg(cx, arg, flags | FV_DIRARG_PARENT_ONLY, d);
}

/* --- timeouts ------------------------------------------------------------------------ */

/*
 * One knob, mount_timeout (FLEXVOL_MOUNT_TIMEOUT, default 60 s, well below
 * kubelet's 2 min pod-sync patience), sets the others: the health probe of
 * an existing mount and a plain unmount get a quarter of it (2..15 s), a
 * forced unmount a fixed short deadline.  Worst case for a dead server:
 * unmount ~ 15 + 3 + 5 + 3 s (the +3 s: collect() waits that long for a
 * child stuck in the kernel before leaving it behind).
 */
static unsigned int quarter(const struct fv_ctx *cx)
{
	unsigned int t = fv_ctx_config(cx)->mount_timeout / 4;

	return t < 2 ? 2 : t > 15 ? 15 : t;
}

#define FORCE_TIMEOUT_S 5

/* fv_fork_call() under the node's helper path, with a deadline of @timeout_s */
static int fork_call(struct fv_ctx *cx, const char *what, int (*fn)(void *arg), void *arg,
		     unsigned int timeout_s, struct fv_run *r)
{
	struct fv_exec_opts o = fv_exec_opts_of(cx);

	o.timeout_s = timeout_s;
	return fv_fork_call(cx, what, fn, arg, &o, r);
}

/* --- unmount, never waiting on the server ------------------------------------------------ */

/*
 * In the child, under its deadline: the parent walked again literally (no
 * symlink), the last component unmounted through it and never followed
 * (fv_umount_literal()).  Exit status: 0 or the errno (all fit in 8 bits).
 */
static int child_umount(void *arg)
{
	return -fv_umount_literal(arg, 0);
}

static int child_umount_force(void *arg)
{
	return -fv_umount_literal(arg, MNT_FORCE);
}

/*
 * Take the topmost mount off @dir: normal, forced, lazy.  Returns 0 when one
 * of them worked (or the mount was already gone), else -errno (message set).
 */
static int unmount_once(struct fv_ctx *cx, char *dir)
{
	int r = fork_call(cx, "unmount", child_umount, dir, quarter(cx), NULL);

	if (r == 0 || r == EINVAL)
		return 0; /* EINVAL: not a mount point any more (a racing unmount) */
	if (r > 0 && r != EBUSY)
		return fv_fail(cx, -r, "unmount of '%s' failed: %s", dir, strerror(r));
	if (r < 0 && r != -FV_ERR_TIMEOUT)
		return r;
	fv_log("unmount of %s: %s; forcing", dir, r == EBUSY ? "busy" : "no answer");
	fv_ctx_reset_message(cx); /* a timeout we recover from is not the answer */

	r = fork_call(cx, "forced unmount", child_umount_force, dir, FORCE_TIMEOUT_S, NULL);
	if (r == 0 || r == EINVAL || fv_mnt_find(dir, NULL) == 1)
		return 0;
	fv_log("forced unmount of %s: %s; detaching lazily", dir,
	       r > 0 ? strerror(r) : "no answer");
	fv_ctx_reset_message(cx);
	/* MNT_DETACH only unhooks the mount from the tree: it never talks to the server */
	r = fv_umount_literal(dir, MNT_DETACH);
	if (r == 0 || r == -EINVAL)
		return 0;
	return fv_fail(cx, r, "unmount of '%s' failed, even lazily: %s", dir, strerror(-r));
}

/* Unmount everything stacked on @dir.  Not mounted is success. */
static int unmount_all(struct fv_ctx *cx, char *dir)
{
	for (int i = 0; i < 16; i++) {
		int r = fv_mnt_find(dir, NULL);

		if (r == 1)
			return 0;
		if (r < 0)
			return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
		r = unmount_once(cx, dir);
		if (r < 0)
			return r;
	}
	return fv_fail(cx, -EBUSY, "'%s' is still mounted after 16 unmounts", dir);
}

static int nfs_unmount(struct fv_ctx *cx, const char *arg)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	int r = pod_dir(cx, arg, 0, &d);

	if (r == 1)
		return 0; /* no parent: nothing mounted there */
	if (r < 0)
		return r;
	r = unmount_all(cx, d.path);
	if (r < 0)
		return r;
	/* no longer a mount point: looking at the directory is local now */
	r = fv_dir_check(cx, &d, 0);
	if (r != 0)
		return r < 0 ? r : 0;
	r = fv_dir_is_empty(&d);
	if (r == 0)
		return fv_fail(cx, -ENOTEMPTY, "'%s' is not empty after unmount", d.path);
	return r < 0 ? fv_fail(cx, r, "cannot read '%s': %s", d.path, strerror(-r)) : 0;
}

/* --- mount ------------------------------------------------------------------------------------ */

struct mount_job {
	struct fv_ctx *cx;
	const struct nfsvol *v;
	const char *dir;
};

/*
 * Runs in the forked child: libmount execs /sbin/mount.nfs (a fixed path;
 * PATH is ignored), whose stdout/stderr are our capture pipe.  The child's
 * own reason goes to the pipe too, after a marker line, because its
 * fv_fail() message lives in the child's copy of the context.
 */
#define OWN_MARK "\n--- flexvol:\n"

static int child_mount(void *arg)
{
	struct mount_job *j = arg;
	int r = fv_mnt_mount(j->cx, j->v->source, j->dir, "nfs", j->v->options, true);

	if (r < 0) {
		dprintf(1, OWN_MARK "%s\n", fv_ctx_message(j->cx));
		return 1;
	}
	return 0;
}

static int do_mount(struct fv_ctx *cx, const struct nfsvol *v, const char *dir)
{
	const struct fv_config *cfg = fv_ctx_config(cx);
	struct mount_job j = { cx, v, dir };
	struct fv_run run = { 0 };
	char why[400];
	int r;

	fv_log("mounting %s on %s (%s)", v->source, dir, v->options);
	r = fork_call(cx, "mount.nfs", child_mount, &j, cfg->mount_timeout, &run);
	if (r == 0) {
		fv_run_done(&run);
		return 0;
	}
	if (r > 0) {
		/* mount.nfs' own words ("access denied by server ...") first, libmount's after */
		char *own = run.output ? strstr(run.output, OWN_MARK) : NULL;

		if (own) {
			*own = '\0';
			own += strlen(OWN_MARK);
		}
		fv_trim_output(run.output, why, sizeof(why));
		if (why[0])
			r = fv_fail(cx, -FV_ERR_HELPER, "mount of '%s' on '%s' failed: %s",
				    v->source, dir, why);
		else if (own && own[0])
			r = fv_fail(cx, -FV_ERR_HELPER, "%.*s", (int)strcspn(own, "\n"), own);
		else
			r = fv_fail(cx, -FV_ERR_HELPER, "mount of '%s' on '%s' failed", v->source,
				    dir);
	} else if (r == -FV_ERR_TIMEOUT) {
		/* the message says "mount.nfs did not finish within N s: <its output>" */
		fv_log("mount of %s on %s timed out after %u s; process group killed", v->source,
		       dir, cfg->mount_timeout);
	}
	fv_run_done(&run);
	return r;
}

static int child_probe(void *arg)
{
	struct statfs sfs;
	struct stat st;

	/*
	 * statfs() always asks the server (FSSTAT / GETATTR of the root handle),
	 * where stat() may be answered from the attribute cache: a handle made
	 * stale by a server restart shows up as ESTALE here.
	 */
	if (statfs(arg, &sfs) < 0 || stat(arg, &st) < 0)
		return errno;
	return 0;
}

/* Does the mount table show the NFS source we want? */
static bool same_source(const struct fv_mntinfo *mi, const struct nfsvol *v)
{
	size_t n = strlen(mi->source);

	if (strncmp(mi->fstype, "nfs", 3) != 0)
		return false;
	/* the kernel may show a trailing '/' for the root of an export */
	while (n > 1 && mi->source[n - 1] == '/')
		n--;
	return n == strlen(v->source) && !strncmp(mi->source, v->source, n);
}

static int nfs_mount(struct fv_ctx *cx, const char *arg, const struct fv_opts *o)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	char *dir = d.path;
	struct fv_mntinfo mi;
	struct nfsvol v;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	r = pod_dir(cx, arg, FV_DIRARG_MUST_EXIST, &d);
	if (r < 0)
		return r;

	/* mountinfo first: never touch a directory that may be a dead NFS mount */
	r = fv_mnt_find(dir, &mi);
	if (r < 0)
		return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
	if (r == 0) {
		if (!same_source(&mi, &v))
			return fv_fail(cx, -FV_ERR_CONFLICT, "'%s' is already mounted from '%s' (%s)",
				       dir, mi.source, mi.fstype);
		/* the volume mounted here, unlike this call asks: it exists, incompatible */
		if (mi.readonly != v.ro)
			return fv_fail(cx, -EEXIST, "'%s' is already mounted %s from '%s'", dir,
				       mi.readonly ? "read-only" : "read-write", mi.source);
		r = fork_call(cx, "probe", child_probe, dir, quarter(cx), NULL);
		if (r == 0)
			return 0; /* already mounted and healthy */
		/*
		 * ESTALE: the server lost the handle (restarted with a new
		 * export, csi-driver-nfs isStaleFileHandle).  No answer: the
		 * server is away; a fresh mount fails within its deadline and
		 * kubelet retries, instead of a pod starting on a dead mount.
		 */
		fv_log("%s on %s is %s; remounting", mi.source, dir,
		       r > 0 ? strerror(r) : "not answering");
		fv_ctx_reset_message(cx);
		r = unmount_all(cx, dir);
		if (r < 0)
			return r;
	}
	/* not a mount point: the directory is local, look at it (kubelet created it) */
	r = fv_dir_check(cx, &d, FV_DIRARG_MUST_EXIST);
	if (r < 0)
		return r;
	/*
	 * What remains: mount.nfs resolves the path again (it is exec'ed; our
	 * descriptors are not its to use), so a parent replaced by a symlink
	 * between this check and its mount(2) would be followed.  Only root can
	 * write kubelet's pods directory; the window is the helper's start-up.
	 */
#ifdef FV_FAULT_NFS_MOUNT_NOOP
	/*
	 * A deliberate defect, built only by `make FV_FAULT=NFS_MOUNT_NOOP
	 * O=<own dir>` (tests/kube/vmnode.mk, check-kube-vm-faults): Success,
	 * nothing mounted.  The lane's cases must fail on it.
	 */
	return 0;
#endif
	return do_mount(cx, &v, dir);
}

/*
 * CSI's publish and unpublish: no device mount to bind from; the share is
 * mounted on the pod's target itself, as kubelet's mount <poddir> has it.
 * An NFS mount does not say which volume it is for, so publish leaves a
 * record of it in the state dir, before the mount (a kill after the mount
 * leaves the record, which the retry or the unpublish finds):
 * "publish:<target>" = {"volume": <name>, "source": "<server>:<path>"}.
 * owns() reads it; unpublish removes it once nothing is mounted there.
 */
static void publish_key(const char *dir, char *buf, size_t len)
{
	snprintf(buf, len, "publish:%s", dir);
}

static int nfs_publish(struct fv_ctx *cx, const char *dir, const char *staged,
		       const struct fv_opts *o)
{
	char key[PATH_MAX + 16];
	json_object *rec;
	struct nfsvol v;
	int r = parse(cx, o, &v);

	if (r < 0)
		return r;
	if (!o->volume)
		return fv_fail(cx, -FV_ERR_BADOPT, "a publish names its volume");
	rec = json_object_new_object();
	if (!rec)
		return -ENOMEM;
	json_object_object_add(rec, "volume", json_object_new_string(o->volume));
	json_object_object_add(rec, "source", json_object_new_string(v.source));
	publish_key(dir, key, sizeof(key));
	r = fv_state_write(cx, key, rec);
	json_object_put(rec);
	if (r < 0)
		return fv_fail(cx, r, "cannot record the publish of '%s': %s", dir, strerror(-r));
	r = nfs_mount(cx, dir, o);
	if (r < 0 && fv_mnt_find(dir, NULL) == 1)
		(void)fv_state_remove(cx, key); /* nothing mounted: nothing to record */
	return r;
}

static int nfs_owns(struct fv_ctx *cx, const char *name, const char *path,
		    const struct fv_mntinfo *mi)
{
	char key[PATH_MAX + 16];
	json_object *rec = NULL, *vol, *src;
	struct nfsvol v = { 0 };
	int r;

	publish_key(path, key, sizeof(key));
	r = fv_state_read(cx, key, &rec);
	if (r != 0)
		return r < 0 ? r : 0; /* no record: not a publish of ours */
	r = json_object_object_get_ex(rec, "volume", &vol) &&
	    json_object_object_get_ex(rec, "source", &src) &&
	    json_object_is_type(vol, json_type_string) && json_object_is_type(src, json_type_string) &&
	    streq(json_object_get_string(vol), name);
	if (r) {
		snprintf(v.source, sizeof(v.source), "%s", json_object_get_string(src));
		r = same_source(mi, &v);
	}
	json_object_put(rec);
	return r;
}

/*
 * NodeGetVolumeStats: the share's figures and whether its server answers.
 * statfs() asks the server (FSSTAT), so it runs in a child under the probe
 * deadline (fv_probe_timeout()): a dead server is a condition, never a call
 * that hangs.  The figures come back through a shared page, so a probe that
 * answered leaves no line in the log.
 */
struct stats_probe {
	const char *dir;
	struct statfs sfs; /* in a MAP_SHARED page */
};

static int child_statfs(void *arg)
{
	struct stats_probe *p = arg;

	return statfs(p->dir, &p->sfs) < 0 ? errno : 0;
}

static int nfs_stats(struct fv_ctx *cx, const char *name, const char *path, struct fv_volstats *ret)
{
	struct fv_exec_opts o = fv_exec_opts_of(cx);
	struct stats_probe *p;
	struct fv_mntinfo mi;
	int r = fv_mnt_find(path, &mi); /* the table, never a lookup of a maybe dead mount */

	if (r < 0)
		return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
	if (r == 1)
		return fv_fail(cx, -ENOENT, "'%s' holds no mount of volume '%s'", path, name);
	r = nfs_owns(cx, name, path, &mi);
	if (r <= 0)
		return r < 0 ? r : fv_fail(cx, -ENOENT, "'%s' holds %s (%s), not a mount of "
					   "volume '%s'", path, mi.source, mi.fstype, name);
	p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return fv_fail(cx, NEG_ERRNO(), "cannot map the probe's page: %m");
	p->dir = path;
	o.timeout_s = fv_probe_timeout(cx);
	o.flags |= FV_EXEC_QUIET_OK;
	r = fv_fork_call(cx, "statfs probe", child_statfs, p, &o, NULL);
	if (r < 0 && r != -FV_ERR_TIMEOUT) {
		munmap(p, sizeof(*p));
		return fv_fail(cx, r, "cannot probe '%s': %s", path, strerror(-r));
	}
	fv_ctx_reset_message(cx); /* a server that does not answer is the condition, not an error */
	if (r == 0) {
		ret->bytes_total = (uint64_t)p->sfs.f_blocks * (uint64_t)p->sfs.f_frsize;
		ret->bytes_avail = (uint64_t)p->sfs.f_bavail * (uint64_t)p->sfs.f_frsize;
		ret->bytes_used = (uint64_t)(p->sfs.f_blocks - p->sfs.f_bfree) *
				  (uint64_t)p->sfs.f_frsize;
		ret->inodes_total = p->sfs.f_files;
		ret->inodes_avail = p->sfs.f_ffree;
		ret->inodes_used = p->sfs.f_files - p->sfs.f_ffree;
		ret->has_usage = true;
	} else {
		ret->abnormal = true;
		if (r == -FV_ERR_TIMEOUT)
			snprintf(ret->message, sizeof(ret->message), "the NFS server of %s did not "
				 "answer within %u s", mi.source, o.timeout_s);
		else
			snprintf(ret->message, sizeof(ret->message), "%s: %s%s", mi.source,
				 strerror(r > 0 ? r : -r), r == ESTALE ? " (the server lost the "
				 "export: remount)" : "");
		fv_log("volume '%s' is not well: %s", name, ret->message);
	}
	munmap(p, sizeof(*p));
	return 0;
}

static int nfs_unpublish(struct fv_ctx *cx, const char *dir, const char *name)
{
	char key[PATH_MAX + 16];
	int r = nfs_unmount(cx, dir);

	publish_key(dir, key, sizeof(key));
	if (r == 0)
		(void)fv_state_remove(cx, key);
	return r;
}

const struct fv_driver fv_driver_nfs = {
	.name = "nfs",
	.caps = {
		.attach = false,
		/*
		 * No relabel: most NFS servers have no per-file SELinux labels
		 * (only v4.2 security_label), so kubelet's relabel fails or is
		 * a slow recursive walk over the network; in-tree NFS says false.
		 */
		.selinux_relabel = false,
		/* stats would be a statfs() from kubelet, which hangs on a dead server */
		.supports_metrics = false,
		/*
		 * No recursive chown/chmod by kubelet: on a share it is slow, is
		 * refused under root_squash, and rewrites ownership that belongs
		 * to the server's users (kubernetes/kubernetes#68137).
		 */
		.fsgroup = false,
		.requires_fs_resize = false, /* nothing on the node to grow */
	},
	.mount = nfs_mount,
	.unmount = nfs_unmount,
	.publish = nfs_publish,
	.unpublish = nfs_unpublish,
	.owns = nfs_owns,
	.stats = nfs_stats,
};

/*
 * For flexvol-provisioner (provisioner/params.c): the options a PV will carry
 * go through the very checks mount applies to them, so a class the driver
 * would refuse fails at provisioning, with the driver's own message.
 */
int fv_nfs_check_options(struct fv_ctx *cx, const struct fv_opts *o)
{
	struct nfsvol v;

	return parse(cx, o, &v);
}
