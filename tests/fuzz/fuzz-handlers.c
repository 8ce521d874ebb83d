/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer targets: one API object through the controller's handlers, as a
 * worker thread meets it (provisioner/controller.c and the backends), built
 * once per kind with -DFUZZ_KIND='"class"' (or claim, pv, node, report):
 *
 *   class   the input is a StorageClass: both backends' class_check, then a
 *           pending nfs and a pending loop claim of it, and a released PV
 *           whose onDelete is read from it
 *   claim   the input is a claim: fvp_ctl_claim_changed() and fvp_ctl_claim_deleted()
 *   pv      the input is a PV: fvp_ctl_pv_changed(), fvp_ctl_pv_deleted(), and a
 *           bound claim asking to grow, whose PV it is
 *   node    the input is the selected node of a pending loop claim, and the
 *           node of a released loop PV
 *   report  the input is the node space report (ConfigMap) of that node
 *
 * The API is answered from memory by the fv_kube_request() below, in place of
 * lib/kube.c (no network): GETs return the input or a fixed object
 * (the ones tests/provisioner makes), writes succeed.  Storage calls run in
 * process (fs_timeout_s 0) on no share (rootfd -1: every directory call
 * fails with EBADF, which the handlers must turn into an event).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "controller.h"
#include "fv/kubejson.h"
#include "fv/kube.h"

#ifndef FUZZ_KIND
#error "build with -DFUZZ_KIND='\"class\"' (claim, pv, node, report)"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fixed_json[] = {
#define CLASS_NFS 0
	"{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"StorageClass\",\"metadata\":{\"name\":"
	"\"nfs\",\"uid\":\"c1\"},\"provisioner\":\"flexvol/nfs\",\"parameters\":{\"server\":"
	"\"nfs.example.com\",\"share\":\"/export\"},\"reclaimPolicy\":\"Delete\","
	"\"volumeBindingMode\":\"Immediate\"}",
#define CLASS_LOOP 1
	"{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"StorageClass\",\"metadata\":{\"name\":"
	"\"loop\",\"uid\":\"c2\"},\"provisioner\":\"flexvol/loop\",\"allowVolumeExpansion\":true,"
	"\"volumeBindingMode\":\"WaitForFirstConsumer\"}",
#define CLAIM_NFS 2
	"{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":\"data\","
	"\"namespace\":\"team-a\",\"uid\":\"6f1c1d9e-0b7a-4c36-9d55-8a0d2b7e1f01\","
	"\"resourceVersion\":\"101\",\"annotations\":{\"volume.kubernetes.io/storage-provisioner\":"
	"\"flexvol/nfs\"}},\"spec\":{\"accessModes\":[\"ReadWriteMany\"],\"storageClassName\":"
	"\"nfs\",\"resources\":{\"requests\":{\"storage\":\"5Gi\"}},\"volumeMode\":\"Filesystem\"},"
	"\"status\":{\"phase\":\"Pending\"}}",
#define CLAIM_LOOP 3
	"{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":\"db\","
	"\"namespace\":\"team-b\",\"uid\":\"0c9e2a55-7d1b-4f0e-8a42-3b5c6d7e8f02\","
	"\"resourceVersion\":\"102\",\"annotations\":{\"volume.kubernetes.io/storage-provisioner\":"
	"\"flexvol/loop\",\"volume.kubernetes.io/selected-node\":\"node-a\"}},\"spec\":"
	"{\"accessModes\":[\"ReadWriteOnce\"],\"storageClassName\":\"loop\",\"resources\":"
	"{\"requests\":{\"storage\":\"64Mi\"}},\"volumeMode\":\"Filesystem\"},\"status\":"
	"{\"phase\":\"Pending\"}}",
#define CLAIM_GROW 4
	"{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":\"big\","
	"\"namespace\":\"team-b\",\"uid\":\"1d2e3f40-5a6b-4c7d-8e9f-0a1b2c3d4e03\","
	"\"resourceVersion\":\"103\"},\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],"
	"\"storageClassName\":\"loop\",\"volumeName\":\"pvc-1d2e3f40-5a6b-4c7d-8e9f-0a1b2c3d4e03\","
	"\"resources\":{\"requests\":{\"storage\":\"128Mi\"}}},\"status\":{\"phase\":\"Bound\","
	"\"capacity\":{\"storage\":\"64Mi\"}}}",
#define NODE 5
	"{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"node-a\",\"labels\":"
	"{\"kubernetes.io/hostname\":\"node-a\",\"kubernetes.io/os\":\"linux\"}},\"status\":"
	"{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}",
