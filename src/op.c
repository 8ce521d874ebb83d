/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The op runner (fv/op.h): what every op needs around the driver's slot,
 * for both front doors (the FlexVolume program, flexvol-csi).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mountutil.h"
#include "fv/op.h"
#include "fv/util.h"

/* What the runner does around an op. */
enum {
	R_DIR = 1 << 0,	      /* @dir is a mount directory: a plain absolute path, checked */
	R_DIR_MADE = 1 << 1,  /* the caller made @dir before the call: missing is a Failure */
	R_LOCK_VOL = 1 << 2,  /* lock the volume (@name) */
	R_LOCK_DIR = 1 << 3,  /* lock @dir itself (pod mounts of one volume run in parallel) */
	R_LOCK_SOFT = 1 << 4, /* go on unlocked when the run dir cannot be written */
	R_NODE = 1 << 5,      /* @node names a node: another node's call touches nothing here */
	R_LOOK = 1 << 6,      /* never changes the node */
	R_NODE_SIDE = 1 << 7, /* runs on the node: the driver's after_node_op follows */
	R_OURS = 1 << 8,      /* an undo op naming its volume: only a mount of it is touched */
};

/* The volume an op acts on, when the front door does not name it. */
enum name_from { NAME_NONE, NAME_DIR, NAME_OPTS };

struct op_spec {
	size_t slot; /* offsetof(struct fv_driver, op) */
	unsigned int flags;
	enum name_from name;
};

#define SLOT(op) offsetof(struct fv_driver, op)

static const struct op_spec specs[FV_OP_N] = {
	[FV_OP_ATTACH] = { SLOT(attach), R_NODE | R_LOOK, NAME_OPTS },
	[FV_OP_ISATTACHED] = { SLOT(isattached), R_NODE | R_LOOK, NAME_OPTS },
	/*
	 * detach also runs in the controller-manager's container, often with a
	 * read-only root or as non-root: there is no node state to guard there,
	 * and no other driver process could share a lock on that filesystem.
	 */
	[FV_OP_DETACH] = { SLOT(detach), R_LOCK_VOL | R_LOCK_SOFT | R_NODE, NAME_NONE },
	/*
	 * waitforattach gets no directory, and the options' volume name is the
	 * PV author's to set (contract §2): no lock keyed by it.  The block class
	 * locks the backend object the options name (fv/blkvol.h).
	 */
	[FV_OP_WAITFORATTACH] = { SLOT(waitforattach), R_NODE_SIDE, NAME_OPTS },
	[FV_OP_MOUNTDEVICE] = { SLOT(mountdevice), R_DIR | R_DIR_MADE | R_LOCK_VOL | R_NODE_SIDE,
				NAME_DIR },
	/*
	 * unmountdevice touches only a mount of its volume too, but the block
	 * class asks the driver's owns() itself, with the mount it reads anyway
	 * (fv_blkvol_unmount_and_release()): no second read of the table on
	 * kubelet's path.
	 */
	[FV_OP_UNMOUNTDEVICE] = { SLOT(unmountdevice), R_DIR | R_LOCK_VOL | R_NODE_SIDE, NAME_DIR },
	/*
	 * Pod mounts lock their own directory: kubelet runs mount and unmount
	 * of one volume for different pods in parallel (contract §1.1), and
	 * one slow pod must not hold up the others.
	 */
	[FV_OP_MOUNT] = { SLOT(mount), R_DIR | R_DIR_MADE | R_LOCK_DIR | R_NODE_SIDE, NAME_DIR },
	[FV_OP_UNMOUNT] = { SLOT(unmount), R_DIR | R_LOCK_DIR | R_NODE_SIDE, NAME_DIR },
	[FV_OP_PUBLISH] = { SLOT(publish), R_DIR | R_DIR_MADE | R_LOCK_DIR | R_NODE_SIDE, NAME_NONE },
	[FV_OP_UNPUBLISH] = { SLOT(unpublish), R_DIR | R_LOCK_DIR | R_NODE_SIDE | R_OURS,
			      NAME_NONE },
	[FV_OP_EXPANDFS] = { SLOT(expandfs), R_LOCK_VOL, NAME_DIR },
	/*
	 * Our own op, never called by kubelet: the DaemonSet runs it now and
	 * then (docs/design.md, "Garbage collection").
	 */
	[FV_OP_GC] = { SLOT(gc), 0, NAME_NONE },
};

