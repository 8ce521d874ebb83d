/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The program (fv_main(), called by drivers/registry.c's main() with the
 * list of drivers): pick the driver by basename(argv[0]), dispatch the op
 * by argv[1] with its exact argument count, print exactly one JSON reply.
 *
 * Before anything else runs, fd 1 is kept aside for the reply and fds 0, 1
 * and 2 are pointed at /dev/null: no library, helper or bug can put a stray
 * byte into kubelet's combined stdout+stderr (contract §3.1, §7.1).
 */
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/exec.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/util.h"
#include "fv/version.h"

struct call {
	struct fv_ctx *cx;
	char **args;	       /* after the op name */
	struct fv_opts opts;   /* parsed when the op carries JSON */
	char *device;	       /* reply "device" */
	bool has_attached;     /* reply "attached" */
	bool attached;
	const char *volume;    /* for the log line */
	char dir[PATH_MAX];    /* args[0] normalised, for OP_DIR ops */
	bool remote;	       /* OP_NODE: the call is for another node */
};

/* What the dispatcher does around an op, besides counting its arguments. */
enum {
	OP_DIR = 1 << 0,       /* args[0] is a mount directory: must be a plain absolute path */
	OP_LOCK_DIR = 1 << 1,  /* lock args[0] itself, not the volume (pod mounts run in parallel) */
	OP_LOCK_SOFT = 1 << 2, /* go on unlocked when the run dir cannot be written */
	OP_DIR_MADE = 1 << 3,  /* kubelet created args[0] before the call: missing is a Failure */
	OP_NODE = 1 << 4,      /* args[1] names a node: another node's call touches nothing here */
	OP_LOOK = 1 << 5,      /* never changes the node */
	OP_LOCAL = 1 << 6,     /* for people and the installer: no config, no log, no lock */
	OP_NODE_SIDE = 1 << 7, /* runs on the node: the driver's after_node_op follows */
};

struct op {
	const char *name;
	int nargs;
	int json;	   /* index of the JSON argument, or -1 */
	int lock_arg;	   /* lock on basename(args[i]) (-1: none) */
	unsigned int flags; /* OP_* */
	size_t slot;	   /* offsetof(struct fv_driver, op), or 0: always Not supported */
	int (*run)(struct call *c);
};

#define SLOT(op) offsetof(struct fv_driver, op)

/* argv[0] as copied for basename(): a longer path is cut, and then names no driver. */
#define PROG_NAME_MAX 256

static int run_attach(struct call *c)
{
	return c->cx->drv->attach(c->cx, &c->opts, c->args[1], &c->device);
}

static int run_isattached(struct call *c)
{
	int r = c->cx->drv->isattached(c->cx, &c->opts, c->args[1], &c->attached);

	c->has_attached = r == 0;
	return r;
}

static int run_detach(struct call *c)
{
	return c->cx->drv->detach(c->cx, c->args[0], c->args[1]);
}

static int run_waitforattach(struct call *c)
{
	return c->cx->drv->waitforattach(c->cx, c->args[0], &c->opts, &c->device);
}

static int run_mountdevice(struct call *c)
{
	return c->cx->drv->mountdevice(c->cx, c->args[0], c->args[1], &c->opts);
}

static int run_unmountdevice(struct call *c)
{
	return c->cx->drv->unmountdevice(c->cx, c->args[0]);
}

static int run_mount(struct call *c)
{
	return c->cx->drv->mount(c->cx, c->args[0], &c->opts);
}

static int run_unmount(struct call *c)
{
	return c->cx->drv->unmount(c->cx, c->args[0]);
}

static int run_expandfs(struct call *c)
{
	uint64_t new_size, old_size;

	if (fv_parse_u64(c->args[3], &new_size) < 0 || new_size == 0)
		return fv_fail(c->cx, -EINVAL, "new size is not a byte count: '%s'", c->args[3]);
	if (fv_parse_u64(c->args[4], &old_size) < 0)
		return fv_fail(c->cx, -EINVAL, "old size is not a byte count: '%s'", c->args[4]);
	return c->cx->drv->expandfs(c->cx, &c->opts, c->args[1], c->args[2], new_size, old_size);
}

