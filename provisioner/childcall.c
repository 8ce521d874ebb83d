/* SPDX-License-Identifier: Apache-2.0 */
/* Backend calls in a child with a deadline: see childcall.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* memfd_create */
#include <sys/stat.h>
#include <unistd.h>

#include "fv/ctx.h"
#include "fv/exec.h"
#include "childcall.h"
#include "fv/ownerdir.h"
#include "fv/kubejson.h"
#include "metrics.h"

enum call { CREATE, CLEANUP, RECLAIM, RECORD_OWNER };

struct job {
	enum call call;
	const struct fvp_site *site;
	const struct fvp_backend *b;
	json_object *sc, *obj;
	const struct fvp_volume *vol;
	const char *pv_name, *on_delete;
	struct shared *out;
};

/* What the call found: the child writes it over the job in the memfd. */
struct shared {
	int r;
	enum fvp_made made;
	char done[FVP_DONE_MAX];
	char err[FVP_ERR_MAX];
};

static int call(const struct job *j, const struct fvp_site *s)
{
	struct shared *o = j->out;

	switch (j->call) {
	case CREATE:
		return j->b->create(s, j->sc, j->obj, j->vol, &o->made, o->err, sizeof(o->err));
	case CLEANUP:
		return j->b->cleanup(s, j->sc, j->obj, j->pv_name, o->err, sizeof(o->err));
	case RECLAIM:
		return j->b->reclaim(s, j->obj, j->on_delete, o->done, sizeof(o->done), o->err,
				     sizeof(o->err));
	case RECORD_OWNER:
		return j->b->record_owner(s, j->obj, o->err, sizeof(o->err));
	}
	return -EINVAL;
}

/*
 * Why exec and not fork alone: the provisioner has threads (workers, the
 * watch, the lease, the HTTP endpoint), and a child forked from a
 * threaded process inherits every lock another thread held at that
 * instant, never to be released.  json-c's parser takes glibc's locale
 * lock (duplocale() per parse), gmtime_r() the time zone lock, a log line
 * the stderr lock: a child forked while the watch thread parses an event
 * hangs on its first parse until the deadline kills it (with the default
 * --fs-timeout, 5 minutes of a claim doing nothing).  An exec'd child
 * starts clean; fork-to-exec is only src/exec.c's async-signal-safe set-up.
 */
static char self_exe[PATH_MAX];

int fvp_childcall_init(const char *argv0)
{
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);

	/* no /proc (an empty chroot): the path we were started by, if absolute */
	if (n <= 0 || (size_t)n >= sizeof(self_exe) - 1 || strstr(self_exe, " (deleted)")) {
		if (!argv0 || argv0[0] != '/' || strlen(argv0) >= sizeof(self_exe))
			return -ENOENT;
		snprintf(self_exe, sizeof(self_exe), "%s", argv0);
		return 0;
	}
	self_exe[n] = '\0';
	return 0;
}

static const char *const names[] = { [CREATE] = "create", [CLEANUP] = "cleanup",
				     [RECLAIM] = "reclaim", [RECORD_OWNER] = "owner record" };