static const char *const op_names[FV_OP_N] = {
	[FV_OP_ATTACH] = "attach",
	[FV_OP_ISATTACHED] = "isattached",
	[FV_OP_DETACH] = "detach",
	[FV_OP_WAITFORATTACH] = "waitforattach",
	[FV_OP_MOUNTDEVICE] = "mountdevice",
	[FV_OP_UNMOUNTDEVICE] = "unmountdevice",
	[FV_OP_MOUNT] = "mount",
	[FV_OP_UNMOUNT] = "unmount",
	[FV_OP_PUBLISH] = "publish",
	[FV_OP_UNPUBLISH] = "unpublish",
	[FV_OP_EXPANDFS] = "expandfs",
	[FV_OP_GC] = "gc",
};

bool fv_op_served(const struct fv_driver *d, enum fv_op op)
{
	return op < FV_OP_N && *(void *const *)(const void *)((const char *)d + specs[op].slot);
}

bool fv_op_looks(enum fv_op op)
{
	return op < FV_OP_N && (specs[op].flags & R_LOOK);
}

const char *fv_op_errstr(int r)
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
		return strerror(r < 0 && r > -4096 ? -r : EIO);
	}
}

/*
 * Directory arguments come from kubelet (or the CO) and are taken literally:
 * a plain absolute path ("//" and "/./" normalised into @norm, ".." refused)
 * whose parents hold no symlink or magic link (fv_dir_open()).  The last
 * component is left to the driver (fv_dir_arg()): it may be a dead NFS mount
 * that no lookup may enter.  @must_exist: the caller created the directory
 * first (mount, mountdevice), so a missing parent is a Failure, and nothing
 * creates it; for the undo ops it means nothing to undo.
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

/*
 * Make directory @path (checked already), taken literally, or with @file an
 * empty regular file (a raw block volume's target); its parent must exist;
 * there already is fine (what it is, the driver checks).  1: made now, 0:
 * there before, or <0.
 */
static int make_dir(struct fv_ctx *cx, const char *path, bool file)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	int r = fv_dir_arg(cx, path, FV_DIRARG_PARENT_ONLY | FV_DIRARG_MUST_EXIST, &d), fd;

	if (r < 0)
		return r;
	if (!file && mkdirat(d.parent, fv_path_last(d.path), 0750) == 0)
		return 1;
	if (file) {
		fd = openat(d.parent, fv_path_last(d.path),
			    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
		if (fd >= 0) {
			close(fd);
			return 1;
		}
	}
	if (errno == EEXIST)
		return 0;
	r = -errno;
	return fv_fail(cx, r, "cannot create '%s': %s", path, strerror(-r));
}

/*
 * Remove directory @path, taken literally, when it is there and empty, or
 * the empty regular file that is a raw block volume's target (made by
 * make_dir(); the mount on it gone): 0 or <0.  Nothing else is removed.
 */
