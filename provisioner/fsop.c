/* SPDX-License-Identifier: Apache-2.0 */
/* Backend calls in a child with a deadline: see fsop.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/internal.h"
#include "fv/exec.h"
#include "dir.h"
#include "fsop.h"
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

/* In a MAP_SHARED page: what the child found. */
struct shared {
	int r;
	enum fvp_made made;
	char done[FVP_PATH_MAX + 200];
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

/* The child's side: --root again (every inherited descriptor is closed), then the call. */
static int child(void *arg)
{
	const struct job *j = arg;
	struct fvp_site s = *j->site;

	/* no --root: this instance serves node-local backends only, which use none */
	s.rootfd = s.root ? fvp_root_open(s.root) : -1;
	if (s.root && s.rootfd < 0) {
		j->out->r = s.rootfd;
		snprintf(j->out->err, sizeof(j->out->err), "cannot open the root '%s': %s", s.root,
			 strerror(-s.rootfd));
		return 0;
	}
	j->out->r = call(j, &s);
	if (s.rootfd >= 0)
		close(s.rootfd);
	return 0;
}

/* Run @j under the deadline; what the call found goes to *made / @done. */
static int run(struct job *j, enum fvp_made *made, char *done, size_t donelen, char *err,
	       size_t errlen)
{
	static const char *const names[] = { [CREATE] = "create", [CLEANUP] = "cleanup",
					     [RECLAIM] = "reclaim", [RECORD_OWNER] = "owner record" };
	struct fv_ctx cx = { 0 };
	struct fv_run fr = { 0 };
	struct shared *o;
	int r;

	if (!j->site->fs_timeout_s) {
		struct shared local = { 0 };

		j->out = &local;
		r = call(j, j->site);
		snprintf(err, errlen, "%s", local.err);
		if (done)
			snprintf(done, donelen, "%s", local.done);
		if (made)
			*made = local.made;
		return r;
	}
	o = mmap(NULL, sizeof(*o), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (o == MAP_FAILED)
		return prov_fail(err, errlen, NEG_ERRNO(), "%s: no memory for its result: %m",
				 names[j->call]);
	memset(o, 0, sizeof(*o));
	o->r = -ECHILD; /* a child that dies before it answers */
	snprintf(o->err, sizeof(o->err), "the %s ended without an answer", names[j->call]);
	j->out = o;
	/* what a function the child calls may exec gets this PATH (none does today) */
	snprintf(cx.cfg.helper_path, sizeof(cx.cfg.helper_path), "/usr/sbin:/usr/bin:/sbin:/bin");
	/*
	 * PR_SET_PDEATHSIG fires when the forking *thread* ends: the worker
	 * that forks waits for the child (or its deadline) and lives on, so the
	 * signal still means "the provisioner died".
	 */
	r = fv_fork_call_named(&cx, names[j->call], child, j, j->site->fs_timeout_s, &fr);
	/* the child's log lines (its stderr went to the capture pipe) into ours */
	if (fr.output && fr.output[0])
		fprintf(stderr, "%s%s", fr.output,
			fr.output[strlen(fr.output) - 1] == '\n' ? "" : "\n");
	fv_run_done(&fr);
	if (r == -FV_ERR_TIMEOUT) {
		fvp_metrics_inc(FVP_M_FS_TIMEOUTS);
		r = prov_fail(err, errlen, -ETIMEDOUT,
			      "the %s did not finish within %u s (killed; retried later, it "
			      "continues where it stopped)", names[j->call], j->site->fs_timeout_s);
	} else if (r < 0) {
		r = prov_fail(err, errlen, r, "cannot start the %s: %s", names[j->call],
			      strerror(-r));
	} else if (r != 0) {
		/* the child ran no call: its setup failed (status 127) or it was killed */
		r = prov_fail(err, errlen, -ECHILD, "the %s's child ended with status %d before it "
			      "answered (its setup failed: no /dev/null?)", names[j->call], r);
	} else {
		r = o->r;
		snprintf(err, errlen, "%s", o->err);
		if (done)
			snprintf(done, donelen, "%s", o->done);
		if (made)
			*made = o->made;
	}
	munmap(o, sizeof(*o));
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