#define REPORT 6
	"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"node-a\","
	"\"namespace\":\"flexvol-loop\"},\"data\":{\"free\":\"1073741824\",\"root\":\"/x\","
	"\"pvc-0c9e2a55-7d1b-4f0e-8a42-3b5c6d7e8f99.img\":\"67108864 4096\"}}",
#define PV_LOOP 7
	"{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{\"name\":"
	"\"pvc-0c9e2a55-7d1b-4f0e-8a42-3b5c6d7e8f99\",\"uid\":\"p1\",\"resourceVersion\":\"110\","
	"\"labels\":{\"flexvol/node\":\"node-a\"},\"annotations\":{"
	"\"pv.kubernetes.io/provisioned-by\":\"flexvol/loop\",\"flexvol/on-delete\":\"delete\"},"
	"\"finalizers\":[\"external-provisioner.volume.kubernetes.io/finalizer\"]},\"spec\":"
	"{\"capacity\":{\"storage\":\"64Mi\"},\"accessModes\":[\"ReadWriteOnce\"],"
	"\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"loop\","
	"\"flexVolume\":{\"driver\":\"flexvol/loop\",\"fsType\":\"ext4\",\"options\":{\"file\":"
	"\"pvc-0c9e2a55-7d1b-4f0e-8a42-3b5c6d7e8f99.img\",\"size\":\"67108864\"}},\"nodeAffinity\":"
	"{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
	"\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"node-a\"]}]}]}}},"
	"\"status\":{\"phase\":\"Released\"}}",
#define PV_NFS 8
	"{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{\"name\":"
	"\"pvc-6f1c1d9e-0b7a-4c36-9d55-8a0d2b7e1f01\",\"uid\":\"p2\",\"resourceVersion\":\"111\","
	"\"annotations\":{\"pv.kubernetes.io/provisioned-by\":\"flexvol/nfs\"},\"finalizers\":"
	"[\"external-provisioner.volume.kubernetes.io/finalizer\"]},\"spec\":{\"capacity\":"
	"{\"storage\":\"5Gi\"},\"accessModes\":[\"ReadWriteMany\"],"
	"\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"nfs\",\"claimRef\":"
	"{\"namespace\":\"team-a\",\"name\":\"data\",\"uid\":\"6f1c1d9e-0b7a-4c36-9d55-8a0d2b7e1f01\"},"
	"\"flexVolume\":{\"driver\":\"flexvol/nfs\",\"options\":{\"server\":\"nfs.example.com\","
	"\"share\":\"/export\",\"subPath\":\"team-a-data-pvc-6f1c1d9e-0b7a-4c36-9d55-8a0d2b7e1f01\"}}},"
	"\"status\":{\"phase\":\"Released\"}}",
};

static json_object *fixed[sizeof(fixed_json) / sizeof(fixed_json[0])];
static json_object *input; /* this run's object */
static struct fvp_prov p;
static int api; /* stands in for struct fv_kube: never dereferenced */

static bool kind_is(const char *k)
{
	return !strcmp(FUZZ_KIND, k);
}

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* A list of one item, as the API answers a labelSelector. */
static json_object *list_of(json_object *item)
{
	json_object *l = json_object_new_object(), *items = json_object_new_array();

	json_object_array_add(items, json_object_get(item));
	json_object_object_add(l, "items", items);
	return l;
}

/* What the API has at @path (a new reference), or NULL: 404. */
static json_object *lookup(const char *path)
{
	const char *cls = "/apis/storage.k8s.io/v1/storageclasses/";

	if (starts(path, cls)) {
		if (kind_is("class"))
			return json_object_get(input);
		path += strlen(cls);
		return json_object_get(!strcmp(path, "nfs") ? fixed[CLASS_NFS] :
				       !strcmp(path, "loop") ? fixed[CLASS_LOOP] : NULL);
	}
	if (starts(path, "/api/v1/persistentvolumes?"))
		return list_of(kind_is("pv") ? input : fixed[PV_LOOP]);
	if (starts(path, "/api/v1/persistentvolumes/"))
		return kind_is("pv") ? json_object_get(input) : NULL;
	if (starts(path, "/api/v1/nodes?"))
		return list_of(kind_is("node") ? input : fixed[NODE]);
	if (starts(path, "/api/v1/nodes/"))
		return json_object_get(kind_is("node") ? input : fixed[NODE]);
	if (starts(path, "/api/v1/namespaces/flexvol-loop/configmaps/"))
		return json_object_get(kind_is("report") ? input : fixed[REPORT]);
	return NULL;
}

