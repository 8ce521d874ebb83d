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
#include <time.h>
#include <unistd.h>

#include "flag.h"
#include "fv/macro.h"
#include "fv/util.h"
#include "controller.h"
#include "dir.h"
#include "fsop.h"
#include "httpd.h"
#include "kube.h"
#include "lease.h"
#include "jsonutil.h"
#include "metrics.h"
#include "agent.h"
#include "loop.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static volatile int stopping;
static volatile int standing_by = 1;
static struct prov p;

/* The lease was lost: stop at once, as client-go's users do (the next leader may be starting). */
static void on_lost(void *ud)
{
	(void)ud;
	log_info("leadership lost: exiting so that only the new leader works");
	_exit(1);
}

static int mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int)ts.tv_sec;
}

/*
 * /healthz: the watch loop (or, standing by, the lease loop) went round
 * within the last minute.  /readyz: that, and the first list is done or this
 * replica stands by (ready does not mean leader: a rolling update waits for
 * the new pod to be ready while the old one still holds the lease).
 */
static int health(void *ud, bool ready, char *msg, size_t len)
{
	int idle = mono_s() - flag_get(&p.healthy_at);

	(void)ud;
	if (idle > 60)
		return prov_fail(msg, len, -EIO, "the %s loop has not run for %d s",
				 flag_get(&standing_by) ? "lease" : "watch", idle);
	if (ready && !flag_get(&standing_by) && !flag_get(&p.synced))
		return prov_fail(msg, len, -EAGAIN, "the first list is not done");
	return 0;
}

/* FNV-1a of @s: a short, stable suffix for the default lease name of one --share. */
/* The pod's namespace: POD_NAMESPACE, else the service account's, else "default". */
static void pod_namespace(char *buf, size_t len)
{
	const char *e = getenv("POD_NAMESPACE");
	FILE *f;

	if (e && *e) {
		snprintf(buf, len, "%s", e);
		return;
	}
	snprintf(buf, len, "default");
	f = fopen(SA_DIR "/namespace", "re");
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\r\n")] = '\0';
		fclose(f);
		if (!buf[0])
			snprintf(buf, len, "default");
	}
}

/* --- main ------------------------------------------------------------------------------- */

