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
#include "fv/op.h"
#include "fv/util.h"
#include "fv/version.h"

/*
 * The program's ops: each kubelet op's argv (docs/flexvolume-contract.md
 * §1.2) translated to the op runner (fv/op.h) by the positions of its
 * arguments, and our own local ones.
 */
struct op {
	const char *name;
	int nargs;
	bool kubelet;		/* run by the runner (else: Not supported, or @local) */
	enum fv_op run_op;
	int json, dir, device, node, volume; /* the argument's index, or -1 */
	int (*local)(struct fv_ctx *cx, char **args); /* for people and the installer: no config,
							 no log, no lock */
};

#define KUBELET(n_, nargs_, op_, json_, dir_, device_, node_, volume_)                             \
	{ .name = n_, .nargs = nargs_, .kubelet = true, .run_op = op_, .json = json_, .dir = dir_, \
	  .device = device_, .node = node_, .volume = volume_ }
#define UNSERVED(n_, nargs_) { .name = n_, .nargs = nargs_, .json = -1 }
#define LOCAL(n_, nargs_, fn_) { .name = n_, .nargs = nargs_, .json = -1, .local = fn_ }

/* argv[0] as copied for basename(): a longer path is cut, and then names no driver. */
#define PROG_NAME_MAX 256

static int run_version(struct fv_ctx *cx, char **args)
{
	return 0;
}

static int run_help(struct fv_ctx *cx, char **args);

/* The installer's check of a node config, with this build's own parser (deploy/install.sh). */
static int run_check_config(struct fv_ctx *cx, char **args)
{
	char err[FV_CONFIG_ERR_MAX];
	int r = fv_config_check_file(&cx->cfg, cx->drv->name, args[0], err, sizeof(err));

	return r < 0 ? fv_fail(cx, r, "%s", err) : 0;
}

/*
 * getvolumename's answer is ignored by kubelet (it always uses the PV or
 * volume name), and expandvolume is never called by current upstream: both
 * are answered "Not supported" so kubelet falls back to its defaults.
 */
static const struct op ops[] = {
	/*       name             n  op                   json dir dev node volume */
	UNSERVED("init", 0),
	UNSERVED("getvolumename", 1),
	KUBELET("attach",        2, FV_OP_ATTACH,        0, -1, -1, 1, -1),
	KUBELET("isattached",    2, FV_OP_ISATTACHED,    0, -1, -1, 1, -1),
	KUBELET("detach",        2, FV_OP_DETACH,       -1, -1, -1, 1, 0),
	KUBELET("waitforattach", 2, FV_OP_WAITFORATTACH, 1, -1, 0, -1, -1),
	KUBELET("mountdevice",   3, FV_OP_MOUNTDEVICE,   2, 0, 1, -1, -1),
	KUBELET("unmountdevice", 1, FV_OP_UNMOUNTDEVICE, -1, 0, -1, -1, -1),
	KUBELET("mount",         2, FV_OP_MOUNT,         1, 0, -1, -1, -1),
	KUBELET("unmount",       1, FV_OP_UNMOUNT,      -1, 0, -1, -1, -1),
	UNSERVED("expandvolume", 4),
	/* <json> <device> <poddir> <new size> <old size> */
	KUBELET("expandfs",      5, FV_OP_EXPANDFS,      0, 2, 1, -1, -1),
	/* our own, never called by kubelet (docs/design.md, "Garbage collection") */
	KUBELET("gc",            0, FV_OP_GC,           -1, -1, -1, -1, -1),
	/* never called by kubelet: answered before any config, log or lock */
	LOCAL("version", 0, run_version),
	LOCAL("--version", 0, run_version),
	LOCAL("--help", 0, run_help),
	LOCAL("check-config", 1, run_check_config),
};

static int run_help(struct fv_ctx *cx, char **args)
{
	char *p = cx->message, *end = p + sizeof(cx->message);

	p += snprintf(p, (size_t)(end - p), "usage: %s OP [ARG...] (a FlexVolume driver); OP:",
		      cx->drv->name);
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

/* A local op: one reply with the version; a message on Success too (--help). */
static int run_local(int out, const struct op *op, struct fv_ctx *cx, char **args, int nargs)
{
	struct fv_reply r = { .version = fv_version };
	int rc = check_nargs(cx, op, nargs);

	if (rc == 0)
		rc = op->local(cx, args);
	r.status = rc < 0 ? FV_FAILURE : FV_SUCCESS;
	r.message = cx->message;
	return fv_reply_write(out, &r);
}

/* Print the one reply for this call; returns the exit code. */
static int reply(int fd, enum fv_status st, struct fv_ctx *cx, const struct fv_op_call *c,
		 bool caps)
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
		r.device = c->ret_device;
		r.has_attached = c->has_attached;
		r.attached = c->attached;
	}
	return fv_reply_write(fd, &r);
}

/*
 * init's answer (@init) or Not supported, on fd 1 as it is: the capabilities
 * as compiled in, or as the node configuration makes them (init_caps: the
 * block class's attach mode; as compiled in when there is none to read).
 */