static int remove_dir(struct fv_ctx *cx, const char *path)
{
	_cleanup_(fv_dir_closep) struct fv_dir d = { .parent = -1 };
	int r = fv_dir_arg(cx, path, FV_DIRARG_PARENT_ONLY, &d);
	struct stat st;

	if (r == 1)
		return 0; /* a parent is gone: so is the directory */
	if (r < 0)
		return r;
	if (unlinkat(d.parent, fv_path_last(d.path), AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	r = -errno;
	/* not a directory: only a plain empty file goes (never a mount point: EBUSY) */
	if (r == -ENOTDIR && fstatat(d.parent, d.name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(st.st_mode) && st.st_size == 0) {
		if (unlinkat(d.parent, d.name, 0) == 0 || errno == ENOENT)
			return 0;
		r = -errno;
	}
	return fv_fail(cx, r, "cannot remove '%s': %s", path, strerror(-r));
}

/* The topmost mount at @path, as the mount table says (never a lookup: it may be a dead NFS mount). */
static int owns_at(struct fv_ctx *cx, const char *name, const char *path)
{
	struct fv_mntinfo mi;
	int r = fv_mnt_find(path, &mi);

	if (r < 0)
		return fv_fail(cx, r, "cannot read the mount table: %s", strerror(-r));
	if (r == 1)
		return -ENOENT;
	r = cx->drv->owns(cx, name, path, &mi);
	if (r == 0)
		fv_fail(cx, -FV_ERR_CONFLICT, "'%s' holds %s (%s), not a mount of volume '%s': "
			"left alone", path, mi.source, mi.fstype, name);
	return r;
}

int fv_op_owns(struct fv_ctx *cx, const char *name, const char *path)
{
	char norm[PATH_MAX];
	int fd = fv_dir_open(path, FV_DIR_PARENT, norm, sizeof(norm));

	if (fd < 0)
		return fd == -ENOENT ? -ENOENT : fv_fail(cx, fd, "'%s': %s", path, strerror(-fd));
	close(fd);
	if (!cx->drv->owns)
		return fv_fail(cx, -EOPNOTSUPP, "%s cannot tell its mounts", cx->drv->name);
	return owns_at(cx, name, norm);
}

int fv_op_stats(struct fv_ctx *cx, const char *name, const char *path, struct fv_volstats *ret)
{
	char norm[PATH_MAX];
	int fd = fv_dir_open(path, FV_DIR_PARENT, norm, sizeof(norm));

	memset(ret, 0, sizeof(*ret));
	if (fd < 0)
		return fd == -ENOENT ? -ENOENT : fv_fail(cx, fd, "'%s': %s", path, strerror(-fd));
	close(fd);
	if (!cx->drv->stats)
		return fv_fail(cx, -EOPNOTSUPP, "%s volumes have no stats", cx->drv->name);
	return cx->drv->stats(cx, name, norm, ret);
}

/*
 * Before an undo op that names its volume unmounts anything: the mount at
 * @c->dir must be the volume's, else it is left alone (a Failure that
 * names it, and a log line).  Nothing mounted is the op's to handle.
 */
static int only_ours(struct fv_ctx *cx, struct fv_op_call *c)
{
	int r;

	if (!cx->drv->owns || !c->name)
		return 0;
	r = owns_at(cx, c->name, c->dir);
	if (r == 0) {
		fv_log("%s of volume '%s': %s", op_names[c->op], c->name, cx->message);
		return -FV_ERR_CONFLICT;
	}
	return r == -ENOENT || r == 1 ? 0 : r;
}

/* Call the driver's slot for @c->op. */
static int call_slot(struct fv_ctx *cx, struct fv_op_call *c)
{
	const struct fv_driver *d = cx->drv;
	int r;

	switch (c->op) {
	case FV_OP_ATTACH:
		return d->attach(cx, c->opts, c->node, &c->ret_device);
	case FV_OP_ISATTACHED:
		r = d->isattached(cx, c->opts, c->node, &c->attached);
		c->has_attached = r == 0;
		return r;
	case FV_OP_DETACH:
		return d->detach(cx, c->name, c->node);
	case FV_OP_WAITFORATTACH:
		return d->waitforattach(cx, c->device, c->opts, &c->ret_device);
	case FV_OP_MOUNTDEVICE:
		return d->mountdevice(cx, c->dir, c->device, c->opts);
	case FV_OP_UNMOUNTDEVICE:
		return d->unmountdevice(cx, c->dir);
	case FV_OP_MOUNT:
		return d->mount(cx, c->dir, c->opts);
	case FV_OP_UNMOUNT:
		return d->unmount(cx, c->dir);
	case FV_OP_PUBLISH:
		return d->publish(cx, c->dir, c->staged, c->opts);
	case FV_OP_UNPUBLISH:
		return d->unpublish(cx, c->dir, c->name);
	case FV_OP_EXPANDFS:
		return d->expandfs(cx, c->opts, c->device, c->dir, c->name, c->new_size,
				   c->old_size);
	case FV_OP_GC:
		return d->gc(cx);
	case FV_OP_N:
		break;
	}
	return -EINVAL;
}

/* The op itself, with the directory made and removed around it as @c->flags ask. */
static int run_in_dir(struct fv_ctx *cx, struct fv_op_call *c)
{
	int made = 0, r;

	if (c->flags & FV_OP_MKDIR) {
		made = make_dir(cx, c->dir, c->flags & FV_OP_FILE);
		if (made < 0)
			return made;
	}
	r = call_slot(cx, c);
	if (r < 0 && made == 1) {
		struct fv_saved_message saved;

		/* empty unless something is mounted there, which stays */
		fv_ctx_save_message(cx, &saved);
		(void)remove_dir(cx, c->dir);
		fv_ctx_restore_message(cx, &saved, true);
	}
	if (r == 0 && (c->flags & FV_OP_RMDIR))
		r = remove_dir(cx, c->dir);
	return r;
}

int fv_op_run(struct fv_ctx *cx, struct fv_op_call *c)
{
	const struct op_spec *s;
	char lock[FV_LOCK_NAME_MAX];
	int lockfd = -1, r;

	if (c->op >= FV_OP_N)
		return fv_fail(cx, -EINVAL, "no such op");
	s = &specs[c->op];
	if (!fv_op_served(cx->drv, c->op))
		return fv_fail(cx, -EOPNOTSUPP, "%s volumes have no %s", cx->drv->name,
			       op_names[c->op]);
	if (s->flags & R_DIR) {
		r = check_dir_arg(cx, c->dir, (s->flags & R_DIR_MADE) && !(c->flags & FV_OP_MKDIR),
				  c->norm, sizeof(c->norm));
		if (r < 0)
			return r;
		c->dir = c->norm; /* the normalised form from here on */
	}
	if (!c->name && s->name == NAME_DIR && c->dir)
		c->name = fv_path_last(c->dir);
	else if (!c->name && s->name == NAME_OPTS && c->opts)
		c->name = c->opts->volume;
	c->remote = (s->flags & R_NODE) && !fv_ctx_node_is_local(cx, c->node);

	/* the lock guards this node's state; a call for another node has none to guard */
	if ((s->flags & (R_LOCK_VOL | R_LOCK_DIR)) && !c->remote &&
	    ((s->flags & R_LOCK_DIR) || c->name)) {
		if (s->flags & R_LOCK_DIR)
			snprintf(lock, sizeof(lock), "%s-dir-%s", cx->drv->name, c->dir);
		else
			fv_lock_volume_name(cx, c->name, lock, sizeof(lock));
		lockfd = fv_lock(cx, lock);
		if ((lockfd == -EROFS || lockfd == -EACCES) && (s->flags & R_LOCK_SOFT)) {
			fv_ctx_reset_message(cx);
			lockfd = -1;
		} else if (lockfd < 0) {
			return lockfd;
		}
	}
	r = (s->flags & R_OURS) ? only_ours(cx, c) : 0;
	if (r == 0)
		r = run_in_dir(cx, c);
	/*
	 * The lock file goes with the lock (fv_unlock_remove(), safe against
	 * waiters): none stays in the run dir per pod dir ever mounted.
	 */
	if (lockfd >= 0)
		fv_unlock_remove(cx, lock, lockfd);
	if ((s->flags & R_NODE_SIDE) && cx->drv->after_node_op)
		cx->drv->after_node_op(cx);
	if (r < 0 && !cx->message[0])
		fv_fail(cx, r, "%s failed: %s", op_names[c->op], fv_op_errstr(r));
	return r;
}
