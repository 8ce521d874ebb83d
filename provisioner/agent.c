/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The flexvol/loop node agent: see agent.h.
 *
 * Confinement: the agent only ever touches names directly in the loop root
 * that fv_image_name_ok() accepts ("pvc-<uid>.img": no '/', no dot
 * files), through the root's descriptor; it creates with O_EXCL|O_NOFOLLOW
 * and opens existing files with fv_open_regular_beneath() (never a FIFO,
 * device node or symlink).  It removes an image only when the image's owner
 * record (FV_LOOP_OWNER_XATTR, in the trusted namespace: only CAP_SYS_ADMIN
 * writes it) names the PV being reclaimed, the same record the loop driver
 * keeps, and only while no loop device is bound to it (a mounted image is
 * always bound).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fv/loop.h"
#include "fv/macro.h"
#include "fv/util.h"
#include "agent.h"
#include "flag.h"
#include "fv/image.h"
#include "api.h"
#include "controller.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "loop.h"
#include "metrics.h"
#include "params.h"

/* The image of a live PV: made when missing, sized, owned, and allocated when @prealloc. */
static int ensure_image(int rootfd, const char *img, const char *pv, uint64_t size, bool prealloc)
{
	char msg[512];
	int r = fv_image_ensure(rootfd, img, pv, size, prealloc, NULL, msg, sizeof(msg));

	if (r < 0)
		fvp_log_warning("%s (PV %s)", msg, pv);
	else if (msg[0])
		fvp_log_info("%s", msg);
	return r;
}

/* Delete PV @pv, by uid (never a PV re-created under the same name). */
static int delete_pv(struct fv_kube *k, json_object *pv)
{
	const char *name = fv_json_str_in(pv, "metadata", "name");
	json_object *reply = NULL;
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	int st;

	fvp_api_path(path, sizeof(path), FVP_API_PV, NULL, name, NULL);
	st = fv_kube_delete_uid(k, path, fv_json_str_in(pv, "metadata", "uid"), &reply, err, sizeof(err));
	if (st == 200 || st == 202 || st == 404)
		fvp_log_info("PV %s deleted", name);
	else
		fvp_log_warning("PV %s: delete failed: %s", name, st < 0 ? err : fv_kube_status_message(reply));
	json_object_put(reply);
	return st == 200 || st == 202 || st == 404 ? 0 : -EIO;
}

/* Remove the deletion-protection finalizer from @pv (if it has it): its asset is gone. */
static int drop_finalizer(struct fv_kube *k, json_object *pv)
{
	int r;

	if (!fv_json_array_has(fv_json_get(fv_json_get(pv, "metadata"), "finalizers"), FVP_PV_FINALIZER))
		return 0;
	/* a conflict (another change meanwhile) is tried again at the next pass */
	r = fvp_finalizer_set(k, pv, FVP_PV_FINALIZER, false, NULL);
	return r == 0 || r == 1 ? 0 : -EIO;
}

/*
 * Released PV @pv, policy Delete: its image goes when its owner record
 * names the PV and nothing holds it, then the PV.  A refusal leaves both,
 * with a warning event on the PV; an image held by a loop device is tried
 * again at the next pass (kubelet is still tearing down).
 */
static int reclaim(struct fvp_agent *a, struct fv_kube *k, int rootfd, json_object *pv,
		   const char *img)
{
	const char *name = fv_json_str_in(pv, "metadata", "name");
	char msg[512];
	int r;

	r = fv_image_remove(rootfd, img, name, msg, sizeof(msg));
	if (r == -EBUSY || r == -EAGAIN) {
		fvp_log_info("PV %s released: %s; next pass", name, msg);
		return r;
	}
	if (r < 0) {
		fvp_event(&a->ev, pv, true, "VolumeFailedDelete", "on node %s, not removed: %s",
			  a->node, msg);
		return r;
	}
	fvp_log_info("PV %s released: %s", name, msg[0] ? msg : "its image is not on this node (never made, or removed)");
	r = drop_finalizer(k, pv);
	return r < 0 ? r : delete_pv(k, pv);
}

static bool pv_reclaimable(json_object *pv)
{
	const char *phase = fv_json_str_in(pv, "status", "phase"),
		   *policy = fv_json_str_in(pv, "spec", "persistentVolumeReclaimPolicy");

	if (!policy || !streq(policy, "Delete"))
		return false;
	if (phase && (streq(phase, "Released") || streq(phase, "Failed")))
		return true;
	/* deleted while not bound (the finalizer keeps it for us) */
	return fv_json_get(fv_json_get(pv, "metadata"), "deletionTimestamp") && (!phase || !streq(phase, "Bound"));
}

