/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-migrate: moves one bound FlexVolume PV of a flexvol driver to the CSI driver of the
 * same backing (flexvol-csi) and back, keeping its claim and its data (docs/migration.md).
 * This file is the command line; the steps are steps.c's, the new PV pv.c's.
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
#include "migrate.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: flexvol-migrate [--server URL] [--token-file FILE]\n"
		"           [--certificate-authority FILE] --save FILE [--rollback]\n"
		"           [--csi-driver NAME] [--root DIR] [--timeout SECONDS] PV\n"
		"Moves the bound FlexVolume PV of a flexvol driver to its CSI driver\n"
		"(<driver>.csi.flexvol), keeping the claim and the data; --rollback\n"
		"moves it back from the copy saved in FILE (docs/migration.md).\n"
		FV_KUBE_OPTIONS_HELP
		"  --save FILE     the FlexVolume PV as it was: written before anything changes,\n"
		"                  read by --rollback and by a run that finishes an interrupted one\n"
		"  --csi-driver NAME  the CSI driver's name (default <driver>.csi.flexvol)\n"
		"  --root DIR      the NFS share of a PV flexvol-provisioner made, mounted here: its\n"
		"                  directory is handed to the CSI driver (and back), which then\n"
		"                  reclaims it; without it flexvol-provisioner keeps reclaiming it\n"
		"  --timeout N     how long to wait for the PV to go and to be bound (default 120)\n"
		"Exit status: 0 done (or nothing to do), 3 refused because the volume is in use\n"
		"(run it again once it is not), 2 bad usage, 1 any other failure.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		FV_KUBE_LONGOPTS,
		{ "save", required_argument, NULL, 'f' },
		{ "csi-driver", required_argument, NULL, 'd' },
		{ "root", required_argument, NULL, 'R' },
		{ "rollback", no_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct fv_kube_config kc = { .timeout_s = 30 };
	struct mig m = { .timeout_s = 120, .rootfd = -1 };
	_cleanup_free_ char *incluster = NULL;
	char *end;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (fv_kube_option(opt, optarg, &kc))
			continue;
		switch (opt) {
		case 'f': m.save = optarg; break;
		case 'd': m.csi_name = optarg; break;
		case 'R': m.root = optarg; break;
		case 'r': m.rollback = true; break;
		case 'T':
			m.timeout_s = (unsigned int)strtoul(optarg, &end, 10);
			if (*end || m.timeout_s > 3600)
				m.timeout_s = 0;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1 || !m.save || !m.timeout_s || !fv_kube_name_ok(argv[optind])) {
		fprintf(stderr, "flexvol-migrate: need --save, a --timeout of 1..3600 and one PV name "
				"(--help)\n");
		return 2;
	}
	m.pv = argv[optind];
	if (fv_kube_config_incluster(&kc, &incluster, m.err, sizeof(m.err)) < 0) {
		fprintf(stderr, "flexvol-migrate: %s\n", m.err);
		return 2;
	}
	if (m.root) {
		m.rootfd = fv_ownerdir_root_open(m.root);
		if (m.rootfd < 0) {
			fprintf(stderr, "flexvol-migrate: --root '%s': %s\n", m.root, strerror(-m.rootfd));
			return 2;
		}
	}
	r = fv_kube_new(&kc, &m.k, m.err, sizeof(m.err));
	if (r >= 0)
		r = mig_run(&m);
	if (m.k)
		fv_kube_free(m.k);
	if (m.rootfd >= 0)
		close(m.rootfd);
	if (r < 0) {
		fprintf(stderr, "flexvol-migrate: %s\n", m.err[0] ? m.err : strerror(-r));
		return r == -EBUSY ? 3 : 1;
	}
	return 0;
}
