/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The flexvol/loop backend: one image file per claim in the loop root of
 * the node the scheduler picked (WaitForFirstConsumer), mounted by the PV
 * through the loop driver, pinned to that node by nodeAffinity.  Nothing is
 * made here: the image is made on the node, by the node agent (agent.c)
 * when it sees the PV, or by the driver at the first attach, whichever comes
 * first; reclaim is the node agent's too.  This file checks the class, the
 * node (allowedTopologies, the room its agent reports) and plans the PV.
 *
 * Class parameters: fsType (ext4, xfs; default ext4; or csi.storage.k8s.io/fstype, the
 * CSI classes' key that Kubernetes' e2e suites set, not both), preallocate (false:
 * sparse images; true: the agent allocates every block), overcommit (false:
 * a claim fits when it fits beside everything promised on the node; true:
 * when it fits in today's free space alone).  See docs/loop-provisioning.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fv/util.h"
#include "api.h"
#include "backend.h"
#include "events.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "loop.h"
#include "params.h"

#define MiB (1024ULL * 1024ULL)

struct loop_class {
	const char *name;
	const char *fstype;
	bool preallocate;
	bool overcommit;
};

void fvp_node_label(const char *node, char *buf, size_t len)
{
	size_t n = strlen(node);

	/* a label value: at most 63 of [a-z0-9.-], alphanumeric at both ends; a node name
	 * (a DNS subdomain) is one when short enough, a hash stands in for a longer one */
	if (n <= 63 && fv_kube_name_ok(node))
		snprintf(buf, len, "%s", node);
	else
		snprintf(buf, len, "h-%016llx", (unsigned long long)fv_hash64(node));
}

static int parse_bool(const char *s, bool *ret)
{
	if (streq(s, "true"))
		*ret = true;
	else if (streq(s, "false"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

#define CSI_FSTYPE "csi.storage.k8s.io/fstype"

static int loop_class_parse(json_object *sc, struct loop_class *c, char *err, size_t errlen)
{
	json_object *params = fv_json_obj(sc, "parameters"), *mo = fv_json_get(sc, "mountOptions");
	const char *mode = fv_json_str(sc, "volumeBindingMode"), *fstype = NULL;

	memset(c, 0, sizeof(*c));
	c->name = fv_json_str_in(sc, "metadata", "name");
	if (!mode || !streq(mode, "WaitForFirstConsumer"))
		return fvp_fail(err, errlen, -EINVAL,
				 "volumeBindingMode must be WaitForFirstConsumer: a loop volume lives "
				 "on one node, which the scheduler picks first");
	if (mo && json_object_is_type(mo, json_type_array) && json_object_array_length(mo))
		return fvp_fail(err, errlen, -EINVAL,
				 "mountOptions are not supported: kubelet refuses mount options on "
				 "FlexVolume PVs");
	/* no map at all: every default (the API server drops an empty one) */
	if (params) {
		json_object_object_foreach(params, key, val)
		{
			const char *v = json_object_is_type(val, json_type_string) ?
						json_object_get_string(val) : "";

			if (streq(key, "fsType") || streq(key, CSI_FSTYPE)) {
				if (!streq(v, "ext4") && !streq(v, "xfs"))
					return fvp_fail(err, errlen, -EINVAL,
							 "parameter %s must be ext4 or xfs: '%s'", key, v);
				/* as the CSI external-provisioner: one key or the other */
				if (fstype)
					return fvp_fail(err, errlen, -EINVAL,
							 "parameters fsType and %s both given: use one",
							 CSI_FSTYPE);
				fstype = v;
			} else if (streq(key, "preallocate")) {
				if (parse_bool(v, &c->preallocate) < 0)
					return fvp_fail(err, errlen, -EINVAL,
							 "parameter preallocate must be true or false: '%s'", v);
			} else if (streq(key, "overcommit")) {
				if (parse_bool(v, &c->overcommit) < 0)
					return fvp_fail(err, errlen, -EINVAL,
							 "parameter overcommit must be true or false: '%s'", v);
			} else {
				return fvp_fail(err, errlen, -EINVAL,
						 "unknown parameter '%s' (flexvol/loop knows fsType, "
						 "preallocate, overcommit)", key);
			}
		}
	}
	c->fstype = fstype ? fstype : "ext4";
	return 0;
}

static int loop_class_check(const struct fvp_site *s, json_object *sc, char *err, size_t errlen)
{
	struct loop_class c;

	(void)s;
	return loop_class_parse(sc, &c, err, errlen);
}

/* GET @path: 200 -> 0 and *ret; 404 -> 1; else <0 with a message. */
static int get(const struct fvp_site *s, const char *path, json_object **ret, char *err,
	       size_t errlen)
{
	char e[512];
	int st;

	*ret = NULL;
	st = fv_kube_request(s->k, "GET", path, NULL, ret, e, sizeof(e));
	if (st == 200 && *ret)
		return 0;
	if (st < 0)
		return fvp_fail(err, errlen, -EIO, "GET %s: %s", path, e);
	st = st == 404 ? 1 : fvp_fail(err, errlen, -EIO, "GET %s: HTTP %d %s", path, st,
					   fv_kube_status_message(*ret));
	json_object_put(*ret);
	*ret = NULL;
	return st;
}

/* Does @node match one term of the class's allowedTopologies (or has it none)? */
static bool in_topology(json_object *sc, json_object *node)
{
	json_object *terms = fv_json_get(sc, "allowedTopologies"),
		    *labels = fv_json_get(fv_json_get(node, "metadata"), "labels");

	if (!terms || !json_object_is_type(terms, json_type_array) ||
	    !json_object_array_length(terms))
		return true;
	for (size_t i = 0; i < json_object_array_length(terms); i++) {
		json_object *exprs = fv_json_get(json_object_array_get_idx(terms, i), "matchLabelExpressions");
		bool all = true;

		for (size_t j = 0; exprs && json_object_is_type(exprs, json_type_array) &&
				   j < json_object_array_length(exprs);
		     j++) {
			json_object *e = json_object_array_get_idx(exprs, j);
			const char *key = fv_json_str(e, "key"), *have = key ? fv_json_str(labels, key) : NULL;

			if (!have || !fv_json_array_has(fv_json_get(e, "values"), have))
				all = false;
		}
		if (all)
			return true;
	}
	return false;
}

/*
 * What is wrong with node @node's space report @data, in words for an event,
 * or NULL with the free bytes in *@free_b: "free" a byte count, "time"
 * seconds since the epoch within FVP_LOOP_REPORT_MAX_AGE of now either way.
 */
static const char *report_problem(json_object *data, uint64_t *free_b, char *buf, size_t len)
{
	const char *f = fv_json_str(data, "free"), *t = fv_json_str(data, "time");
	uint64_t when, now = (uint64_t)time(NULL);

	if (!data)
		return "empty";
	if (fv_quantity(f, free_b) < 0) {
		snprintf(buf, len, "unreadable: its free space '%.40s' is not a byte count", f ?: "");
		return buf;
	}
	if (!t || fv_parse_u64(t, &when) < 0) {
		snprintf(buf, len, "unreadable: its time '%.40s' is not seconds since the epoch",
			 t ?: "");
		return buf;
	}
	if (when > now && when - now > FVP_LOOP_REPORT_MAX_AGE) {
		snprintf(buf, len, "from the future (its time %.40s is %llu s ahead: is that node's "
			 "clock right?)", t, (unsigned long long)(when - now));
		return buf;
	}
	if (when < now && now - when > FVP_LOOP_REPORT_MAX_AGE) {
		snprintf(buf, len, "stale (written %llu s ago)", (unsigned long long)(now - when));
		return buf;
	}
	return NULL;
}

/*
 * Is there room for @size more bytes on @node?  What its agent reports
 * (free space, each image's allocated bytes) against what is promised to
 * the node's other PVs: a PV whose image is not there yet may take its
 * whole capacity, an image the part it has not allocated yet.
 */
static int check_room(const struct fvp_site *s, const struct loop_class *c, const char *node,
		      const char *pv_name, uint64_t size, char *err, size_t errlen)
{
	json_object *cm = NULL, *list = NULL, *data, *items;
	char path[FVP_API_PATH_MAX], label[80], why[160];
	uint64_t free_b, promised = 0, allocated;
	unsigned long long a, b;
	const char *problem;
	int r;

	fvp_api_path(path, sizeof(path), FVP_API_CONFIGMAP, s->capacity_ns, node, NULL);
	r = get(s, path, &cm, err, errlen);
	if (r < 0)
		return r;
	if (r == 1)
		return fvp_fail(err, errlen, -ENOSPC,
				 "node %s has not reported its loop root's space (ConfigMap %s/%s "
				 "missing: is the flexvol node agent running there?)",
				 node, s->capacity_ns, node);
	data = fv_json_obj(cm, "data");
	problem = report_problem(data, &free_b, why, sizeof(why));
	if (problem) {
		r = fvp_fail(err, errlen, -ENOSPC,
			      "node %s's space report is %s (ConfigMap %s/%s): is the flexvol node "
			      "agent running there?",
			      node, problem, s->capacity_ns, node);
		json_object_put(cm);
		return r;
	}
	if (!c->overcommit) {
		fvp_node_label(node, label, sizeof(label));
		fvp_api_select(path, sizeof(path), FVP_API_PV, FVP_LOOP_LABEL_NODE, label);
		r = get(s, path, &list, err, errlen);
		if (r != 0) {
			json_object_put(cm);
			return r < 0 ? r : fvp_fail(err, errlen, -EIO, "cannot list PVs");
		}
		items = fv_json_get(list, "items");
		for (size_t i = 0; items && json_object_is_type(items, json_type_array) &&
				   i < json_object_array_length(items);
		     i++) {
			json_object *pv = json_object_array_get_idx(items, i);
			json_object *opts = fv_json_get(fv_json_get(fv_json_get(pv, "spec"), "flexVolume"), "options");
			const char *name = fv_json_str_in(pv, "metadata", "name"), *img = fv_json_str(opts, "file"),
				   *rec = img ? fv_json_str(data, img) : NULL;
			uint64_t cap;

			if (!name || streq(name, pv_name) ||
			    !streq(fv_json_str(fv_json_get(fv_json_get(pv, "metadata"), "annotations"),
					"pv.kubernetes.io/provisioned-by") ?: "", FVP_LOOP_PROVISIONER) ||
			    fv_json_quantity(fv_json_get(fv_json_get(pv, "spec"), "capacity"), "storage", &cap) < 0)
				continue;
			allocated = rec && sscanf(rec, "%llu %llu", &a, &b) == 2 ? b : 0;
			/* saturating: many huge PVs (hand-made ones too) must not wrap to room */
			if (__builtin_add_overflow(promised, cap > allocated ? cap - allocated : 0,
						   &promised))
				promised = UINT64_MAX;
		}
	}
	json_object_put(list);
	json_object_put(cm);
	if (size > free_b || promised > free_b - size)
		return fvp_fail(err, errlen, -ENOSPC,
				 "node %s has no room for %llu MiB: %llu MiB free in its loop root, "
				 "%llu MiB of it promised to other volumes%s",
				 node, (unsigned long long)(size / MiB),
				 (unsigned long long)(free_b / MiB),
				 (unsigned long long)(promised / MiB),
				 c->overcommit ? "" : " (class parameter overcommit: false)");
	return 0;
}

static json_object *node_affinity(const char *hostname)
{
	json_object *na, *req, *terms, *term, *exprs, *e, *vals;

	if (!fv_json_new_all("ooaoaoa", &na, &req, &terms, &term, &exprs, &e, &vals))
		return NULL;
	fv_json_set_str(e, "key", "kubernetes.io/hostname");
	fv_json_set_str(e, "operator", "In");
	json_object_array_add(vals, json_object_new_string(hostname));
	json_object_object_add(e, "values", vals);
	json_object_array_add(exprs, e);
	json_object_object_add(term, "matchExpressions", exprs);
	json_object_array_add(terms, term);
	json_object_object_add(req, "nodeSelectorTerms", terms);
	json_object_object_add(na, "required", req);
	return na;
}

static int loop_prepare(const struct fvp_site *s, json_object *sc, json_object *pvc,
			const char *pv_name, struct fvp_volume *vol, char *err, size_t errlen)
{
	json_object *meta = fv_json_get(pvc, "metadata"), *node = NULL, *opts;
	const char *nodename = fv_json_str(fv_json_get(meta, "annotations"), "volume.kubernetes.io/selected-node"),
		   *uid = fv_json_str(meta, "uid"), *host,
		   *req = fv_json_str(fv_json_get(fv_json_get(fv_json_get(pvc, "spec"), "resources"), "requests"), "storage");
	char path[FVP_API_PATH_MAX], label[80], num[32], msg[FVP_ERR_MAX];
	struct loop_class c;
	uint64_t size;
	int r;

	memset(vol, 0, sizeof(*vol));
	r = loop_class_parse(sc, &c, msg, sizeof(msg));
	if (r < 0)
		return fvp_fail(err, errlen, r, "StorageClass '%s': %s", c.name, msg);
	if (!nodename || !*nodename)
		return fvp_fail(err, errlen, -EINVAL, "the claim has no selected node");
	if (!fv_kube_name_ok(nodename))
		return fvp_fail(err, errlen, -EINVAL,
				 "the selected node '%.253s' is not a node name (a DNS subdomain): "
				 "annotation %s", nodename, "volume.kubernetes.io/selected-node");
	if (!uid || !fv_kube_name_ok(uid) || strlen(uid) > 64)
		return fvp_fail(err, errlen, -EINVAL, "the claim has no usable uid");
	r = fv_quantity(req, &size);
	if (r == -ERANGE || (r == 0 && size > FVP_SIZE_MAX))
		return fvp_fail(err, errlen, -EINVAL,
				 "the claim's storage request %s is too large: a loop image holds at "
				 "most %llu MiB", req, (unsigned long long)(FVP_SIZE_MAX / MiB));
	if (r < 0 || !size)
		return fvp_fail(err, errlen, -EINVAL,
				 "the claim's storage request '%.64s' is not a size (a quantity such as "
				 "10Gi)", req ?: "");
	/* the loop driver wants whole sectors and at least 1Mi: whole MiB, rounded up */
	size = (size + MiB - 1) / MiB * MiB;
	fvp_api_path(path, sizeof(path), FVP_API_NODE, NULL, nodename, NULL);
	r = get(s, path, &node, err, errlen);
	if (r < 0)
		return r;
	if (r == 1)
		return fvp_fail(err, errlen, -ENOSPC, "the selected node %s does not exist",
				 nodename);
	if (!in_topology(sc, node)) {
		json_object_put(node);
		return fvp_fail(err, errlen, -ENOSPC,
				 "node %s is not in StorageClass '%s' allowedTopologies", nodename,
				 c.name);
	}
	host = fv_json_str(fv_json_get(fv_json_get(node, "metadata"), "labels"), "kubernetes.io/hostname");
	vol->node_affinity = node_affinity(host ? host : nodename);
	json_object_put(node);
	r = check_room(s, &c, nodename, pv_name, size, err, errlen);
	if (r < 0) {
		fvp_volume_done(vol);
		return r;
	}
	vol->flex_volume = json_object_new_object();
	opts = json_object_new_object();
	vol->labels = json_object_new_object();
	if (!vol->node_affinity || !vol->flex_volume || !opts || !vol->labels) {
		json_object_put(opts);
		fvp_volume_done(vol);
		return -ENOMEM;
	}
	snprintf(vol->asset, sizeof(vol->asset), "pvc-%s.img", uid);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)size);
	fv_json_set_str(opts, "file", vol->asset);
	fv_json_set_str(opts, "size", num);
	if (c.preallocate)
		fv_json_set_str(opts, "preallocate", "true");
	fv_json_set_str(vol->flex_volume, "driver", FVP_LOOP_DRIVER);
	fv_json_set_str(vol->flex_volume, "fsType", c.fstype);
	json_object_object_add(vol->flex_volume, "options", opts);
	fvp_node_label(nodename, label, sizeof(label));
	fv_json_set_str(vol->labels, FVP_LOOP_LABEL_NODE, label);
	snprintf(vol->capacity, sizeof(vol->capacity), "%lluMi", (unsigned long long)(size / MiB));
	vol->on_delete = "delete";
	snprintf(vol->where, sizeof(vol->where), "image %s of %s on node %s (%s)", vol->asset,
		 vol->capacity, nodename, c.preallocate ? "preallocated" : "sparse");
	return 0;
}

static int loop_create(const struct fvp_site *s, json_object *sc, json_object *pvc,
		       const struct fvp_volume *vol, enum fvp_made *made, char *err, size_t errlen)
{
	/* the node makes the image (agent.c, or the driver at the first attach) */
	(void)s, (void)sc, (void)pvc, (void)vol, (void)err, (void)errlen;
	*made = FVP_MADE_NEW;
	return 0;
}

static int loop_cleanup(const struct fvp_site *s, json_object *sc, json_object *pvc,
			const char *pv_name, char *err, size_t errlen)
{
	(void)s, (void)sc, (void)pvc, (void)pv_name;
	/* no PV, so no node agent made an image for it: nothing to remove */
	return fvp_fail(err, errlen, 0, "no image is made before its PV exists");
}

static int loop_reclaim(const struct fvp_site *s, json_object *pv, const char *on_delete,
			char *done, size_t donelen, char *err, size_t errlen)
{
	/* node_local: the controller leaves reclaim to the node agent (agent.c) */
	(void)s, (void)pv, (void)on_delete, (void)done, (void)donelen;
	return fvp_fail(err, errlen, 1, "the node agent removes flexvol/loop images");
}

const struct fvp_backend fvp_backend_loop = {
	.name = FVP_LOOP_PROVISIONER,
	.can_expand = true,
	.node_local = true,
	.class_check = loop_class_check,
	.prepare = loop_prepare,
	.create = loop_create,
	.cleanup = loop_cleanup,
	.reclaim = loop_reclaim,
};
