/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-migrate: moves bound FlexVolume PVs of a flexvol driver to the CSI driver of the same
 * backing (flexvol-csi) and back, keeping their claims and data (docs/migration.md).  This file
 * is the command line and the run over many PVs: every PV checked first (a plan, and the whole
 * run refused before anything changes if one of them is in use or cannot be moved), then each
 * moved in turn.  The steps are steps.c's, the new PV pv.c's, the cluster cluster.c's.
 *
 * Installed as kubectl-flexvol (a link or a copy), it is the kubectl plugin: `kubectl flexvol
 * migrate ARGS` runs it with ARGS.
 */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fv/kube.h"
#include "fv/kubejson.h"
#include "fv/macro.h"
#include "fv/ownerdir.h"
#include "fv/util.h"
#include "migrate.h"

#define PLUGIN "kubectl-flexvol"

static void usage(FILE *f, const char *cmd)
{
	fprintf(f,
		"usage: %s [--kubeconfig FILE] [--context NAME] [--dry-run] [--rollback]\n"
		"           [--save-dir DIR | --save FILE] [--csi-driver NAME] [--root DIR]\n"
		"           [--timeout SECONDS] (PV... | -l SELECTOR)\n"
		"Moves bound FlexVolume PVs of flexvol drivers to their CSI drivers\n"
		"(<driver>.csi.flexvol), keeping the claims and the data; --rollback moves them\n"
		"back from the saved copies (docs/migration.md). Every PV is checked first: if any\n"
		"is in use or cannot be moved, nothing is changed.\n"
		"The cluster is found as kubectl finds it: --server if given; in a pod, the pod's\n"
		"service account; else kubectl's configuration (--kubeconfig, KUBECONFIG,\n"
		"~/.kube/config; --context), through kubectl, which must be in PATH.\n"
		"  --kubeconfig FILE, --context NAME  as kubectl's\n"
		FV_KUBE_OPTIONS_HELP
		"  -l, --selector SEL  the PVs with these labels (as kubectl get -l), with the PVs\n"
		"                  named; of them, those of no flexvol driver are left alone\n"
		"  --dry-run       check every PV and print what would be done; change nothing\n"
		"  --save-dir DIR  where the FlexVolume PVs are saved as they were, <pv>.json:\n"
		"                  written before anything changes, read by --rollback and by a run\n"
		"                  that finishes an interrupted one (default\n"
		"                  $XDG_STATE_HOME/flexvol-migrate, else ~/.local/state/flexvol-migrate)\n"
		"  --save FILE     the copy of the one PV named, instead\n"
		"  --csi-driver NAME  the CSI driver's name (default <driver>.csi.flexvol)\n"
		"  --root DIR      the NFS share of PVs flexvol-provisioner made, mounted here: their\n"
		"                  directories are handed to the CSI driver (and back), which then\n"
		"                  reclaims them; without it flexvol-provisioner keeps reclaiming them\n"
		"  --timeout N     how long to wait for a PV to go and to be bound (default 120)\n"
		"Exit status: 0 done (or nothing to do), 3 refused because a volume is in use\n"
		"(run it again once none is), 2 bad usage, 1 any other failure.\n",
		cmd);
}

struct pvlist {
	char **v;
	size_t n, cap;
};

static int pvlist_add(struct pvlist *l, const char *name)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (streq(l->v[i], name))
			return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		char **v = reallocarray(l->v, cap, sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n] = strdup(name);
	return l->v[l->n++] ? 0 : -ENOMEM;
}

static void pvlist_free(struct pvlist *l)
{
	while (l->n)
		free(l->v[--l->n]);
	free(l->v);
}

/* Is @pv a volume this command moves (a FlexVolume PV of a flexvol/ driver, a CSI PV of ours)? */
static bool ours(struct mig *m, json_object *pv)
{
	const char *f = mig_flex_driver(pv), *c = mig_csi_driver(pv);
	size_t n;

	if (f)
		return strncmp(f, "flexvol/", 8) == 0;
	if (!c)
		return false;
	if (m->csi_name)
		return streq(c, m->csi_name);
	n = strlen(c);
	return n > 12 && streq(c + n - 12, ".csi.flexvol");
}