/* The job, as the exec'd child reads it from the memfd. */
static json_object *job_json(const struct job *j)
{
	json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	if (json_object_object_add(o, "call", json_object_new_int(j->call)) < 0 ||
	    json_object_object_add(o, "backend", json_object_new_string(j->b->name)) < 0 ||
	    (j->site->root &&
	     json_object_object_add(o, "root", json_object_new_string(j->site->root)) < 0) ||
	    (j->site->share &&
	     json_object_object_add(o, "share", json_object_new_string(j->site->share)) < 0) ||
	    (j->sc && json_object_object_add(o, "sc", json_object_get(j->sc)) < 0) ||
	    (j->obj && json_object_object_add(o, "obj", json_object_get(j->obj)) < 0) ||
	    (j->vol && json_object_object_add(o, "asset", json_object_new_string(j->vol->asset)) < 0) ||
	    (j->pv_name &&
	     json_object_object_add(o, "pv_name", json_object_new_string(j->pv_name)) < 0) ||
	    (j->on_delete &&
	     json_object_object_add(o, "on_delete", json_object_new_string(j->on_delete)) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/*
 * `flexvol-provisioner --fs-call FD`: the job from memfd @FD, the call, and
 * its result written over the job.  Exit 0 when the result is written.
 */
int fvp_childcall_main(const char *fdstr)
{
	struct fvp_site s = { .rootfd = -1 };
	struct fvp_volume vol = { 0 };
	struct shared o = { .r = -EINVAL };
	struct job j = { .site = &s, .out = &o };
	json_object *job;
	char *end, *text;
	struct stat st;
	long fd = strtol(fdstr, &end, 10);
	int which;

	if (*end || fd < 3 || fd > 1024 || fstat((int)fd, &st) < 0 || st.st_size <= 0 ||
	    st.st_size > 64 << 20)
		return 127;
	text = calloc(1, (size_t)st.st_size + 1);
	if (!text || pread((int)fd, text, (size_t)st.st_size, 0) != st.st_size) {
		free(text);
		return 127;
	}
	job = json_tokener_parse(text);
	free(text);
	which = json_object_get_int(fv_json_get(job, "call"));
	for (size_t i = 0; fvp_backends[i]; i++)
		if (streq(fvp_backends[i]->name, fv_json_str(job, "backend") ?: ""))
			j.b = fvp_backends[i];
	if (!job || !j.b || which < CREATE || which > RECORD_OWNER)
		return 127;
	j.call = (enum call)which;
	s.root = fv_json_str(job, "root");
	s.share = fv_json_str(job, "share");
	j.sc = fv_json_get(job, "sc");
	j.obj = fv_json_get(job, "obj");
	j.pv_name = fv_json_str(job, "pv_name");
	j.on_delete = fv_json_str(job, "on_delete");
	if (fv_json_str(job, "asset")) {
		snprintf(vol.asset, sizeof(vol.asset), "%s", fv_json_str(job, "asset"));
		j.vol = &vol;
	}
	if (s.root) {
		s.rootfd = fv_ownerdir_root_open(s.root);
		if (s.rootfd < 0) {
			o.r = s.rootfd;
			snprintf(o.err, sizeof(o.err), "cannot open the root '%s': %s", s.root,
				 strerror(-s.rootfd));
		}
	}
	if (!s.root || s.rootfd >= 0)
		o.r = call(&j, &s);
	json_object_put(job);
	if (ftruncate((int)fd, 0) < 0 || pwrite((int)fd, &o, sizeof(o), 0) != (ssize_t)sizeof(o))
		return 127;
	return 0;
}

/* Run @j under the deadline; what the call found goes to *made / @done. */
static int run(struct job *j, enum fvp_made *made, char *done, size_t donelen, char *err,
	       size_t errlen)
{
	/* what a function the child calls may exec gets this PATH (none does today) */
	struct fv_exec_opts xo = { .helper_path = "/usr/sbin:/usr/bin:/sbin:/bin",
				   .timeout_s = j->site->fs_timeout_s,
				   /* this program: no copy of our memory (fv/exec.h) */
				   .flags = FV_EXEC_SPAWN };
	struct fv_ctx cx = { 0 };
	struct fv_run fr = { 0 };
	struct shared o = { 0 };
	json_object *job;
	const char *text;
	char fdstr[16];
	bool answered;
	size_t len;
	int r, fd, status;

	/*
	 * A node-local backend's controller-side calls touch no storage (its node
	 * agent makes and removes the assets): nothing to put a deadline on, and
	 * an exec per claim for nothing.
	 */
	if (!j->site->fs_timeout_s || j->b->node_local) {
		j->out = &o;
		r = call(j, j->site);
		goto answer;
	}
	if (!self_exe[0])
		return fvp_fail(err, errlen, -ENOENT, "%s: no path to this program to run it by "
				 "(start it by an absolute path, or with /proc mounted)",
				 names[j->call]);
	job = job_json(j);
	if (!job)
		return fvp_fail(err, errlen, -ENOMEM, "%s: out of memory", names[j->call]);
	text = json_object_to_json_string_ext(job, JSON_C_TO_STRING_PLAIN);
	len = strlen(text);
	fd = memfd_create("flexvol-childcall", MFD_CLOEXEC);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
		r = fvp_fail(err, errlen, NEG_ERRNO(), "%s: cannot hand it to its child: %m",
			      names[j->call]);
		json_object_put(job);
		if (fd >= 0)
			close(fd);
		return r;
	}
	json_object_put(job);
	snprintf(fdstr, sizeof(fdstr), "%d", fd);
	xo.keep_fd = fd;
	r = fv_exec(&cx, (const char *const[]){ self_exe, FVP_CHILDCALL_ARG, fdstr, NULL }, &xo, &fr);
	status = fr.status;
	/* the child's log lines (its stderr went to the capture pipe) into ours */
	if (fr.output && fr.output[0])
		fprintf(stderr, "%s%s", fr.output,
			fr.output[strlen(fr.output) - 1] == '\n' ? "" : "\n");
	fv_run_done(&fr);
	answered = r == 0 && pread(fd, &o, sizeof(o), 0) == (ssize_t)sizeof(o);
	close(fd);
	if (r == -FV_ERR_TIMEOUT) {
		fvp_metrics_inc(FVP_M_FS_TIMEOUTS);
		return fvp_fail(err, errlen, -ETIMEDOUT,
				 "the %s did not finish within %u s (killed; retried later, it "
				 "continues where it stopped)", names[j->call], j->site->fs_timeout_s);
	}
	if (r < 0 && r != -FV_ERR_HELPER)
		return fvp_fail(err, errlen, r, "cannot start the %s: %s", names[j->call],
				 strerror(-r));
	if (!answered)
		/* the child ran no call: its setup failed (status 127) or it was killed */
		return fvp_fail(err, errlen, -ECHILD, "the %s's child ended with status %d before "
				 "it answered", names[j->call], status);
	r = o.r;
answer:
	o.err[sizeof(o.err) - 1] = o.done[sizeof(o.done) - 1] = '\0';
	snprintf(err, errlen, "%s", o.err);
	if (done)
		snprintf(done, donelen, "%s", o.done);
	if (made)
		*made = o.made;
	return r;
}

int fvp_backend_create(const struct fvp_site *s, const struct fvp_backend *b, json_object *sc,
		       json_object *pvc, const struct fvp_volume *vol, enum fvp_made *made,
		       char *err, size_t errlen)
{
	struct job j = { .call = CREATE, .site = s, .b = b, .sc = sc, .obj = pvc, .vol = vol };

	return run(&j, made, NULL, 0, err, errlen);
}

int fvp_backend_cleanup(const struct fvp_site *s, const struct fvp_backend *b, json_object *sc,
			json_object *pvc, const char *pv_name, char *err, size_t errlen)
{
	struct job j = { .call = CLEANUP, .site = s, .b = b, .sc = sc, .obj = pvc,
			 .pv_name = pv_name };

	return run(&j, NULL, NULL, 0, err, errlen);
}

int fvp_backend_reclaim(const struct fvp_site *s, const struct fvp_backend *b, json_object *pv,
			const char *on_delete, char *done, size_t donelen, char *err, size_t errlen)
{
	struct job j = { .call = RECLAIM, .site = s, .b = b, .obj = pv, .on_delete = on_delete };

	return run(&j, NULL, done, donelen, err, errlen);
}

int fvp_backend_record_owner(const struct fvp_site *s, const struct fvp_backend *b, json_object *pv,
			     char *err, size_t errlen)
{
	struct job j = { .call = RECORD_OWNER, .site = s, .b = b, .obj = pv };

	return run(&j, NULL, NULL, 0, err, errlen);
}