static int run_gc(struct call *c)
{
	return c->cx->drv->gc(c->cx);
}

static int run_version(struct call *c)
{
	return 0;
}

static int run_help(struct call *c);

/* The installer's check of a node config, with this build's own parser (deploy/install.sh). */
static int run_check_config(struct call *c)
{
	char err[FV_CONFIG_ERR_MAX];
	int r = fv_config_check_file(&c->cx->cfg, c->cx->drv->name, c->args[0], err, sizeof(err));

	return r < 0 ? fv_fail(c->cx, r, "%s", err) : 0;
}

/*
 * argv per op: docs/flexvolume-contract.md §1.2.  getvolumename's answer is
 * ignored by kubelet (it always uses the PV or volume name), and
 * expandvolume is never called by current upstream: both are answered
 * "Not supported" so kubelet falls back to its defaults.
 */
static const struct op ops[] = {
	{ "init", 0, -1, -1, 0, 0, NULL },
	{ "getvolumename", 1, -1, -1, 0, 0, NULL },
	{ "attach", 2, 0, -1, OP_NODE | OP_LOOK, SLOT(attach), run_attach },
	{ "isattached", 2, 0, -1, OP_NODE | OP_LOOK, SLOT(isattached), run_isattached },
	/*
	 * detach also runs in the controller-manager's container, often with a
	 * read-only root or as non-root: there is no node state to guard there,
	 * and no other driver process could share a lock on that filesystem.
	 */
	{ "detach", 2, -1, 0, OP_LOCK_SOFT | OP_NODE, SLOT(detach), run_detach },
	/*
	 * waitforattach gets no directory, and the options' volume name is the
	 * PV author's to set (contract §2): no lock keyed by it.  The block class
	 * locks the backend object the options name (fv/blkvol.h).
	 */
	{ "waitforattach", 2, 1, -1, OP_NODE_SIDE, SLOT(waitforattach), run_waitforattach },
	{ "mountdevice", 3, 2, 0, OP_DIR | OP_DIR_MADE | OP_NODE_SIDE, SLOT(mountdevice), run_mountdevice },
	{ "unmountdevice", 1, -1, 0, OP_DIR | OP_NODE_SIDE, SLOT(unmountdevice), run_unmountdevice },
	/*
	 * Pod mounts lock their own directory: kubelet runs mount and unmount
	 * of one volume for different pods in parallel (contract §1.1), and
	 * one slow pod must not hold up the others.
	 */
	{ "mount", 2, 1, 0, OP_DIR | OP_DIR_MADE | OP_LOCK_DIR | OP_NODE_SIDE, SLOT(mount), run_mount },
	{ "unmount", 1, -1, 0, OP_DIR | OP_LOCK_DIR | OP_NODE_SIDE, SLOT(unmount), run_unmount },
	{ "expandvolume", 4, -1, -1, 0, 0, NULL },
	{ "expandfs", 5, 0, 2, 0, SLOT(expandfs), run_expandfs },
	/*
	 * Our own op, never called by kubelet: the DaemonSet runs it now and
	 * then (docs/design.md, "Garbage collection").  A driver without the
	 * slot answers Not supported, as for any op it does not have.
	 */
	{ "gc", 0, -1, -1, 0, SLOT(gc), run_gc },
	/* never called by kubelet: answered before any config, log or lock */
	{ "version", 0, -1, -1, OP_LOCAL, 0, run_version },
	{ "--version", 0, -1, -1, OP_LOCAL, 0, run_version },
	{ "--help", 0, -1, -1, OP_LOCAL, 0, run_help },
	{ "check-config", 1, -1, -1, OP_LOCAL, 0, run_check_config },
};

static int run_help(struct call *c)
{
	char *p = c->cx->message, *end = p + sizeof(c->cx->message);

	p += snprintf(p, (size_t)(end - p), "usage: %s OP [ARG...] (a FlexVolume driver); OP:",
		      c->cx->drv->name);
	for (size_t i = 0; i < ARRAY_SIZE(ops) && p < end; i++)
		p += snprintf(p, (size_t)(end - p), " %s/%d", ops[i].name, ops[i].nargs);
	return 0;
}