/* The PVs of label selector @sel into @l: those of ours; the others named as left alone. */
static int select_pvs(struct mig *m, const char *sel, struct pvlist *l)
{
	static const char base[] = "/api/v1/persistentvolumes?labelSelector=";
	_cleanup_json_ json_object *list = NULL;
	json_object *items;
	char path[2048];
	size_t i;
	int r;

	memcpy(path, base, sizeof(base));
	if (fv_kube_query_escape(path, sizeof(path), sizeof(base) - 1, sel) == sizeof(path) - 1)
		return mig_fail(m, -EINVAL, "the selector is too long");
	r = mig_get(m, path, &list);
	if (r)
		return r < 0 ? r : mig_fail(m, -EIO, "GET %s: not found", path);
	items = fv_json_get(list, "items");
	for (i = 0; i < json_object_array_length(items); i++) {
		json_object *pv = json_object_array_get_idx(items, i);
		const char *name = fv_json_str_in(pv, "metadata", "name");

		if (!name || !fv_kube_name_ok(name))
			continue;
		if (!ours(m, pv)) {
			printf("PV %s: of no flexvol driver: left alone\n", name);
			continue;
		}
		r = pvlist_add(l, name);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The default --save-dir: $XDG_STATE_HOME/flexvol-migrate, else ~/.local/state/flexvol-migrate. */
static char *default_save_dir(void)
{
	const char *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
	char *d = NULL;

	if (x && *x == '/')
		return asprintf(&d, "%s/flexvol-migrate", x) < 0 ? NULL : d;
	if (h && *h == '/')
		return asprintf(&d, "%s/.local/state/flexvol-migrate", h) < 0 ? NULL : d;
	return NULL;
}

static int save_path(struct mig *m, const char *dir, const char *file, const char *pv, char **ret)
{
	free(*ret);
	*ret = NULL;
	if (file)
		*ret = strdup(file);
	else if (asprintf(ret, "%s/%s.json", dir, pv) < 0)
		*ret = NULL;
	m->save = *ret;
	return *ret ? 0 : -ENOMEM;
}

/*
 * Every PV checked (mig_plan()); then, unless @dry_run, each moved.  Returns 0, -EBUSY (a
 * volume in use: nothing changed) or <0.
 */
static int run_all(struct mig *m, struct pvlist *l, const char *dir, const char *file, bool dry_run)
{
	_cleanup_free_ char *save = NULL;
	size_t i, busy = 0, bad = 0;
	int r;

	for (i = 0; i < l->n; i++) {
		m->pv = l->v[i];
		if (save_path(m, dir, file, m->pv, &save) < 0)
			return -ENOMEM;
		m->err[0] = '\0';
		r = mig_plan(m);
		if (r < 0 && l->n == 1)
			return r; /* its message in m->err, as it is */
		if (r < 0) {
			fprintf(stderr, "PV %s: refused: %s\n", m->pv, m->err[0] ? m->err : strerror(-r));
			if (r == -EBUSY)
				busy++;
			else
				bad++;
		}
	}
	if (busy || bad)
		return mig_fail(m, bad ? -EINVAL : -EBUSY, "%zu of %zu PVs refused (%zu in use): "
				"nothing changed", busy + bad, l->n, busy);
	if (dry_run) {
		printf("dry run: %zu PVs checked, nothing changed\n", l->n);
		return 0;
	}
	if (!file) {
		r = fv_mkdir_p(dir, 0700); /* the copies are PVs, with their secrets' names */
		if (r < 0)
			return mig_fail(m, r, "cannot make the save directory '%s': %s", dir, strerror(-r));
	}
	for (i = 0; i < l->n; i++) {
		m->pv = l->v[i];
		if (save_path(m, dir, file, m->pv, &save) < 0)
			return -ENOMEM;
		r = mig_run(m);
		if (r < 0) {
			char why[sizeof(m->err)];

			snprintf(why, sizeof(why), "%s", m->err[0] ? m->err : strerror(-r));
			mig_fail(m, r, "PV %s: %s (%zu of %zu done; the same command finishes the run)",
				 m->pv, why, i, l->n);
			return r;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		FV_KUBE_LONGOPTS,
		{ "kubeconfig", required_argument, NULL, 'k' },
		{ "context", required_argument, NULL, 'c' },
		{ "selector", required_argument, NULL, 'l' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "save", required_argument, NULL, 'f' },
		{ "save-dir", required_argument, NULL, 'D' },
		{ "csi-driver", required_argument, NULL, 'd' },
		{ "root", required_argument, NULL, 'R' },
		{ "rollback", no_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct fv_kube_config kc = { .timeout_s = 30 };
	struct mig_kubectl kctl = { .kubectl = "kubectl" };
	struct mig_cluster cl = { 0 };
	struct mig m = { .timeout_s = 120, .rootfd = -1 };
	struct pvlist pvs = { 0 };
	_cleanup_free_ char *dir = NULL;
	const char *cmd = "flexvol-migrate", *selector = NULL, *file = NULL, *base, *save_dir = NULL;
	bool dry_run = false;
	char *end;
	int opt, r, i, rc = 1;

	base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	if (streq(base, PLUGIN)) {
		/* kubectl flexvol migrate ARGS: argv is kubectl-flexvol migrate ARGS */
		cmd = "kubectl flexvol migrate";
		if (argc < 2 || !streq(argv[1], "migrate")) {
			fprintf(stderr, "usage: kubectl flexvol migrate ARGS (kubectl flexvol migrate --help)\n");
			return 2;
		}
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	while ((opt = getopt_long(argc, argv, "hl:", longopts, NULL)) != -1) {
		if (fv_kube_option(opt, optarg, &kc))
			continue;
		switch (opt) {
		case 'k': kctl.kubeconfig = optarg; break;
		case 'c': kctl.context = optarg; break;
		case 'l': selector = optarg; break;
		case 'n': dry_run = true; break;
		case 'f': file = optarg; break;
		case 'D': save_dir = optarg; break;
		case 'd': m.csi_name = optarg; break;
		case 'R': m.root = optarg; break;
		case 'r': m.rollback = true; break;
		case 'T':
			m.timeout_s = (unsigned int)strtoul(optarg, &end, 10);
			if (*end || m.timeout_s > 3600)
				m.timeout_s = 0;
			break;
		case 'h':
			usage(stdout, cmd);
			return 0;
		default:
			usage(stderr, cmd);
			return 2;
		}
	}
	if ((optind == argc && !selector) || !m.timeout_s) {
		fprintf(stderr, "%s: need PV names or --selector, and a --timeout of 1..3600 (--help)\n", cmd);
		return 2;
	}
	if (file && (save_dir || selector || argc - optind != 1)) {
		fprintf(stderr, "%s: --save FILE is for one PV named (--save-dir DIR for more)\n", cmd);
		return 2;
	}
	if (!kc.server && (kc.token_file || kc.ca_file)) {
		fprintf(stderr, "%s: --token-file and --certificate-authority go with --server\n", cmd);
		return 2;
	}
	for (i = optind; i < argc; i++)
		if (!fv_kube_name_ok(argv[i])) {
			fprintf(stderr, "%s: '%s' is not a PV name\n", cmd, argv[i]);
			return 2;
		}
	if (!file && !save_dir) {
		dir = default_save_dir();
		if (!dir) {
			fprintf(stderr, "%s: neither XDG_STATE_HOME nor HOME is set: give --save-dir\n", cmd);
			return 2;
		}
		save_dir = dir;
	}
	if (m.root) {
		m.rootfd = fv_ownerdir_root_open(m.root);
		if (m.rootfd < 0) {
			fprintf(stderr, "%s: --root '%s': %s\n", cmd, m.root, strerror(-m.rootfd));
			return 2;
		}
	}
	r = mig_cluster_open(&cl, &kc, &kctl, &m);
	if (r < 0) {
		rc = r == -EINVAL || r == -ENOENT ? 2 : 1;
		goto out;
	}
	r = fv_kube_new(&kc, &m.k, m.err, sizeof(m.err));
	for (i = optind; r >= 0 && i < argc; i++)
		r = pvlist_add(&pvs, argv[i]);
	if (r >= 0 && selector)
		r = select_pvs(&m, selector, &pvs);
	if (r >= 0 && !pvs.n)
		printf("no PV of a flexvol driver selected: nothing to do\n");
	if (r >= 0 && pvs.n)
		r = run_all(&m, &pvs, save_dir, file, dry_run);
	rc = r >= 0 ? 0 : r == -EBUSY ? 3 : 1;
out:
	if (r < 0)
		fprintf(stderr, "%s: %s\n", cmd, m.err[0] ? m.err : strerror(-r));
	pvlist_free(&pvs);
	if (m.k)
		fv_kube_free(m.k);
	mig_cluster_close(&cl);
	if (m.rootfd >= 0)
		close(m.rootfd);
	return rc;
}
