/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block-volume class's collector (fv/blkvol.h; docs/design.md, "Garbage
 * collection"): the gc op and the opportunistic pass after node-side ops.
 */
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "internal.h"
#include "blkvol-internal.h"
#include "fv/blkutil.h"
#include "fv/blkvol.h"
#include "fv/lock.h"
#include "fv/log.h"
#include "fv/mounttab.h"
#include "fv/state.h"
#include "fv/util.h"

struct gc_run {
	unsigned int max_release; /* 0: no limit */
	unsigned int released, young, busy;
	int err;		  /* the first real failure */
	char msg[FV_MESSAGE_MAX]; /* and its message */
};

/* A failure of one volume's release: in use is no failure of ours, anything else is kept. */
static void gc_failed(struct fv_ctx *cx, struct gc_run *g, const char *key, int r)
{
	const char *m = fv_ctx_message(cx)[0] ? fv_ctx_message(cx) : strerror(-r);

	if (r == -EBUSY || r == -FV_ERR_CONFLICT) {
		fv_log("gc: leaving '%s': %s", key, m);
		g->busy++;
	} else {
		fv_log("gc: cannot release '%s': %s", key, m);
		if (g->err == 0) {
			g->err = r;
			snprintf(g->msg, sizeof(g->msg), "cannot release '%s': %s", key, m);
		}
	}
	fv_ctx_reset_message(cx);
}

/*
 * Is the device a record names in use anywhere on the node?  A cache's
 * word only (the number may have been reused since): in use keeps the
 * volume, never the other way round - the backend's release asks the
 * kernel about its own device again.
 */
static bool record_device_busy(json_object *rec)
{
	json_object *d;
	struct stat st;
	const char *dev;

	if (!rec || !json_object_object_get_ex(rec, "device", &d) ||
	    !json_object_is_type(d, json_type_string))
		return false;
	dev = json_object_get_string(d);
	if (fv_blk_busy(dev) != 0)
		return true;
	/* a raw block volume's device nobody opens exclusively: the binds of its node say it */
	return stat(dev, &st) == 0 && S_ISBLK(st.st_mode) && fv_mnt_count_devno(st.st_rdev) != 0;
}

/*
 * Is @rec a volume record of this class (save_record())?  A backend may keep
 * records of its own in the same directory; they are none of the collector's.
 * Records of versions before the "blkvol" mark have a "device" and no "key".
 */
static bool class_record(json_object *rec)
{
	json_object *x;

	if (json_object_object_get_ex(rec, "blkvol", &x))
		return json_object_get_boolean(x);
	return !json_object_object_get_ex(rec, "key", &x) &&
	       json_object_object_get_ex(rec, "device", &x);
}

/*
 * One volume: released when its lock is free, its record (if any) is older
 * than the grace, and nothing uses it (the kernel says so; the backend's
 * release refuses a mounted device, fv_blkvol_node_teardown() a device mount with a
 * pod on it).  Keys: a trusted name (controller mode), "?<hint>" (a
 * waitforattach nobody followed up: locked as the name it hints), or a
 * node-mode "<name>@<ident>".
 */
static int gc_key(struct fv_ctx *cx, const char *key, void *arg)
{
	struct gc_run *g = arg;
	bool hinted = key[0] == '?';
	const char *name = hinted ? key + 1 : key;
	unsigned int age = UINT_MAX;
	char lockname[FV_LOCK_NAME_MAX];
	json_object *rec = NULL;
	int lock, r;

	if (g->max_release && g->released >= g->max_release)
		return 0;
	if (!*name)
		return 0;
	fv_lock_volume_name(cx, name, lockname, sizeof(lockname));
	lock = fv_lock_try(cx, lockname);
	if (lock == -EWOULDBLOCK) {
		g->busy++; /* an op on it is running */
		return 0;
	}
	if (lock < 0) {
		gc_failed(cx, g, key, lock);
		return 0;
	}
	if (fv_state_read(cx, key, &rec) != 0)
		rec = NULL; /* no record (state wiped): the kernel alone decides */
	if (rec && !class_record(rec))
		goto out;
	if (fv_state_age(cx, key, &age) == 0 && age < cx->cfg.gc_grace) {
		g->young++;
		goto out;
	}
	if (!hinted) {
		/* a fresh waitforattach of this name: kubelet is on its way to mountdevice */
		char hkey[PATH_MAX];

		fv_blkvol_hinted_key(name, hkey, sizeof(hkey));
		if (fv_state_age(cx, hkey, &age) == 0 && age < cx->cfg.gc_grace) {
			g->young++;
			goto out;
		}
	}
	if (!hinted && fv_blkvol_node_mode(cx)) {
		char path[PATH_MAX];

		r = fv_blkvol_node_device_dir(cx, key, path, sizeof(path));
		if (r == 0)
			r = fv_blkvol_node_teardown(cx, key, path, 0);
	} else if (record_device_busy(rec)) {
		r = fv_fail(cx, -EBUSY, "its device is in use");
	} else {
		r = hinted ? fv_blkvol_release_record(cx, name, key, 0) : fv_blkvol_release_volume(cx, name, 0);
	}
	if (r < 0)
		gc_failed(cx, g, key, r);
	else
		g->released++;
out:
	json_object_put(rec);
	fv_unlock(lock);
	return 0;
}

