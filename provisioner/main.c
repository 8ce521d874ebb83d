/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-provisioner: dynamic provisioning for flexvol/nfs.
 *
 * Lists, then watches PersistentVolumeClaims and PersistentVolumes.  A
 * pending claim of a class whose provisioner is flexvol/nfs gets one
 * directory below --root (the share, mounted into this pod by kubelet) and
 * one PV "pvc-<claim uid>" that mounts that directory through the nfs driver.
 * A Released PV of ours with reclaim policy Delete gets the class's onDelete
 * (archive, delete, retain) and is then deleted.
 *
 * Restart safety comes from determinism, not from local state: the PV name is
 * a function of the claim, the directory a function of the claim and the
 * class, mkdir of an existing directory is success, and a PV create that
 * finds the PV (409, another replica or an earlier life of this process) is
 * success.  Every watch end (timeout, 410 Gone, dropped connection) is
 * followed by a full re-list, so nothing missed while disconnected is lost.
 */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "dir.h"
#include "kube.h"
#include "params.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define ANN_PROVISIONED_BY "pv.kubernetes.io/provisioned-by"
#define ANN_ON_DELETE "flexvol/on-delete"
#define ANN_SP "volume.kubernetes.io/storage-provisioner"
#define ANN_SP_BETA "volume.beta.kubernetes.io/storage-provisioner"
#define ANN_CLASS_BETA "volume.beta.kubernetes.io/storage-class"
#define ANN_SELECTED_NODE "volume.kubernetes.io/selected-node"
/*
 * On a claim from just before its directory is made until its PV exists: a
 * claim deleted meanwhile (even while this process is down) stays visible,
 * with a deletionTimestamp, until its directory is cleaned up.
 */
#define FINALIZER "flexvol/provisioning"
#define EVENT_REPEAT_S 600 /* the same event for the same claim at most every 10 min */
#define EVENT_CACHE 256
#define QUEUE_MAX 4096

struct pending {
	bool is_pv;
	char type[16];
	json_object *obj;
};

struct prov {
	struct kube *k;
	int rootfd;
	const char *share;   /* --share SERVER:PATH, or NULL: every class */
	unsigned int resync; /* watch timeoutSeconds */
	char identity[256];  /* the pod's host name: reportingInstance */
	struct pending queue[QUEUE_MAX];
	size_t nqueue;
	bool expired; /* a watch said 410 Gone */
	struct {
		char key[96];
		unsigned long hash;
		time_t when;
	} events[EVENT_CACHE];
};

static volatile int stopping;

/* --- logging: one line per action, to stderr (kubectl logs) ------------------------------ */

static void logf_(const char *fmt, ...) _printf_(1, 2);
static void logf_(const char *fmt, ...)
{
	char stamp[32], line[2048];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s flexvol-provisioner[%d]: %s\n", stamp, (int)getpid(), line);
}
#define log_info logf_

/* --- JSON helpers -------------------------------------------------------------------- */

static json_object *jget(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ?
		       v :
		       NULL;
}

static const char *jstr(json_object *o, const char *key)
{
	json_object *v = jget(o, key);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static const char *jstr2(json_object *o, const char *a, const char *b)
{
	return jstr(jget(o, a), b);
}

static void jset(json_object *o, const char *key, const char *val)
{
	if (val)
		json_object_object_add(o, key, json_object_new_string(val));
}

/* API object names we put into URLs: DNS-1123 subdomains (the API guarantees it; we check). */
static bool safe_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n || n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '.'))
			return false;
	return true;
}