/* The contract's exact argument count of @op (a Failure with a message otherwise). */
static int check_nargs(struct fv_ctx *cx, const struct op *op, int nargs)
{
	if (nargs == op->nargs)
		return 0;
	return fv_fail(cx, -EINVAL, "%s takes %d argument%s, got %d", op->name, op->nargs,
		       op->nargs == 1 ? "" : "s", nargs);
}

/* An OP_LOCAL op: one reply with the version; a message on Success too (--help). */
static int run_local(int out, const struct op *op, struct call *c, int nargs)
{
	struct fv_reply r = { .version = fv_version };
	int rc = check_nargs(c->cx, op, nargs);

	if (rc == 0)
		rc = op->run(c);
	r.status = rc < 0 ? FV_FAILURE : FV_SUCCESS;
	r.message = c->cx->message;
	return fv_reply_write(out, &r);
}

static const char *errstr(int r)
{
	switch (-r) {
	case FV_ERR_BADOPT:
		return "invalid options";
	case FV_ERR_TIMEOUT:
		return "timed out";
	case FV_ERR_HELPER:
		return "helper program failed";
	case FV_ERR_NOTBLANK:
		return "device holds unexpected data";
	case FV_ERR_CONFLICT:
		return "conflicting state on the node";
	default:
		return strerror(-r);
	}
}

/* Print the one reply for this call; returns the exit code. */
static int reply(int fd, enum fv_status st, struct fv_ctx *cx, const struct call *c, bool caps)
{
	char msg[FV_MESSAGE_MAX * 2];
	struct fv_caps cp = cx->drv->caps;
	struct fv_reply r = { .status = st, .caps = caps ? &cp : NULL };

	if (caps && cx->drv->init_caps && cx->config_ok)
		cx->drv->init_caps(cx, &cp);

	snprintf(msg, sizeof(msg), "%s%s%s", cx->message, cx->message[0] && cx->detail[0] ? ": " : "",
		 cx->detail);
	/* a success is not explained by the notes of the way there */
	if (msg[0] && st == FV_FAILURE)
		r.message = msg;
	if (c) {
		r.device = c->device;
		r.has_attached = c->has_attached;
		r.attached = c->attached;
	}
	return fv_reply_write(fd, &r);
}

/* kubelet stops a timed-out waitforattach with SIGTERM: take the helpers' process groups along. */
static void on_term(int sig)
{
	fv_exec_kill_all();
	_exit(128 + sig);
}

/* Keep fd 1 for the reply; make 0, 1, 2 /dev/null.  Returns the reply fd. */
static int isolate_stdio(void)
{
	int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (null > 2)
			close(null);
	} else {
		/*
		 * No /dev (a bare chroot, a distroless container): fill 0-2 with
		 * O_PATH descriptors, on which any write fails with EBADF.  Closing
		 * them would let the next open() (a log, a lock) become fd 2.
		 */
		for (int fd = 0; fd <= 2; fd++) {
			int p = open("/", O_PATH | O_CLOEXEC);

			if (p >= 0 && p != fd) {
				dup2(p, fd);
				close(p);
			}
		}
	}
	return out;
}

static const char *volume_of(const struct op *op, struct call *c)
{
	if (op->lock_arg >= 0)
		return fv_path_last(c->args[op->lock_arg]);
	return c->opts.volume;
}

/*
 * Directory arguments come from kubelet and are taken literally: a plain
 * absolute path ("//" and "/./" normalised into @norm, ".." refused) whose
 * parents hold no symlink or magic link (fv_dir_open()).  The last component
 * is left to the driver (fv_dir_arg()): it may be a dead NFS mount that no
 * lookup may enter.  @must_exist: kubelet created the directory first
 * (mount, mountdevice), so a missing parent is a Failure, and nothing creates
 * it; for the undo ops it means nothing to undo.
 */