/* A pass over the node-mode device mounts and the records; @max_look > 0 bounds the records looked at. */
static void gc_pass(struct fv_ctx *cx, struct gc_run *g, unsigned int max_look)
{
	int r;

	if (fv_blkvol_node_mode(cx)) {
		r = fv_blkvol_node_each(cx, NULL, gc_key, g);
		if (r < 0)
			gc_failed(cx, g, "device mounts", r);
	}
	r = fv_state_each(cx, max_look, gc_key, g);
	if (r < 0)
		gc_failed(cx, g, "records", fv_fail(cx, r, "cannot read the state records: %s",
						    strerror(-r)));
}

/* The collector's lock: one collector per driver at a time. */
static void gc_lock_name(const struct fv_ctx *cx, char *buf, size_t len)
{
	snprintf(buf, len, "%s-gc", cx->drv->name);
}

int fv_blkvol_op_gc(struct fv_ctx *cx)
{
	struct gc_run g = { 0 };
	char lockname[FV_LOCK_NAME_MAX];
	int lock;

	gc_lock_name(cx, lockname, sizeof(lockname));
	lock = fv_lock(cx, lockname);
	if (lock < 0)
		return lock;
	gc_pass(cx, &g, 0);
	fv_unlock(lock);
	if (g.released || g.err)
		fv_log("gc: %u released, %u in use, %u younger than %u s", g.released, g.busy,
		       g.young, cx->cfg.gc_grace);
	return g.err ? fv_fail(cx, g.err, "%s", g.msg) : 0;
}

#define GC_MAYBE_LOOK 16	 /* records an opportunistic pass looks at */
#define GC_STAMP "gc.stamp" /* in <run>/<driver>/: touched by each opportunistic pass */

void fv_blkvol_gc_maybe(struct fv_ctx *cx)
{
	struct gc_run g = { .max_release = 1 };
	char dir[PATH_MAX], stamp[PATH_MAX + sizeof(GC_STAMP)], lockname[FV_LOCK_NAME_MAX];
	struct fv_saved_message saved;
	struct timespec now;
	struct stat st;
	int lock, fd;

	if (!cx->config_ok || cx->cfg.gc_interval == 0)
		return;
	if (snprintf(dir, sizeof(dir), "%s/%s", cx->cfg.run_dir, cx->drv->name) >= (int)sizeof(dir))
		return;
	snprintf(stamp, sizeof(stamp), "%s/" GC_STAMP, dir);
	/* the common case: one stat() */
	clock_gettime(CLOCK_REALTIME, &now);
	if (stat(stamp, &st) == 0 && now.tv_sec >= st.st_mtim.tv_sec &&
	    now.tv_sec - st.st_mtim.tv_sec < (time_t)cx->cfg.gc_interval)
		return;
	fv_ctx_save_message(cx, &saved);
	fv_ctx_reset_message(cx); /* the pass's own failures are logged, never replied */
	gc_lock_name(cx, lockname, sizeof(lockname));
	lock = fv_lock_try(cx, lockname);
	if (lock < 0)
		goto out; /* another collector runs */
	if (fv_mkdir_p(dir, 0700) == 0 &&
	    (fd = open(stamp, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) >= 0) {
		(void)futimens(fd, NULL);
		close(fd);
		gc_pass(cx, &g, GC_MAYBE_LOOK);
		if (g.released || g.err)
			fv_log("gc (opportunistic): %u released", g.released);
	}
	fv_unlock(lock);
out:
	fv_ctx_restore_message(cx, &saved, true);
}
