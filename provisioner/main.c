/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-provisioner: dynamic provisioning for the flexvol drivers.
 *
 * The command line and the process; the work is in controller.c (which
 * claims and PVs, what the API sees), backend-*.c (what each provisioner
 * name makes on storage) and kube.c (the API client).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fv/macro.h"
#include "controller.h"
#include "dir.h"
#include "kube.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static volatile int stopping;

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
		"                           [--record-owners]\n"
		"\n"
		"Provisions a volume and a PV for each claim of a StorageClass whose\n"
		"provisioner is one of:");
	for (size_t i = 0; fvp_backends[i]; i++)
		fprintf(f, " %s", fvp_backends[i]->name);
	fprintf(f,
		".\nWithout --server it runs in-cluster (KUBERNETES_SERVICE_HOST/PORT, the\n"
		"service account's token and CA).\n"
		"  --root DIR      the share, mounted (default /persistentvolumes)\n"
		"  --share S:P     serve only classes whose server:share is S:P\n"
		"  --resync N      watch timeout and full re-list period, seconds (default 300)\n"
		"  --record-owners write the owner record of every PV of ours whose directory\n"
		"                  has none (PVs made before owner records; once, on upgrade)\n");
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
		{ "record-owners", no_argument, NULL, 'O' },
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
		case 'S': p.site.share = optarg; break;
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
		case 'O': p.record_owners = true; break;
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
	p.site.rootfd = fvp_root_open(root);
	if (p.site.rootfd < 0) {
		fprintf(stderr, "flexvol-provisioner: cannot open --root '%s': %s\n", root,
			strerror(-p.site.rootfd));
		kube_free(p.k);
		return 2;
	}
	if (gethostname(p.ev.identity, sizeof(p.ev.identity) - 1) < 0)
		snprintf(p.ev.identity, sizeof(p.ev.identity), "flexvol-provisioner");
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	log_info("starting: server %s, root %s%s%s, resync %u s", kc.server, root,
		 p.site.share ? ", share " : "", p.site.share ? p.site.share : "", p.resync);
	ctl_run(&p, &stopping);
	log_info("stopping");
	close(p.site.rootfd);
	kube_free(p.k);
	return 0;
}