/* Every PV of this node's label: images made, preallocated, reclaimed. */
static int pvs_pass(struct fvp_agent *a, struct fv_kube *k, int rootfd)
{
	json_object *list = NULL, *items;
	char path[FVP_API_PATH_MAX], label[80], err[FV_KUBE_ERR_MAX];
	int st, ret = 0;

	fvp_node_label(a->node, label, sizeof(label));
	fvp_api_select(path, sizeof(path), FVP_API_PV, FVP_LOOP_LABEL_NODE, label);
	st = fv_kube_request(k, "GET", path, NULL, &list, err, sizeof(err));
	if (st != 200 || !list) {
		fvp_log_warning("listing this node's PVs: %s", st < 0 ? err : fv_kube_status_message(list));
		json_object_put(list);
		return -EIO;
	}
	items = fv_json_get(list, "items");
	for (size_t i = 0; items && json_object_is_type(items, json_type_array) &&
			   i < json_object_array_length(items);
	     i++) {
		json_object *pv = json_object_array_get_idx(items, i), *spec = fv_json_get(pv, "spec");
		json_object *opts = fvp_pv_driver_options(pv, FVP_LOOP_DRIVER);
		const char *name = fv_json_str_in(pv, "metadata", "name"), *img = fv_json_str(opts, "file"),
			   *by = fv_json_str(fv_json_get(fv_json_get(pv, "metadata"), "annotations"), FVP_ANN_PROVISIONED_BY),
			   *phase = fv_json_str_in(pv, "status", "phase"), *pre = fv_json_str(opts, "preallocate");
		uint64_t size = 0, cap = 0;
		int r;

		if (!by || !streq(by, FVP_LOOP_PROVISIONER) || !opts || !fv_kube_name_ok(name) ||
		    !fv_image_name_ok(img))
			continue;
		if (pv_reclaimable(pv)) {
			r = reclaim(a, k, rootfd, pv, img);
		} else if (fv_json_get(fv_json_get(pv, "metadata"), "deletionTimestamp") ||
			   (phase && (streq(phase, "Released") || streq(phase, "Failed")))) {
			continue; /* Retain: the image stays as it is */
		} else {
			(void)fv_quantity(fv_json_str(opts, "size"), &size);
			(void)fv_json_quantity(fv_json_get(spec, "capacity"), "storage", &cap);
			size = size > cap ? size : cap;
			/* what no file can be (the controller never writes it): left alone */
			if (size < 1024 * 1024 || size > INT64_MAX - 511)
				continue;
			size = (size + 511) / 512 * 512;
			r = ensure_image(rootfd, img, name, size, pre && streq(pre, "true"));
		}
		if (r < 0 && r != -EBUSY && !ret)
			ret = r;
	}
	json_object_put(list);
	return ret;
}

/* The report: free space and every image's size and allocated bytes, as ConfigMap data. */
static json_object *report(struct fvp_agent *a, int rootfd)
{
	json_object *data = json_object_new_object();
	struct statvfs vfs;
	char num[64];
	DIR *d;
	struct dirent *e;
	int dfd;

	if (!data)
		return NULL;
	if (fstatvfs(rootfd, &vfs) < 0) {
		fvp_log_error("loop root %s: statvfs: %s", a->loop_root, strerror(errno));
		json_object_put(data);
		return NULL;
	}
	dfd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		json_object_put(data);
		return NULL;
	}
	while ((e = readdir(d))) {
		struct stat st;

		if (!fv_image_name_ok(e->d_name) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		snprintf(num, sizeof(num), "%lld %llu", (long long)st.st_size,
			 (unsigned long long)st.st_blocks * 512);
		fv_json_set_str(data, e->d_name, num);
	}
	closedir(d);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)vfs.f_bavail * vfs.f_frsize);
	fv_json_set_str(data, "free", num);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)vfs.f_blocks * vfs.f_frsize);
	fv_json_set_str(data, "size", num);
	snprintf(num, sizeof(num), "%lld", (long long)time(NULL));
	fv_json_set_str(data, "time", num);
	fv_json_set_str(data, "root", a->loop_root);
	return data;
}

/* Create or replace the ConfigMap named after the node with @data (taken). */
static int publish(struct fvp_agent *a, struct fv_kube *k, json_object *data)
{
	json_object *cm = NULL, *reply = NULL, *m, *labels;
	char path[FVP_API_PATH_MAX], err[FV_KUBE_ERR_MAX];
	int st;

	fvp_api_path(path, sizeof(path), FVP_API_CONFIGMAP, a->capacity_ns, a->node, NULL);
	st = fv_kube_request(k, "GET", path, NULL, &cm, err, sizeof(err));
	if (st == 200 && !cm)
		snprintf(err, sizeof(err), "the answer is not an object");
	if ((st != 200 && st != 404) || (st == 200 && !cm)) {
		fvp_log_warning("reading ConfigMap %s/%s: %s", a->capacity_ns, a->node,
			 st < 0 || st == 200 ? err : fv_kube_status_message(cm));
		json_object_put(cm);
		json_object_put(data);
		return -EIO;
	}
	if (st == 404) {
		json_object_put(cm);
		cm = fv_kube_object_new("v1", "ConfigMap", a->capacity_ns, a->node, &m);
		if (!cm || !fv_json_new_all("o", &labels)) {
			json_object_put(cm);
			json_object_put(data);
			return -ENOMEM;
		}
		fv_json_set_str(labels, "app.kubernetes.io/part-of", "flexvol");
		fv_json_set_str(labels, "app.kubernetes.io/component", "loop-capacity");
		json_object_object_add(m, "labels", labels);
	}
	json_object_object_add(cm, "data", data);
	if (st == 404) {
		fvp_api_path(path, sizeof(path), FVP_API_CONFIGMAP, a->capacity_ns, NULL, NULL);
		st = fv_kube_request(k, "POST", path, cm, &reply, err, sizeof(err));
	} else {
		/* a whole replacement: images gone since the last report drop out */
		st = fv_kube_request(k, "PUT", path, cm, &reply, err, sizeof(err));
	}
	if (st != 200 && st != 201)
		fvp_log_warning("publishing ConfigMap %s/%s: %s", a->capacity_ns, a->node,
			 st < 0 ? err : fv_kube_status_message(reply));
	json_object_put(reply);
	json_object_put(cm);
	return st == 200 || st == 201 ? 0 : -EIO;
}