static void rfc3339(char *buf, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* --- events on the claim --------------------------------------------------------------- */

static unsigned long hash_str(const char *a, const char *b)
{
	unsigned long h = 5381;

	for (; *a; a++)
		h = h * 33 + (unsigned char)*a;
	for (; *b; b++)
		h = h * 33 + (unsigned char)*b;
	return h;
}

/* Was this exact event for this claim sent within EVENT_REPEAT_S?  Records it otherwise. */
static bool event_repeated(struct prov *p, const char *uid, const char *reason, const char *msg)
{
	unsigned long h = hash_str(reason, msg);
	time_t now = time(NULL);
	size_t slot = 0;

	for (size_t i = 0; i < EVENT_CACHE; i++) {
		if (streq(p->events[i].key, uid)) {
			if (p->events[i].hash == h && now - p->events[i].when < EVENT_REPEAT_S)
				return true;
			slot = i;
			break;
		}
		if (p->events[i].when < p->events[slot].when)
			slot = i;
	}
	snprintf(p->events[slot].key, sizeof(p->events[slot].key), "%s", uid);
	p->events[slot].hash = h;
	p->events[slot].when = now;
	return false;
}

static void event(struct prov *p, json_object *pvc, bool warning, const char *reason,
		  const char *fmt, ...) _printf_(5, 6);
static void event(struct prov *p, json_object *pvc, bool warning, const char *reason,
		  const char *fmt, ...)
{
	json_object *meta = jget(pvc, "metadata"), *ev, *m, *io, *src, *reply = NULL;
	const char *ns = jstr(meta, "namespace"), *name = jstr(meta, "name"),
		   *uid = jstr(meta, "uid");
	char msg[1024], now[32], evname[300], path[400], err[512];
	struct timespec ts;
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_info("%s %s/%s: %s", reason, ns ? ns : "?", name ? name : "?", msg);
	if (!safe_name(ns) || !name || !uid || event_repeated(p, uid, reason, msg))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	rfc3339(now, sizeof(now));
	/* client-go's naming: <object>.<unix nanoseconds in hex> */
	snprintf(evname, sizeof(evname), "%.200s.%llx", name,
		 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	ev = json_object_new_object();
	m = json_object_new_object();
	io = json_object_new_object();
	src = json_object_new_object();
	if (!ev || !m || !io || !src) {
		json_object_put(ev);
		json_object_put(m);
		json_object_put(io);
		json_object_put(src);
		return;
	}
	jset(ev, "apiVersion", "v1");
	jset(ev, "kind", "Event");
	jset(m, "name", evname);
	jset(m, "namespace", ns);
	json_object_object_add(ev, "metadata", m);
	jset(io, "apiVersion", "v1");
	jset(io, "kind", "PersistentVolumeClaim");
	jset(io, "namespace", ns);
	jset(io, "name", name);
	jset(io, "uid", uid);
	jset(io, "resourceVersion", jstr(meta, "resourceVersion"));
	json_object_object_add(ev, "involvedObject", io);
	jset(ev, "reason", reason);
	jset(ev, "message", msg);
	jset(ev, "type", warning ? "Warning" : "Normal");
	jset(src, "component", "flexvol-provisioner");
	json_object_object_add(ev, "source", src);
	jset(ev, "firstTimestamp", now);
	jset(ev, "lastTimestamp", now);
	json_object_object_add(ev, "count", json_object_new_int(1));
	jset(ev, "reportingComponent", FVP_PROVISIONER);
	jset(ev, "reportingInstance", p->identity);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
	st = kube_request(p->k, "POST", path, ev, &reply, err, sizeof(err));
	if (st < 0)
		log_info("event %s for %s/%s not sent: %s", reason, ns, name, err);
	else if (st != 201 && st != 200)
		log_info("event %s for %s/%s not sent: HTTP %d %s", reason, ns, name, st,
			 kube_status_message(reply));
	json_object_put(reply);
	json_object_put(ev);
}

/* --- the class -------------------------------------------------------------------------- */

/*
 * GET the StorageClass @name.  Returns 1 and *ret when it exists and names our
 * provisioner, 0 when it is absent or someone else's, <0 on an API error.
 */
static int get_class(struct prov *p, const char *name, json_object **ret)
{
	char path[400], err[512];
	json_object *sc = NULL;
	const char *prov;
	int st;

	*ret = NULL;
	if (!safe_name(name))
		return 0;
	snprintf(path, sizeof(path), "/apis/storage.k8s.io/v1/storageclasses/%s", name);
	st = kube_request(p->k, "GET", path, NULL, &sc, err, sizeof(err));
	if (st < 0) {
		log_info("cannot read StorageClass %s: %s", name, err);
		return st;
	}
	if (st == 404) {
		json_object_put(sc);
		return 0;
	}
	if (st != 200 || !sc) {
		log_info("cannot read StorageClass %s: HTTP %d %s", name, st,
			 kube_status_message(sc));
		json_object_put(sc);
		return -EIO;
	}
	prov = jstr(sc, "provisioner");
	if (!prov || !streq(prov, FVP_PROVISIONER)) {
		json_object_put(sc);
		return 0;
	}
	*ret = sc;
	return 1;
}

/* Is this class on the share this instance serves (--share)? */
static bool our_share(struct prov *p, const char *server, const char *share)
{
	size_t n;

	if (!p->share)
		return true;
	if (!server || !share)
		return false;
	n = strlen(server);
	/* "server:/path", trailing slashes on either side ignored */
	if (strncmp(p->share, server, n) || p->share[n] != ':')
		return false;
	for (const char *a = p->share + n + 1, *b = share;; a++, b++) {
		while (*a == '/' && (a[1] == '/' || !a[1]))
			a++;
		while (*b == '/' && (b[1] == '/' || !b[1]))
			b++;
		if (*a != *b)
			return false;
		if (!*a)
			return true;
	}
}

static const char *claim_class(json_object *pvc)
{
	const char *c = jstr2(pvc, "spec", "storageClassName");

	return c && *c ? c : jstr(jget(jget(pvc, "metadata"), "annotations"), ANN_CLASS_BETA);
}

/* --- the claim's finalizer ------------------------------------------------------------------- */

static bool has_finalizer(json_object *pvc)
{
	json_object *f = jget(jget(pvc, "metadata"), "finalizers");

	for (size_t i = 0; f && json_object_is_type(f, json_type_array) &&
			   i < json_object_array_length(f);
	     i++) {
		json_object *v = json_object_array_get_idx(f, i);

		if (json_object_is_type(v, json_type_string) &&
		    streq(json_object_get_string(v), FINALIZER))
			return true;
	}
	return false;
}

/*
 * Add (@on) or remove our finalizer with an update of the whole claim: the
 * resourceVersion in it makes a concurrent change a 409, after which the
 * newer claim arrives by the watch and this is tried again.  Returns 0 with
 * the updated claim in *ret (may be NULL), 1 when the claim is gone, <0.
 */
static int set_finalizer(struct prov *p, json_object *pvc, bool on, json_object **ret)
{
	json_object *copy = NULL, *meta, *f, *nf, *reply = NULL;
	const char *ns = jstr2(pvc, "metadata", "namespace"), *name = jstr2(pvc, "metadata", "name");
	char path[600], err[512];
	int st;

	if (ret)
		*ret = NULL;
	if (!safe_name(ns) || !safe_name(name))
		return -EINVAL;
	if (json_object_deep_copy(pvc, &copy, NULL) < 0 || !copy)
		return -ENOMEM;
	meta = jget(copy, "metadata");
	f = jget(meta, "finalizers");
	nf = json_object_new_array();
	if (!nf) {
		json_object_put(copy);
		return -ENOMEM;
	}
	for (size_t i = 0; f && json_object_is_type(f, json_type_array) &&
			   i < json_object_array_length(f);
	     i++) {
		json_object *v = json_object_array_get_idx(f, i);

		if (!json_object_is_type(v, json_type_string) ||
		    !streq(json_object_get_string(v), FINALIZER))
			json_object_array_add(nf, json_object_get(v));
	}
	if (on)
		json_object_array_add(nf, json_object_new_string(FINALIZER));
	json_object_object_add(meta, "finalizers", nf);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
	st = kube_request(p->k, "PUT", path, copy, &reply, err, sizeof(err));
	json_object_put(copy);
	if (st == 200) {
		if (ret)
			*ret = reply;
		else
			json_object_put(reply);
		return 0;
	}
	if (st == 404) {
		json_object_put(reply);
		return 1;
	}
	if (st < 0)
		log_info("claim %s/%s: %s finalizer: %s", ns, name, on ? "adding the" : "removing the", err);
	else if (st != 409)
		log_info("claim %s/%s: %s finalizer: HTTP %d %s", ns, name,
			 on ? "adding the" : "removing the", st, kube_status_message(reply));
	json_object_put(reply);
	return st == 409 ? -EAGAIN : -EIO;
}

/* --- provisioning ------------------------------------------------------------------------- */

static json_object *build_pv(const char *pv_name, json_object *pvc, const struct fvp_class *c,
			     json_object *options)
{
	json_object *meta = jget(pvc, "metadata"), *spec = jget(pvc, "spec");
	json_object *pv = json_object_new_object(), *m = json_object_new_object(),
		    *ann = json_object_new_object(), *s = json_object_new_object(),
		    *cap = json_object_new_object(), *ref = json_object_new_object(),
		    *fx = json_object_new_object();

	if (!pv || !m || !ann || !s || !cap || !ref || !fx) {
		json_object_put(pv);
		json_object_put(m);
		json_object_put(ann);
		json_object_put(s);
		json_object_put(cap);
		json_object_put(ref);
		json_object_put(fx);
		json_object_put(options);
		return NULL;
	}
	jset(pv, "apiVersion", "v1");
	jset(pv, "kind", "PersistentVolume");
	jset(m, "name", pv_name);
	jset(ann, ANN_PROVISIONED_BY, FVP_PROVISIONER);
	jset(ann, ANN_ON_DELETE, fvp_on_delete_name(c->on_delete));
	json_object_object_add(m, "annotations", ann);
	json_object_object_add(pv, "metadata", m);

	jset(cap, "storage", jstr(jget(jget(spec, "resources"), "requests"), "storage"));
	json_object_object_add(s, "capacity", cap);
	json_object_object_add(s, "accessModes", json_object_get(jget(spec, "accessModes")));
	jset(s, "persistentVolumeReclaimPolicy", c->reclaim_policy);
	jset(s, "storageClassName", c->name);
	jset(s, "volumeMode", "Filesystem");
	jset(ref, "apiVersion", "v1");
	jset(ref, "kind", "PersistentVolumeClaim");
	jset(ref, "namespace", jstr(meta, "namespace"));
	jset(ref, "name", jstr(meta, "name"));
	jset(ref, "uid", jstr(meta, "uid"));
	jset(ref, "resourceVersion", jstr(meta, "resourceVersion"));
	json_object_object_add(s, "claimRef", ref);
	jset(fx, "driver", FVP_PROVISIONER);
	if (c->read_only)
		json_object_object_add(fx, "readOnly", json_object_new_boolean(1));
	json_object_object_add(fx, "options", options);
	json_object_object_add(s, "flexVolume", fx);
	json_object_object_add(pv, "spec", s);
	return pv;
}

static void provision(struct prov *p, json_object *pvc, json_object *sc, const char *pv_name)
{
	json_object *spec = jget(pvc, "spec"), *meta = jget(pvc, "metadata"), *options = NULL,
		    *pv = NULL, *reply = NULL, *modes, *updated = NULL;
	const char *ns = jstr(meta, "namespace"), *name = jstr(meta, "name"), *size, *vm;
	char err[FVP_ERR_MAX], sub[FVP_PATH_MAX + 1];
	struct fvp_class c;
	bool created = false;
	int r, st;

	r = fvp_class_parse(sc, &c, err, sizeof(err));
	if (r < 0) {
		event(p, pvc, true, "ProvisioningFailed", "StorageClass '%s': %s",
		      jstr2(sc, "metadata", "name"), err);
		return;
	}
	if (!our_share(p, c.server, c.share)) {
		log_info("claim %s/%s: class %s names %s:%s, this instance serves %s: left to "
			 "another instance", ns, name, c.name, c.server, c.share, p->share);
		return;
	}
	vm = jstr(spec, "volumeMode");
	if (vm && !streq(vm, "Filesystem")) {
		event(p, pvc, true, "ProvisioningFailed",
		      "volumeMode %s is not supported: flexvol/nfs volumes are filesystems", vm);
		return;
	}
	size = jstr(jget(jget(spec, "resources"), "requests"), "storage");
	if (!size || !*size) {
		event(p, pvc, true, "ProvisioningFailed", "the claim requests no storage size");
		return;
	}
	modes = jget(spec, "accessModes");
	if (!modes || !json_object_is_type(modes, json_type_array) ||
	    !json_object_array_length(modes)) {
		event(p, pvc, true, "ProvisioningFailed", "the claim has no accessModes");
		return;
	}
	r = fvp_path_expand(c.path_pattern, pvc, pv_name, sub, sizeof(sub), err, sizeof(err));
	if (r < 0) {
		event(p, pvc, true, "ProvisioningFailed", "StorageClass '%s': %s", c.name, err);
		return;
	}
	r = fvp_pv_options(&c, sub, &options, err, sizeof(err));
	if (r < 0) {
		event(p, pvc, true, "ProvisioningFailed", "StorageClass '%s': %s", c.name, err);
		return;
	}
	if (!has_finalizer(pvc)) {
		r = set_finalizer(p, pvc, true, &updated);
		if (r != 0) {
			json_object_put(options);
			return; /* 409: the newer claim comes by the watch; 404: gone */
		}
		pvc = updated;
	}
	r = fvp_dir_make(p->rootfd, sub, c.mode, c.has_uid ? c.uid : (uid_t)-1,
			 c.has_gid ? c.gid : (gid_t)-1, &created);
	if (r < 0) {
		json_object_put(options);
		event(p, pvc, true, "ProvisioningFailed", "cannot create directory '%s' on the share: %s",
		      sub,
		      r == -ENOTDIR || r == -ELOOP ?
			      "a symlink or a file is in the way (symlinks are never followed)" :
		      r == -EXDEV ? "another mount is in the way" :
				    strerror(-r));
		json_object_put(updated);
		return;
	}
	log_info("claim %s/%s: directory %s %s (mode %04o%s)", ns, name, sub,
		 created ? "created" : "exists already, reused", (unsigned int)c.mode,
		 c.has_uid || c.has_gid ? ", owner set" : "");
	pv = build_pv(pv_name, pvc, &c, options);
	if (!pv) {
		log_info("claim %s/%s: out of memory", ns, name);
		json_object_put(updated);
		return;
	}
	st = kube_request(p->k, "POST", "/api/v1/persistentvolumes", pv, &reply, err, sizeof(err));
	if (st == 201 || st == 200) {
		event(p, pvc, false, "ProvisioningSucceeded",
		      "Successfully provisioned volume %s: %s:%s/%s", pv_name, c.server, c.share, sub);
	} else if (st == 409) {
		/* another replica, or an earlier run of this one, was first: one PV all the same */
		log_info("claim %s/%s: PV %s exists already (created by another replica or before a "
			 "restart)", ns, name, pv_name);
	} else if (st < 0) {
		log_info("claim %s/%s: creating PV %s failed: %s (retried at the next re-list)", ns,
			 name, pv_name, err);
	} else {
		event(p, pvc, true, "ProvisioningFailed", "creating PV %s failed: HTTP %d %s",
		      pv_name, st, kube_status_message(reply));
	}
	/* the PV carries the claim's lifecycle from here (the binder also clears it, below) */
	if (st == 201 || st == 200 || st == 409)
		(void)set_finalizer(p, pvc, false, NULL);
	json_object_put(reply);
	json_object_put(pv);
	json_object_put(updated);
}

/* 1 when PV @name exists, 0 when not, <0 on an API error. */
static int pv_exists(struct prov *p, const char *name)
{
	char path[400], err[512];
	int st;

	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", name);
	st = kube_request(p->k, "GET", path, NULL, NULL, err, sizeof(err));
	if (st < 0)
		log_info("GET PV %s: %s", name, err);
	return st == 200 ? 1 : st == 404 ? 0 : st < 0 ? st : -EIO;
}

/* Which class serves @pvc: 1 with *ret_sc when ours, 0 when not (or not for us), <0 on error. */
static int claim_is_ours(struct prov *p, json_object *pvc, json_object **ret_sc)
{
	json_object *ann = jget(jget(pvc, "metadata"), "annotations");
	const char *prov = jstr(ann, ANN_SP), *cls;

	*ret_sc = NULL;
	if (!prov)
		prov = jstr(ann, ANN_SP_BETA);
	if (prov && !streq(prov, FVP_PROVISIONER))
		return 0;
	cls = claim_class(pvc);
	if (!cls || !*cls)
		return 0;
	return get_class(p, cls, ret_sc);
}

static void remove_unused_dir(struct prov *p, json_object *pvc);

/*
 * A claim being deleted that still has our finalizer: it was deleted between
 * its mkdir and its PV (a crash, or a PV create that kept failing).  Its
 * directory goes if it is empty, then the finalizer, so the API can finish.
 */
static void claim_finish_deleted(struct prov *p, json_object *pvc)
{
	remove_unused_dir(p, pvc);
	if (set_finalizer(p, pvc, false, NULL) == 0)
		log_info("claim %s/%s deleted before its PV: finalizer removed",
			 jstr2(pvc, "metadata", "namespace"), jstr2(pvc, "metadata", "name"));
}

static void claim_changed(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *sc = NULL;
	const char *uid = jstr(meta, "uid"), *phase = jstr2(pvc, "status", "phase"),
		   *vol = jstr2(pvc, "spec", "volumeName");
	char pv_name[128];
	int r;

	if (!uid || strlen(uid) > 64 || !safe_name(uid))
		return;
	if (jget(meta, "deletionTimestamp")) {
		if (has_finalizer(pvc))
			claim_finish_deleted(p, pvc);
		return;
	}
	if ((phase && !streq(phase, "Pending")) || (vol && *vol)) {
		if (has_finalizer(pvc) && set_finalizer(p, pvc, false, NULL) == 0)
			log_info("claim %s/%s is bound: finalizer removed", jstr(meta, "namespace"),
				 jstr(meta, "name"));
		return;
	}
	r = claim_is_ours(p, pvc, &sc);
	if (r <= 0) {
		/* no longer ours (its class is gone or changed): do not hold it */
		if (r == 0 && has_finalizer(pvc))
			(void)set_finalizer(p, pvc, false, NULL);
		return;
	}
	/* WaitForFirstConsumer: the scheduler picks the node first (the annotation says so) */
	if (jstr(sc, "volumeBindingMode") && streq(jstr(sc, "volumeBindingMode"), "WaitForFirstConsumer") &&
	    !jstr(jget(meta, "annotations"), ANN_SELECTED_NODE)) {
		json_object_put(sc);
		return;
	}
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	r = pv_exists(p, pv_name);
	if (r == 0)
		provision(p, pvc, sc, pv_name);
	else if (r == 1 && has_finalizer(pvc))
		(void)set_finalizer(p, pvc, false, NULL);
	json_object_put(sc);
}

/*
 * A claim is gone.  If it never got its PV (deleted while provisioning
 * failed, or between mkdir and the PV create), its directory is removed when
 * empty: nothing is left behind, and nothing with data is touched.
 */
static void remove_unused_dir(struct prov *p, json_object *pvc)
{
	json_object *meta = jget(pvc, "metadata"), *sc = NULL;
	const char *uid = jstr(meta, "uid");
	char pv_name[128], err[FVP_ERR_MAX], sub[FVP_PATH_MAX + 1];
	struct fvp_class c;
	int r;

	if (!uid || !safe_name(uid) || strlen(uid) > 64 || claim_is_ours(p, pvc, &sc) <= 0)
		return;
	snprintf(pv_name, sizeof(pv_name), "pvc-%s", uid);
	if (pv_exists(p, pv_name) == 0 && fvp_class_parse(sc, &c, err, sizeof(err)) == 0 &&
	    our_share(p, c.server, c.share) &&
	    fvp_path_expand(c.path_pattern, pvc, pv_name, sub, sizeof(sub), err, sizeof(err)) == 0) {
		r = fvp_dir_remove_empty(p->rootfd, sub);
		if (r == 0)
			log_info("claim %s/%s deleted before its PV was made: directory %s removed "
				 "(if it was there and empty)",
				 jstr(meta, "namespace"), jstr(meta, "name"), sub);
		else if (r != -ENOTEMPTY)
			log_info("claim %s/%s deleted: directory %s not removed: %s",
				 jstr(meta, "namespace"), jstr(meta, "name"), sub, strerror(-r));
	}
	json_object_put(sc);
}

static void claim_deleted(struct prov *p, json_object *pvc)
{
	remove_unused_dir(p, pvc);
}

/* --- reclaiming ----------------------------------------------------------------------------- */

static void pv_changed(struct prov *p, json_object *pv)
{
	json_object *meta = jget(pv, "metadata"), *spec = jget(pv, "spec"), *ann, *fx, *opts,
		    *sc = NULL, *body, *pre, *reply = NULL;
	const char *name = jstr(meta, "name"), *uid = jstr(meta, "uid"), *sub, *od = NULL, *cls;
	char err[512], path[400], archived[FVP_PATH_MAX + 64] = "";
	enum fvp_on_delete action = FVP_ARCHIVE;
	int r, st;

	ann = jget(meta, "annotations");
	if (!jstr(ann, ANN_PROVISIONED_BY) || !streq(jstr(ann, ANN_PROVISIONED_BY), FVP_PROVISIONER))
		return;
	if (!jstr2(pv, "status", "phase") || !streq(jstr2(pv, "status", "phase"), "Released") ||
	    !jstr(spec, "persistentVolumeReclaimPolicy") ||
	    !streq(jstr(spec, "persistentVolumeReclaimPolicy"), "Delete") || !safe_name(name))
		return;
	fx = jget(spec, "flexVolume");
	opts = jget(fx, "options");
	sub = jstr(opts, "subPath");
	if (!jstr(fx, "driver") || !streq(jstr(fx, "driver"), FVP_PROVISIONER))
		return;
	if (!our_share(p, jstr(opts, "server"), jstr(opts, "share")))
		return;
	if (!fvp_check_subpath(sub)) {
		log_info("PV %s: subPath '%s' is not a directory this provisioner made; not touched",
			 name, sub ? sub : "");
		return;
	}

	/* onDelete: the class's as it is now; the one recorded at provisioning if it is gone */
	cls = jstr(spec, "storageClassName");
	r = cls && *cls ? get_class(p, cls, &sc) : 0;
	if (r < 0)
		return; /* retried at the next re-list */
	if (r == 1)
		od = jstr(jget(sc, "parameters"), "onDelete");
	if (!od)
		od = jstr(ann, ANN_ON_DELETE);
	if (od && fvp_on_delete_parse(od, &action) < 0) {
		log_info("PV %s: onDelete '%s' is not archive, delete or retain; nothing done", name,
			 od);
		json_object_put(sc);
		return;
	}
	json_object_put(sc);

	switch (action) {
	case FVP_DELETE:
		r = fvp_dir_delete(p->rootfd, sub);
		break;
	case FVP_ARCHIVE:
		r = fvp_dir_archive(p->rootfd, sub, archived, sizeof(archived));
		break;
	case FVP_RETAIN:
		r = 0;
		break;
	}
	if (r < 0) {
		log_info("PV %s: %s of directory %s failed: %s; PV kept, retried at the next re-list",
			 name, fvp_on_delete_name(action), sub, strerror(-r));
		return;
	}
	log_info("PV %s released: directory %s %s%s", name, sub,
		 action == FVP_DELETE ? "deleted" : action == FVP_RETAIN ? "retained" :
		 archived[0] ? "archived as " : "already archived or absent", archived);

	/* the uid precondition: never delete a PV re-created under the same name meanwhile */
	body = json_object_new_object();
	pre = json_object_new_object();
	if (!body || !pre) {
		json_object_put(body);
		json_object_put(pre);
		return;
	}
	jset(body, "apiVersion", "v1");
	jset(body, "kind", "DeleteOptions");
	jset(pre, "uid", uid);
	json_object_object_add(body, "preconditions", pre);
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", name);
	st = kube_request(p->k, "DELETE", path, body, &reply, err, sizeof(err));
	if (st == 200 || st == 202)
		log_info("PV %s deleted", name);
	else if (st == 404)
		log_info("PV %s was deleted already", name);
	else if (st < 0)
		log_info("PV %s: delete failed: %s", name, err);
	else
		log_info("PV %s: delete failed: HTTP %d %s", name, st, kube_status_message(reply));
	json_object_put(reply);
	json_object_put(body);
}

/* --- list and watch -------------------------------------------------------------------------- */

/*
 * List @base in pages, handing every item to @fn.  The list's resourceVersion
 * goes to @rv.  Returns 0, -ESTALE when the continue token expired (410), <0.
 */
static int list_all(struct prov *p, const char *base, bool is_pv, char *rv, size_t rvlen)
{
	_cleanup_free_ char *cont = NULL;
	char err[512];

	for (;;) {
		_cleanup_free_ char *path = NULL;
		json_object *list = NULL, *items;
		const char *c;
		int st;

		if (asprintf(&path, "%s?limit=500%s%s", base, cont ? "&continue=" : "",
			     cont ? cont : "") < 0)
			return -ENOMEM;
		st = kube_request(p->k, "GET", path, NULL, &list, err, sizeof(err));
		if (st < 0) {
			log_info("list %s: %s", base, err);
			return st;
		}
		if (st != 200 || !list) {
			log_info("list %s: HTTP %d %s", base, st, kube_status_message(list));
			json_object_put(list);
			return st == 410 ? -ESTALE : -EIO;
		}
		items = jget(list, "items");
		for (size_t i = 0; items && json_object_is_type(items, json_type_array) &&
				   i < json_object_array_length(items);
		     i++) {
			json_object *o = json_object_array_get_idx(items, i);

			if (is_pv)
				pv_changed(p, o);
			else
				claim_changed(p, o);
		}
		snprintf(rv, rvlen, "%s", jstr2(list, "metadata", "resourceVersion") ?: "");
		c = jstr2(list, "metadata", "continue");
		free(cont);
		cont = c && *c ? strdup(c) : NULL;
		json_object_put(list);
		if (!cont)
			return 0;
		/* a continue token is base64url: safe in a query, but check */
		if (strspn(cont, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=") !=
		    strlen(cont))
			return -EIO;
	}
}

static int on_event(struct prov *p, bool is_pv, const char *type, json_object *obj)
{
	if (streq(type, "ERROR")) {
		/* {"kind":"Status","code":410,"reason":"Expired",...}: the resourceVersion is gone */
		json_object *code = jget(obj, "code");

		log_info("%s watch: %s (%d %s): re-listing", is_pv ? "PV" : "claim",
			 kube_status_message(obj), code ? json_object_get_int(code) : 0,
			 jstr(obj, "reason") ?: "");
		p->expired = true;
		return -1;
	}
	if (streq(type, "BOOKMARK"))
		return 0;
	if (p->nqueue >= QUEUE_MAX)
		return -1; /* far behind: a re-list catches up */
	p->queue[p->nqueue].is_pv = is_pv;
	snprintf(p->queue[p->nqueue].type, sizeof(p->queue[p->nqueue].type), "%s", type);
	p->queue[p->nqueue].obj = json_object_get(obj);
	p->nqueue++;
	return 0;
}

static int on_pvc_event(void *ud, const char *type, json_object *obj)
{
	return on_event(ud, false, type, obj);
}

static int on_pv_event(void *ud, const char *type, json_object *obj)
{
	return on_event(ud, true, type, obj);
}

static int drain(void *ud)
{
	struct prov *p = ud;

	for (size_t i = 0; i < p->nqueue; i++) {
		struct pending *e = &p->queue[i];

		if (!stopping) {
			if (e->is_pv && !streq(e->type, "DELETED"))
				pv_changed(p, e->obj);
			else if (!e->is_pv && streq(e->type, "DELETED"))
				claim_deleted(p, e->obj);
			else if (!e->is_pv)
				claim_changed(p, e->obj);
		}
		json_object_put(e->obj);
		e->obj = NULL;
	}
	p->nqueue = 0;
	return 0;
}

static void pause_s(unsigned int s)
{
	for (unsigned int i = 0; i < s * 10 && !stopping; i++)
		usleep(100000);
}

static int run(struct prov *p)
{
	unsigned int backoff = 1;

	while (!stopping) {
		char rv_pv[64], rv_pvc[64], err[512], path[256];
		time_t t0;
		int r;

		/* PVs first: releasing frees nothing a claim waits for, but it is cheap and complete */
		r = list_all(p, "/api/v1/persistentvolumes", true, rv_pv, sizeof(rv_pv));
		if (r == 0)
			r = list_all(p, "/api/v1/persistentvolumeclaims", false, rv_pvc, sizeof(rv_pvc));
		if (r < 0) {
			log_info("re-list failed; next try in %u s", backoff);
			pause_s(backoff);
			backoff = backoff >= 30 ? 60 : backoff * 2;
			continue;
		}
		snprintf(path, sizeof(path),
			 "/api/v1/persistentvolumeclaims?watch=1&allowWatchBookmarks=true"
			 "&resourceVersion=%s&timeoutSeconds=%u", rv_pvc, p->resync);
		r = kube_watch_add(p->k, path, on_pvc_event, p, p->resync, NULL);
		snprintf(path, sizeof(path),
			 "/api/v1/persistentvolumes?watch=1&allowWatchBookmarks=true"
			 "&resourceVersion=%s&timeoutSeconds=%u", rv_pv, p->resync);
		if (r == 0)
			r = kube_watch_add(p->k, path, on_pv_event, p, p->resync, NULL);
		if (r < 0) {
			log_info("cannot start watches: %s", strerror(-r));
			pause_s(backoff);
			continue;
		}
		p->expired = false;
		t0 = time(NULL);
		r = kube_watch_run(p->k, &stopping, drain, p, err, sizeof(err));
		drain(p);
		if (stopping)
			break;
		if (p->expired || r == -ESTALE)
			log_info("watch expired (410 Gone): re-listing");
		else
			log_info("watch ended (%s): re-listing", err[0] ? err : "stopped");
		/* a server that ends watches at once must not make this a busy loop */
		if (r < 0 || time(NULL) - t0 < 2) {
			pause_s(backoff);
			backoff = backoff >= 30 ? 60 : backoff * 2;
		} else {
			backoff = 1;
		}
	}
	return 0;
}

/* --- main ------------------------------------------------------------------------------- */

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: flexvol-provisioner [--server URL [--token-file FILE] "
		"[--certificate-authority FILE]]\n"
		"                           [--root DIR] [--share SERVER:PATH] [--resync SECONDS]\n"
		"\n"
		"Provisions a directory and a PV for each claim of a StorageClass whose\n"
		"provisioner is " FVP_PROVISIONER ".  Without --server it runs in-cluster\n"
		"(KUBERNETES_SERVICE_HOST/PORT, the service account's token and CA).\n"
		"  --root DIR      the share, mounted (default /persistentvolumes)\n"
		"  --share S:P     serve only classes whose server:share is S:P\n"
		"  --resync N      watch timeout and full re-list period, seconds (default 300)\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "token-file", required_argument, NULL, 't' },
		{ "certificate-authority", required_argument, NULL, 'c' },
		{ "root", required_argument, NULL, 'r' },
		{ "share", required_argument, NULL, 'S' },
		{ "resync", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct kube_config kc = { 0 };
	const char *root = "/persistentvolumes";
	_cleanup_free_ char *incluster = NULL;
	static struct prov p;
	struct sigaction sa = { .sa_handler = on_signal };
	char err[512];
	int opt, r;

	p.resync = 300;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': kc.server = optarg; break;
		case 't': kc.token_file = optarg; break;
		case 'c': kc.ca_file = optarg; break;
		case 'r': root = optarg; break;
		case 'S': p.share = optarg; break;
		case 'R': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);

			if (*end || v < 5 || v > 86400) {
				fprintf(stderr, "flexvol-provisioner: --resync must be 5..86400 seconds\n");
				return 2;
			}
			p.resync = (unsigned int)v;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	setvbuf(stderr, NULL, _IOLBF, 0);
	if (!kc.server) {
		const char *host = getenv("KUBERNETES_SERVICE_HOST"),
			   *port = getenv("KUBERNETES_SERVICE_PORT");

		if (!host || !*host || !port || !*port) {
			fprintf(stderr, "flexvol-provisioner: not in a cluster (KUBERNETES_SERVICE_HOST "
					"unset): give --server\n");
			return 2;
		}
		if (asprintf(&incluster, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s",
			     host, port) < 0)
			return 1;
		kc.server = incluster;
		if (!kc.token_file)
			kc.token_file = SA_DIR "/token";
		if (!kc.ca_file)
			kc.ca_file = SA_DIR "/ca.crt";
	}
	r = kube_new(&kc, &p.k, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "flexvol-provisioner: %s\n", r == -ENOMEM ? "out of memory" : err);
		return 2;
	}
	p.rootfd = fvp_root_open(root);
	if (p.rootfd < 0) {
		fprintf(stderr, "flexvol-provisioner: cannot open --root '%s': %s\n", root,
			strerror(-p.rootfd));
		kube_free(p.k);
		return 2;
	}
	if (gethostname(p.identity, sizeof(p.identity) - 1) < 0)
		snprintf(p.identity, sizeof(p.identity), "flexvol-provisioner");
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	log_info("starting: server %s, root %s%s%s, resync %u s", kc.server, root,
		 p.share ? ", share " : "", p.share ? p.share : "", p.resync);
	run(&p);
	log_info("stopping");
	close(p.rootfd);
	kube_free(p.k);
	return 0;
}