static int check_dir_arg(struct fv_ctx *cx, const char *p, bool must_exist, char *norm, size_t len)
{
	int fd = fv_dir_open(p, FV_DIR_PARENT, norm, len);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	switch (fd) {
	case -EINVAL:
	case -ENAMETOOLONG:
		return fv_fail(cx, -EINVAL, "mount directory is not a plain absolute path: '%s'", p);
	case -ELOOP:
		return fv_fail(cx, fd,
			       "'%s' has a symlink or magic link in its path: refused (directory "
			       "arguments are taken literally)",
			       p);
	case -ENOENT:
		if (!must_exist)
			return 0;
		return fv_fail(cx, fd, "directory '%s' does not exist (kubelet creates it first)", p);
	case -ENOTDIR:
		return fv_fail(cx, fd, "'%s' is not a directory", p);
	default:
		return fv_fail(cx, fd, "cannot open the parent of '%s': %s", p, strerror(-fd));
	}
}

static int dispatch(struct fv_ctx *cx, const struct op *op, struct call *c)
{
	const char *v;
	char name[FV_LOCK_NAME_MAX];
	int lockfd = -1, r;

	if (op->json >= 0) {
		r = fv_opts_parse(cx, c->args[op->json], &c->opts);
		if (r < 0)
			return r;
	}
	if (op->flags & OP_DIR) {
		r = check_dir_arg(cx, c->args[0], op->flags & OP_DIR_MADE, c->dir, sizeof(c->dir));
		if (r < 0)
			return r;
		c->args[0] = c->dir; /* the normalised form from here on */
	}
	c->volume = volume_of(op, c);
	v = c->volume;
	/* the lock guards this node's state; a call for another node has none to guard */
	if (op->lock_arg != -1 && v && !((op->flags & OP_NODE) && c->remote)) {
		if (op->flags & OP_LOCK_DIR)
			snprintf(name, sizeof(name), "%s-dir-%s", cx->drv->name, c->args[0]);
		else
			fv_lock_volume_name(cx, v, name, sizeof(name));
		lockfd = fv_lock(cx, name);
		if ((lockfd == -EROFS || lockfd == -EACCES) && (op->flags & OP_LOCK_SOFT)) {
			cx->message[0] = '\0';
			lockfd = -1;
		} else if (lockfd < 0) {
			return lockfd;
		}
	}
	r = op->run(c);
	/*
	 * The lock file goes with the lock (fv_unlock_remove(), safe against
	 * waiters): none stays in the run dir per pod dir ever mounted.
	 */
	if (lockfd >= 0)
		fv_unlock_remove(cx, name, lockfd);
	if ((op->flags & OP_NODE_SIDE) && cx->drv->after_node_op)
		cx->drv->after_node_op(cx);
	return r;
}

/* The driver called @name in @drivers, or NULL. */
static const struct fv_driver *find_driver(const struct fv_driver *const *drivers, size_t n,
					   const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (streq(drivers[i]->name, name))
			return drivers[i];
	return NULL;
}