static int answer_fixed(struct fv_ctx *cx, bool init)
{
	char err[FV_CONFIG_ERR_MAX], buf[512];
	struct fv_caps caps = cx->drv->caps;
	size_t n;

	/* the attach mode alone: init_caps() reads nothing else of cx->cfg */
	if (init && cx->drv->init_caps &&
	    fv_config_attach_mode(cx->cfg.attach_mode, err, sizeof(err)) == 0) {
		cx->config_ok = true;
		cx->drv->init_caps(cx, &caps);
	}
	n = fv_reply_fixed(buf, sizeof(buf), init ? FV_SUCCESS : FV_NOT_SUPPORTED,
			   init ? &caps : NULL);
	(void)!write(1, buf, n);
	return 0; /* Success and Not supported alike (fv_reply_write()) */
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

/* A kubelet op: its arguments and options into the runner's call, and the runner. */
static int run_kubelet_op(struct fv_ctx *cx, const struct op *op, char **args, struct fv_opts *o,
			  struct fv_op_call *c)
{
	int r;

	if (op->json >= 0) {
		r = fv_opts_parse(cx, args[op->json], o);
		if (r < 0)
			return r;
		c->opts = o;
	}
	c->op = op->run_op;
	c->dir = op->dir >= 0 ? args[op->dir] : NULL;
	c->device = op->device >= 0 ? args[op->device] : NULL;
	c->node = op->node >= 0 ? args[op->node] : NULL;
	c->name = op->volume >= 0 ? args[op->volume] : NULL;
	if (c->op == FV_OP_EXPANDFS) {
		if (fv_parse_u64(args[3], &c->new_size) < 0 || c->new_size == 0)
			return fv_fail(cx, -EINVAL, "new size is not a byte count: '%s'", args[3]);
		if (fv_parse_u64(args[4], &c->old_size) < 0)
			return fv_fail(cx, -EINVAL, "old size is not a byte count: '%s'", args[4]);
	}
	return fv_op_run(cx, c);
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
	static struct fv_op_call c;
	struct fv_opts o = { 0 };
	const struct op *op = NULL;
	const char *prog;
	char err[FV_CONFIG_ERR_MAX];
	enum fv_status st;
	uint64_t t0;
	int out, r = 0, fixed = -1;
	bool quiet, debug = false;
	char base[PROG_NAME_MAX];
	struct sigaction sa = { .sa_handler = on_term };

	fv_join(base, sizeof(base), argc > 0 && argv[0] ? argv[0] : "", NULL);
	prog = basename(base);
	cx->drv = find_driver(drivers, ndrivers, prog);
	for (size_t i = 0; argc > 1 && i < ARRAY_SIZE(ops); i++)
		if (streq(ops[i].name, argv[1]))
			op = &ops[i];
	/*
	 * init and Not supported answer first, before anything is set up: no
	 * code but ours runs for them (no library, no helper), so there is
	 * nothing to keep off stdout, and kubelet's plugin probes (init at each)
	 * cost what any program's exec costs (docs/benchmarks.md).
	 */
	if (cx->drv && argc > 1 && !fv_log_debug_wanted() &&
	    ((op && streq(op->name, "init")) ||
	     (!(op && op->local) && (!op || !op->kubelet || !fv_op_served(cx->drv, op->run_op)))))
		return answer_fixed(cx, op && streq(op->name, "init"));

	t0 = fv_now_ms();
	out = isolate_stdio();
	if (out < 0)
		return 1; /* nowhere to reply to */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	umask(022);
	if (!cx->drv) {
		static const struct fv_driver unknown = { .name = "flexvol" };

		cx->drv = &unknown;
		if (!op || !op->local) { /* build/flexvol --version still answers */
			fv_fail(cx, -EINVAL,
				"unknown driver '%s': install this program under a driver's name", prog);
			return reply(out, FV_FAILURE, cx, NULL, false);
		}
	}
	if (argc < 2) {
		fv_fail(cx, -EINVAL, "no operation given");
		return reply(out, FV_FAILURE, cx, NULL, false);
	}
	if (op && op->local)
		return run_local(out, op, cx, argv + 2, argc - 2);

	/*
	 * init's answer and Not supported are compiled in: they need nothing
	 * from the node and must answer with no config, no /dev, no /proc (the
	 * controller-manager's container).  So they read no config and open no
	 * log (kubelet runs init at every plugin probe; README "Cost per
	 * call"), unless FLEXVOL_DEBUG asks for every call to be logged.
	 */
	if (op && streq(op->name, "init"))
		fixed = FV_SUCCESS;
	else if (!op || !op->kubelet || !fv_op_served(cx->drv, op->run_op))
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
	r = run_kubelet_op(cx, op, argv + 2, &o, &c);
	if (r < 0 && !cx->message[0])
		fv_fail(cx, r, "%s failed: %s", op->name, fv_op_errstr(r));
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
	quiet = st != FV_FAILURE && (fixed >= 0 || fv_op_looks(op->run_op) || c.remote);
	if (!quiet || debug || fv_log_debug_wanted())
		(quiet ? fv_log : fv_log_summary)("op=%s volume=%s status=%s duration_ms=%llu%s%s%s",
						  argv[1], c.name ? c.name : "-",
						  fv_status_word(st),
						  (unsigned long long)(fv_now_ms() - t0),
						  st == FV_FAILURE ? " message=\"" : "",
						  st == FV_FAILURE ? cx->message : "",
						  st == FV_FAILURE ? "\"" : "");
	r = reply(out, st, cx, &c, op && streq(op->name, "init"));
	fv_opts_done(&o);
	free(c.ret_device);
	fv_log_close();
	return r;
}