int fv_kube_request(struct fv_kube *k, const char *method, const char *path, json_object *body,
		 json_object **ret, char *err, size_t errlen)
{
	json_object *o = NULL;
	int st;

	(void)k, (void)err, (void)errlen;
	if (!strcmp(method, "GET")) {
		o = lookup(path);
		st = o ? 200 : 404;
	} else if (!strcmp(method, "POST")) {
		o = json_object_get(body);
		st = 201;
	} else if (!strcmp(method, "PUT")) {
		o = json_object_get(body);
		st = 200;
	} else {
		o = json_object_new_object();
		st = 200;
	}
	/* as kube.c: only an object is an answer */
	if (o && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	if (ret)
		*ret = o;
	else
		json_object_put(o);
	return st;
}

/* the events' POSTs (events.c): the body as text */
int fv_kube_request_text(struct fv_kube *k, const char *method, const char *path,
			  const char *body, json_object **ret, char *err, size_t errlen)
{
	json_object *o = body ? json_tokener_parse(body) : NULL;
	int st = fv_kube_request(k, method, path, o, ret, err, errlen);

	json_object_put(o);
	return st;
}

int fv_kube_delete_uid(struct fv_kube *k, const char *path, const char *uid, json_object **ret,
		    char *err, size_t errlen)
{
	(void)k, (void)path;
	*ret = NULL;
	if (!uid)
		return snprintf(err, errlen, "no uid to delete by"), -EINVAL;
	return 200;
}

const char *fv_kube_status_message(json_object *status)
{
	return fv_json_str(status, "message") ?: "";
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char now[32];

	(void)argc, (void)argv;
	/* fvp_log_info() writes a line per action: not to libFuzzer's terminal */
	stderr = fopen("/dev/null", "w");
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		fixed[i] = json_tokener_parse(fixed_json[i]);
	snprintf(now, sizeof(now), "%lld", (long long)time(NULL));
	fv_json_set_str(fv_json_get(fixed[REPORT], "data"), "time", now);
	p.k = (struct fv_kube *)&api;
	p.ev.k = p.k;
	p.site.rootfd = -1;
	p.site.k = p.k;
	p.site.capacity_ns = "flexvol-loop";
	p.site.fs_timeout_s = 0;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_tokener *tok = json_tokener_new_ex(128);
	char err[FVP_ERR_MAX];

	if (!tok)
		return 0;
	/* as kube.c parses an answer or an event (a list's items are objects too) */
	input = json_tokener_parse_ex(tok, (const char *)data, (int)size);
	json_tokener_free(tok);
	if (!json_object_is_type(input, json_type_object)) {
		json_object_put(input);
		return 0;
	}
	/* every run starts with no event sent (events are deduplicated per object) */
	memset(p.ev.sent, 0, sizeof(p.ev.sent));
	if (kind_is("class")) {
		json_object *t = fvp_ctl_trim_class(input);

		for (size_t i = 0; fvp_backends[i]; i++) {
			(void)fvp_backends[i]->class_check(&p.site, input, err, sizeof(err));
			/* the class watch keeps it trimmed: the same checks on what it keeps */
			if (t)
				(void)fvp_backends[i]->class_check(&p.site, t, err, sizeof(err));
		}
		json_object_put(t);
		(void)fvp_ctl_claim_changed(&p, fixed[CLAIM_NFS]);
		(void)fvp_ctl_claim_changed(&p, fixed[CLAIM_LOOP]);
		(void)fvp_ctl_claim_deleted(&p, fixed[CLAIM_NFS]);
		(void)fvp_ctl_pv_changed(&p, fixed[PV_NFS]);
	} else if (kind_is("claim")) {
		json_object *t = NULL;

		(void)fvp_ctl_claim_changed(&p, input);
		(void)fvp_ctl_claim_deleted(&p, input);
		/* what the runner keeps and queues of it (nothing when inert) */
		if (fvp_ctl_trim(&p, false, input, &t) > 0) {
			(void)fvp_ctl_claim_changed(&p, t);
			(void)fvp_ctl_claim_deleted(&p, t);
		}
		json_object_put(t);
	} else if (kind_is("pv")) {
		json_object *t = NULL;

		(void)fvp_ctl_pv_changed(&p, input);
		(void)fvp_ctl_pv_deleted(&p, input);
		if (fvp_ctl_trim(&p, true, input, &t) > 0) {
			(void)fvp_ctl_pv_changed(&p, t);
			(void)fvp_ctl_pv_deleted(&p, t);
		}
		json_object_put(t);
		(void)fvp_ctl_claim_changed(&p, fixed[CLAIM_GROW]);
	} else if (kind_is("node")) {
		(void)fvp_ctl_claim_changed(&p, fixed[CLAIM_LOOP]);
		(void)fvp_ctl_pv_changed(&p, fixed[PV_LOOP]);
	} else if (kind_is("report")) {
		(void)fvp_ctl_claim_changed(&p, fixed[CLAIM_LOOP]);
	}
	json_object_put(input);
	input = NULL;
	return 0;
}