int fv_main(int argc, char **argv, const struct fv_driver *const *drivers, size_t ndrivers)
{
	static struct fv_ctx ctx;
	struct fv_ctx *cx = &ctx;
	struct call c = { .cx = cx };
	const struct op *op = NULL;
	const char *prog;
	char err[FV_CONFIG_ERR_MAX];
	enum fv_status st;
	uint64_t t0 = fv_now_ms();
	int out, r = 0, fixed = -1;
	bool quiet, debug = false;
	char base[PROG_NAME_MAX];
	struct sigaction sa = { .sa_handler = on_term };

	out = isolate_stdio();
	if (out < 0)
		return 1; /* nowhere to reply to */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	umask(022);

	snprintf(base, sizeof(base), "%s", argc > 0 && argv[0] ? argv[0] : "");
	prog = basename(base);
	cx->drv = find_driver(drivers, ndrivers, prog);
	for (size_t i = 0; argc > 1 && i < ARRAY_SIZE(ops); i++)
		if (streq(ops[i].name, argv[1]))
			op = &ops[i];
	if (!cx->drv) {
		static const struct fv_driver unknown = { .name = "flexvol" };

		cx->drv = &unknown;
		if (!op || !(op->flags & OP_LOCAL)) { /* build/flexvol --version still answers */
			fv_fail(cx, -EINVAL,
				"unknown driver '%s': install this program under a driver's name", prog);
			return reply(out, FV_FAILURE, cx, NULL, false);
		}
	}
	if (argc < 2) {
		fv_fail(cx, -EINVAL, "no operation given");
		return reply(out, FV_FAILURE, cx, NULL, false);
	}
	if (op && (op->flags & OP_LOCAL)) {
		c.args = argv + 2;
		return run_local(out, op, &c, argc - 2);
	}

	/*
	 * init's answer and Not supported are compiled in: they need nothing
	 * from the node and must answer with no config, no /dev, no /proc (the
	 * controller-manager's container).  So they read no config and open no
	 * log (kubelet runs init at every plugin probe; README "Cost per
	 * call"), unless FLEXVOL_DEBUG asks for every call to be logged.
	 */
	if (op && streq(op->name, "init"))
		fixed = FV_SUCCESS;
	else if (!op || !op->slot ||
		 !*(void *const *)(const void *)((const char *)cx->drv + op->slot))
		fixed = FV_NOT_SUPPORTED;
	/*
	 * Except when the driver's capabilities depend on the config
	 * (init_caps): then init reads it, and answers as compiled in when
	 * there is none to read.
	 */
	if (fixed == FV_SUCCESS && cx->drv->init_caps && !fv_log_debug_wanted()) {
		cx->config_ok = fv_config_load(&cx->cfg, cx->drv->name, err, sizeof(err)) == 0;
		return reply(out, FV_SUCCESS, cx, &c, true);
	}
	if (fixed >= 0 && !fv_log_debug_wanted())
		return reply(out, (enum fv_status)fixed, cx, &c, fixed == FV_SUCCESS);
	r = fv_config_load(&cx->cfg, cx->drv->name, err, sizeof(err));
	cx->config_ok = r == 0; /* init falls back to controller mode without one */
	fv_log_open(cx->drv->name, r < 0 ? NULL : cx->cfg.log_file);
	debug = r == 0 && cx->cfg.debug; /* "debug = true": as FLEXVOL_DEBUG, for this call */
	fv_log_set_debug(debug);
	if (fixed >= 0) {
		st = (enum fv_status)fixed;
		goto out;
	}
	if (r < 0) {
		fv_fail(cx, r, "%s", err);
		st = FV_FAILURE;
		goto out;
	}
	if (check_nargs(cx, op, argc - 2) < 0) {
		st = FV_FAILURE;
		goto out;
	}
	c.args = argv + 2;
	c.remote = (op->flags & OP_NODE) && !fv_ctx_node_is_local(cx, c.args[1]);
	r = dispatch(cx, op, &c);
	if (r < 0 && !cx->message[0])
		fv_fail(cx, r, "%s failed: %s", op->name, errstr(r));
	st = r < 0 ? FV_FAILURE : FV_SUCCESS;
out:
	/*
	 * A call that changes nothing here and succeeded is not logged: the
	 * controller-manager's attach, its isattached polls, a detach for
	 * another node (README "Logging"; in its container there is no log
	 * to write anyway).  Syslog (a socket, and glibc reads the time zone
	 * file for it) gets the calls that may change this node and every
	 * failure; FLEXVOL_DEBUG logs every call, to the file.
	 */
	quiet = st != FV_FAILURE && (fixed >= 0 || (op->flags & OP_LOOK) || c.remote);
	if (!quiet || debug || fv_log_debug_wanted())
		(quiet ? fv_log : fv_log_summary)("op=%s volume=%s status=%s duration_ms=%llu%s%s%s",
						  argv[1], c.volume ? c.volume : "-",
						  fv_status_word(st),
						  (unsigned long long)(fv_now_ms() - t0),
						  st == FV_FAILURE ? " message=\"" : "",
						  st == FV_FAILURE ? cx->message : "",
						  st == FV_FAILURE ? "\"" : "");
	r = reply(out, st, cx, &c, op && streq(op->name, "init"));
	fv_opts_done(&c.opts);
	free(c.device);
	fv_log_close();
	return r;
}