/*
 * Is @data what was published last, give or take "time" and "free" moving
 * by less than 1%, and is that younger than REPUBLISH_S?  Then the write is
 * skipped: one ConfigMap update per node every few seconds would be a steady
 * load on etcd for nothing.  The reader does not believe a report older than
 * FVP_LOOP_REPORT_MAX_AGE, so it is refreshed well before that.
 */
#define REPUBLISH_S 60

static uint64_t last_sig;
static unsigned long long last_free;
static time_t last_t;

static bool unchanged(json_object *data)
{
	unsigned long long f = strtoull(fv_json_str(data, "free") ?: "0", NULL, 10);
	uint64_t sig = 0;
	bool same;

	/* an order-independent signature of every entry but time and free */
	json_object_object_foreach(data, key, val)
	{
		char kv[600];

		if (streq(key, "time") || streq(key, "free"))
			continue;
		snprintf(kv, sizeof(kv), "%s=%s", key, json_object_get_string(val));
		sig += fv_hash64(kv);
	}
	same = last_t && sig == last_sig && time(NULL) - last_t < REPUBLISH_S &&
	       (f > last_free ? f - last_free : last_free - f) <= last_free / 100;
	if (!same) {
		last_sig = sig;
		last_free = f;
		last_t = time(NULL);
	}
	return same;
}

static int mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int)ts.tv_sec;
}

int fvp_agent_pass(struct fvp_agent *a, struct fv_kube *k)
{
	_cleanup_close_ int rootfd = open(a->loop_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	json_object *data;
	int r, w;

	if (rootfd < 0) {
		fvp_log_error("loop root %s: %s", a->loop_root, strerror(errno));
		return NEG_ERRNO();
	}
	r = pvs_pass(a, k, rootfd);
	data = report(a, rootfd);
	if (!data)
		return -EIO;
	if (unchanged(data)) {
		json_object_put(data);
		/* the list (the API) answered, and the published report is still the node's */
		fvp_flag_set(&a->api_ok, r != -EIO);
		return r;
	}
	w = publish(a, k, data);
	if (w < 0)
		last_t = 0; /* not published: the next pass tries again */
	else
		fvp_flag_set(&a->published, 1);
	fvp_flag_set(&a->api_ok, w == 0 && r != -EIO);
	return w ?: r;
}

int fvp_agent_health(void *ud, bool ready, char *msg, size_t len)
{
	struct fvp_agent *a = ud;
	int idle = mono_s() - fvp_flag_get(&a->passed_at), limit = 2 * (int)a->interval_s + 60;

	if (idle > limit)
		return fvp_fail(msg, len, -EIO, "no pass has ended for %d s (a pass every %u s)", idle,
				a->interval_s);
	if (!ready)
		return 0;
	if (!fvp_flag_get(&a->published))
		return fvp_fail(msg, len, -EAGAIN, "no space report published yet (ConfigMap %s/%s)",
				a->capacity_ns, a->node);
	if (!fvp_flag_get(&a->api_ok))
		return fvp_fail(msg, len, -EIO, "the last pass could not reach the API server "
				"(the log says why)");
	return 0;
}

int fvp_agent_run(struct fvp_agent *a, struct fv_kube *k, volatile int *stopping)
{
	fvp_log_info("node agent on %s: loop root %s, report in ConfigMap %s/%s every %u s", a->node,
		 a->loop_root, a->capacity_ns, a->node, a->interval_s);
	fvp_flag_set(&a->passed_at, mono_s());
	while (!*stopping) {
		int r = fvp_agent_pass(a, k);

		fvp_metrics_agent_pass(r >= 0 || r == -EBUSY);
		fvp_flag_set(&a->passed_at, mono_s());
		for (unsigned int i = 0; i < a->interval_s * 10 && !*stopping; i++)
			usleep(100000);
	}
	fvp_log_info("node agent stopping");
	return 0;
}