/* A whole decimal number in [@lo, @hi] for option @name. */
static int number(const char *s, unsigned long lo, unsigned long hi, const char *name,
		  unsigned int *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi || *s == '-') {
		fprintf(stderr, "flexvol-provisioner: %s must be %lu..%lu\n", name, lo, hi);
		return -EINVAL;
	}
	*ret = (unsigned int)v;
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	flag_set(&stopping, 1);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: flexvol-provisioner [--server URL [--token-file FILE] "
		"[--certificate-authority FILE]]\n"
		"                           [--root DIR] [--share SERVER:PATH] [--resync SECONDS]\n"
		"                           [--workers N] [--fs-timeout SECONDS] [--watch-timeout SECONDS]\n"
		"                           [--retry-base SECONDS] [--retry-max SECONDS]\n"
		"                           [--http-endpoint ADDR] [--leader-elect[=false]]\n"
		"                           [--leader-election-namespace NS] [--leader-election-name NAME]\n"
		"                           [--leader-election-identity ID]\n"
		"                           [--leader-election-lease-duration S]\n"
		"                           [--leader-election-renew-deadline S]\n"
		"                           [--leader-election-retry-period S]\n"
		"                           [--record-owners]\n"
		"                           [--provisioners LIST] [--capacity-namespace NS]\n"
		"       flexvol-provisioner --node-agent [--node NAME] [--loop-root DIR] [--interval SECONDS]\n"
		"                           [--capacity-namespace NS] [--server URL ...]\n"
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
		"  --resync N      every N s all known claims and PVs are looked at again, from\n"
		"                  memory, not a list (default 300; 0: never)\n"
		"  --workers N     worker threads (default 4)\n"
		"  --fs-timeout N  deadline of one directory operation, seconds (default 300)\n"
		"  --watch-timeout N  a watch's timeoutSeconds; it is then resumed (default 300)\n"
		"  --retry-base N, --retry-max N  a failing object's backoff, seconds, doubled\n"
		"                  from base to max (default 15 and 1000; fractions allowed)\n"
		"  --http-endpoint ADDR  serve /metrics, /healthz, /readyz on HOST:PORT or :PORT\n"
		"                  (default :8080; \"\" turns it off)\n"
		"  --leader-elect  only the holder of a coordination.k8s.io Lease works (default\n"
		"                  on; --leader-elect=false: every replica works)\n"
		"  --leader-election-namespace NS  the Lease's (default: the pod's: POD_NAMESPACE\n"
		"                  or the service account's)\n"
		"  --leader-election-name NAME  (default flexvol-provisioner, with -<hash of\n"
		"                  --share> when --share is given: one Lease per share)\n"
		"  --leader-election-identity ID  holderIdentity (default POD_NAME, else the\n"
		"                  host name, which is the pod's name)\n"
		"  --leader-election-lease-duration/-renew-deadline/-retry-period S\n"
		"                  (default 15, 10, 2 s: client-go's)\n"
		"  --record-owners write the owner record of every PV of ours whose directory\n"
		"                  has none (PVs made before owner records; once, on upgrade)\n"
		"  --provisioners L  serve only these (comma-separated; default all); --root is\n"
		"                  opened only when one of them keeps its volumes on it\n"
		"  --capacity-namespace NS  where node agents publish their nodes' space\n"
		"                  (default " LOOP_CAPACITY_NS ")\n"
		"Node agent (flexvol/loop, one per node, docs/loop-provisioning.md):\n"
		"  --node-agent    make, preallocate and reclaim the images of this node's PVs,\n"
		"                  and publish the loop root's space\n"
		"  --node NAME     this node (default $NODE_NAME)\n"
		"  --loop-root DIR the loop driver's root on this node (default /var/lib/flexvol/loop)\n"
		"  --interval N    seconds between two passes (default 10)\n");
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
		{ "workers", required_argument, NULL, 'W' },
		{ "fs-timeout", required_argument, NULL, 'F' },
		{ "watch-timeout", required_argument, NULL, 'T' },
		{ "retry-base", required_argument, NULL, 'B' },
		{ "retry-max", required_argument, NULL, 'M' },
		{ "http-endpoint", required_argument, NULL, 'H' },
		{ "leader-elect", optional_argument, NULL, 'L' },
		{ "leader-election-namespace", required_argument, NULL, 1 },
		{ "leader-election-name", required_argument, NULL, 2 },
		{ "leader-election-identity", required_argument, NULL, 3 },
		{ "leader-election-lease-duration", required_argument, NULL, 4 },
		{ "leader-election-renew-deadline", required_argument, NULL, 5 },
		{ "leader-election-retry-period", required_argument, NULL, 6 },
		{ "record-owners", no_argument, NULL, 'O' },
		{ "provisioners", required_argument, NULL, 'P' },
		{ "capacity-namespace", required_argument, NULL, 'C' },
		{ "node-agent", no_argument, NULL, 'A' },
		{ "node", required_argument, NULL, 'N' },
		{ "loop-root", required_argument, NULL, 11 },
		{ "interval", required_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct kube_config kc = { 0 }, lkc;
	const char *root = "/persistentvolumes", *http = ":8080";
	struct fvp_lease_config lc = { .duration_s = 15, .renew_deadline_s = 10, .retry_s = 2 };
	char lns[254], lname[254], lid[254];
	struct fvp_httpd_config hc = { .health = health };
	struct fvp_httpd *httpd = NULL;
	struct fvp_lease *lease = NULL;
	struct kube *lk = NULL;
	_cleanup_free_ char *incluster = NULL;
	int exit_code = 0;
	struct sigaction sa = { .sa_handler = on_signal };
	struct fvp_agent ag = { .loop_root = "/var/lib/flexvol/loop", .interval_s = 10 };
	bool agent = false, need_root = false;
	char err[512];
	int opt, r;

	/* a backend call under its deadline: this program exec'd again (fsop.h) */
	if (argc == 3 && streq(argv[1], FVP_FSOP_ARG))
		return fvp_fsop_child(argv[2]);
	(void)fvp_fsop_init(argv[0]);
	p.leader_elect = true;
	p.resync = 300;
	p.watch_s = 300;
	p.workers = 4;
	p.retry_base_ms = 15000;
	p.retry_max_ms = 1000000;
	p.site.fs_timeout_s = 300;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': kc.server = optarg; break;
		case 't': kc.token_file = optarg; break;
		case 'c': kc.ca_file = optarg; break;
		case 'r': root = optarg; break;
		case 'S': p.site.share = optarg; break;
		case 'R':
			if (number(optarg, 0, 86400, "--resync", &p.resync) < 0)
				return 2;
			if (p.resync && p.resync < 5) {
				fprintf(stderr, "flexvol-provisioner: --resync must be 0 or 5..86400\n");
				return 2;
			}
			break;
		case 'W':
			if (number(optarg, 1, 64, "--workers", &p.workers) < 0)
				return 2;
			break;
		case 'F':
			if (number(optarg, 1, 86400, "--fs-timeout", &p.site.fs_timeout_s) < 0)
				return 2;
			break;
		case 'T':
			if (number(optarg, 1, 3600, "--watch-timeout", &p.watch_s) < 0)
				return 2;
			break;
		case 'B':
		case 'M': {
			char *end;
			double v = strtod(optarg, &end);

			if (*end || !(v >= 0.01 && v <= 86400)) {
				fprintf(stderr, "flexvol-provisioner: --retry-base/--retry-max must be "
						"0.01..86400 seconds\n");
				return 2;
			}
			*(opt == 'B' ? &p.retry_base_ms : &p.retry_max_ms) = (unsigned int)(v * 1000);
			break;
		}
		case 'H': http = optarg; break;
		case 'L':
			if (optarg && !streq(optarg, "true") && !streq(optarg, "false")) {
				fprintf(stderr, "flexvol-provisioner: --leader-elect=true|false\n");
				return 2;
			}
			p.leader_elect = !optarg || streq(optarg, "true");
			break;
		case 1: lc.ns = optarg; break;
		case 2: lc.name = optarg; break;
		case 3: lc.identity = optarg; break;
		case 4:
			if (number(optarg, 2, 3600, "--leader-election-lease-duration", &lc.duration_s) < 0)
				return 2;
			break;
		case 5:
			if (number(optarg, 1, 3600, "--leader-election-renew-deadline",
				   &lc.renew_deadline_s) < 0)
				return 2;
			break;
		case 6:
			if (number(optarg, 1, 600, "--leader-election-retry-period", &lc.retry_s) < 0)
				return 2;
			break;
		case 'O': p.record_owners = true; break;
		case 'P':
			if (fvp_backends_select(optarg, err, sizeof(err)) < 0) {
				fprintf(stderr, "flexvol-provisioner: --provisioners: %s\n", err);
				return 2;
			}
			break;
		case 'C': p.site.capacity_ns = optarg; break;
		case 'A': agent = true; break;
		case 'N': ag.node = optarg; break;
		case 11: ag.loop_root = optarg; break;
		case 'I':
			if (number(optarg, 1, 3600, "--interval", &ag.interval_s) < 0)
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	setvbuf(stderr, NULL, _IOLBF, 0);
	if (!p.site.capacity_ns)
		p.site.capacity_ns = LOOP_CAPACITY_NS;
	if (!safe_name(p.site.capacity_ns)) {
		fprintf(stderr, "flexvol-provisioner: --capacity-namespace is not a namespace name\n");
		return 2;
	}
	if (agent && !ag.node)
		ag.node = getenv("NODE_NAME");
	if (agent && (!ag.node || !safe_name(ag.node))) {
		fprintf(stderr, "flexvol-provisioner: --node-agent needs --node or $NODE_NAME (a node "
				"name)\n");
		return 2;
	}
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
	kc.stop = &stopping;
	r = kube_new(&kc, &p.k, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "flexvol-provisioner: %s\n", r == -ENOMEM ? "out of memory" : err);
		return 2;
	}
	if (p.retry_max_ms < p.retry_base_ms)
		p.retry_max_ms = p.retry_base_ms;
	if (lc.renew_deadline_s >= lc.duration_s || lc.retry_s >= lc.renew_deadline_s) {
		/* client-go's rule: the leader stops before anyone may take over */
		fprintf(stderr, "flexvol-provisioner: need retry-period < renew-deadline < "
				"lease-duration\n");
		return 2;
	}
	if (gethostname(p.ev.identity, sizeof(p.ev.identity) - 1) < 0)
		snprintf(p.ev.identity, sizeof(p.ev.identity), "flexvol-provisioner");
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (agent) {
		ag.capacity_ns = p.site.capacity_ns;
		ag.ev.k = p.k;
		snprintf(ag.ev.identity, sizeof(ag.ev.identity), "%s", ag.node);
		r = fvp_agent_run(&ag, p.k, &stopping);
		kube_free(p.k);
		return r < 0 ? 1 : 0;
	}
	p.site.k = p.k;
	for (size_t i = 0; fvp_backends[i]; i++)
		if (fvp_backend_enabled(fvp_backends[i]) && !fvp_backends[i]->node_local)
			need_root = true;
	p.site.root = need_root ? root : NULL;
	p.site.rootfd = need_root ? fvp_root_open(root) : -1;
	if (need_root && p.site.rootfd < 0) {
		fprintf(stderr, "flexvol-provisioner: cannot open --root '%s': %s\n", root,
			strerror(-p.site.rootfd));
		kube_free(p.k);
		return 2;
	}
	flag_set(&p.healthy_at, mono_s());
	fvp_metrics_set_gauges(ctl_gauges, &p);
	if (http && *http) {
		hc.address = http;
		r = fvp_httpd_start(&hc, &httpd, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "flexvol-provisioner: %s\n", err);
			if (p.site.rootfd >= 0)
				close(p.site.rootfd);
			kube_free(p.k);
			return 2;
		}
	}
	if (p.leader_elect) {
		if (!lc.ns) {
			pod_namespace(lns, sizeof(lns));
			lc.ns = lns;
		}
		if (!lc.name) {
			if (p.site.share)
				snprintf(lname, sizeof(lname), "flexvol-provisioner-%08x", fv_hash32(p.site.share));
			else
				snprintf(lname, sizeof(lname), "flexvol-provisioner");
			lc.name = lname;
		}
		if (!lc.identity) {
			const char *pod = getenv("POD_NAME");

			snprintf(lid, sizeof(lid), "%s", pod && *pod ? pod : p.ev.identity);
			lc.identity = lid;
		}
		if (!safe_name(lc.ns) || !safe_name(lc.name)) {
			fprintf(stderr, "flexvol-provisioner: the lease namespace and name must be DNS "
					"names: '%s' '%s'\n", lc.ns, lc.name);
			return 2;
		}
		/* its own client: a lease request never waits longer than the renew deadline */
		lkc = kc;
		lkc.timeout_s = lc.renew_deadline_s;
		r = kube_new(&lkc, &lk, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "flexvol-provisioner: %s\n", r == -ENOMEM ? "out of memory" : err);
			return 2;
		}
		lc.heartbeat = &p.healthy_at;
		log_info("leader election: lease %s/%s as %s (duration %u s, renew deadline %u s, "
			 "retry %u s)", lc.ns, lc.name, lc.identity, lc.duration_s,
			 lc.renew_deadline_s, lc.retry_s);
		r = fvp_lease_acquire(lk, &lc, &stopping, on_lost, NULL, &lease);
		if (r < 0 && r != -ECANCELED) {
			log_info("leader election failed: %s", strerror(-r));
			exit_code = 1;
			flag_set(&stopping, 1);
		}
	}
	flag_set(&standing_by, 0);
	log_info("starting: server %s, root %s%s%s, resync %u s, %u workers, fs deadline %u s, "
		 "backoff %u..%u ms", kc.server, need_root ? root : "(none)", p.site.share ? ", share " : "",
		 p.site.share ? p.site.share : "", p.resync, p.workers, p.site.fs_timeout_s,
		 p.retry_base_ms, p.retry_max_ms);
	if (!flag_get(&stopping))
		ctl_run(&p, &stopping);
	log_info("stopping");
	fvp_lease_release(lease);
	fvp_httpd_stop(httpd);
	fvp_metrics_set_gauges(NULL, NULL);
	kube_free(lk);
	if (p.site.rootfd >= 0)
		close(p.site.rootfd);
	kube_free(p.k);
	return exit_code;
}
