/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-provisioner: dynamic provisioning for the flexvol drivers.
 *
 * The command line and the process: the controller (runner.c watches claims
 * and PVs and hands each to its flow: provision.c, resize.c, reclaim.c, over
 * controller.c; backend-*.c make the volumes on storage) or, --node-agent,
 * the loop node agent (agent.c).  The API client is lib/kube.c.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flag.h"
#include "fv/macro.h"
#include "agent.h"
#include "childcall.h"
#include "fv/util.h"
#include "controller.h"
#include "fv/ownerdir.h"
#include "httpd.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "lease.h"
#include "loop.h"
#include "metrics.h"

/* the pod's service account: its namespace (the lease's default) */
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
/* --http-endpoint's defaults: the agent's differs, for a node that runs both on its network */
#define FVP_CONTROLLER_HTTP ":8080"
#define FVP_AGENT_HTTP ":8090"
/* The lease's namespace, name and holder: DNS subdomains, at most 253 bytes */
#define DNS_NAME_MAX 254

static volatile int stopping;
static volatile int standing_by = 1;
static struct fvp_prov p;

/* The lease was lost: stop at once, as client-go's users do (the next leader may be starting). */
static void on_lost(void *ud)
{
	(void)ud;
	fvp_log_error("leadership lost: exiting so that only the new leader works");
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
	int idle = mono_s() - fvp_flag_get(&p.healthy_at);

	(void)ud;
	if (idle > 60)
		return fvp_fail(msg, len, -EIO, "the %s loop has not run for %d s",
				 fvp_flag_get(&standing_by) ? "lease" : "watch", idle);
	if (ready && !fvp_flag_get(&standing_by) && !fvp_flag_get(&p.synced))
		return fvp_fail(msg, len, -EAGAIN, "the first list is not done");
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
	fvp_flag_set(&stopping, 1);
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
		"                           [--capacity-namespace NS] [--http-endpoint ADDR] [--server URL ...]\n"
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
		"                  (default " FVP_LOOP_CAPACITY_NS ")\n"
		"Node agent (flexvol/loop, one per node, docs/loop-provisioning.md):\n"
		"  --node-agent    make, preallocate and reclaim the images of this node's PVs,\n"
		"                  and publish the loop root's space\n"
		"  --node NAME     this node (default $NODE_NAME)\n"
		"  --loop-root DIR the loop driver's root on this node (default /var/lib/flexvol/loop)\n"
		"  --interval N    seconds between two passes (default 10)\n"
		"  --http-endpoint ADDR  /metrics, /healthz, /readyz (default " FVP_AGENT_HTTP ")\n");
}

/* What the command line asks for, besides the settings kept in p (parse_options()). */
struct options {
	struct fv_kube_config kc;
	const char *root;		/* --root: the share, mounted */
	const char *http;		/* --http-endpoint ("": none), NULL: the mode's default */
	struct fvp_lease_config lc;
	struct fvp_agent ag;
	bool agent;			/* --node-agent */
};

/*
 * The command line into @o and p.  Returns -1 to go on, else the exit code
 * (0 after --help, 2 for a usage error).
 */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		FV_KUBE_LONGOPTS,
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
	char err[FVP_ERR_MAX];
	int opt;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (fv_kube_option(opt, optarg, &o->kc))
			continue;
		switch (opt) {
		case 'r': o->root = optarg; break;
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
		case 'H': o->http = optarg; break;
		case 'L':
			if (optarg && !streq(optarg, "true") && !streq(optarg, "false")) {
				fprintf(stderr, "flexvol-provisioner: --leader-elect=true|false\n");
				return 2;
			}
			p.leader_elect = !optarg || streq(optarg, "true");
			break;
		case 1: o->lc.ns = optarg; break;
		case 2: o->lc.name = optarg; break;
		case 3: o->lc.identity = optarg; break;
		case 4:
			if (number(optarg, 2, 3600, "--leader-election-lease-duration",
				   &o->lc.duration_s) < 0)
				return 2;
			break;
		case 5:
			if (number(optarg, 1, 3600, "--leader-election-renew-deadline",
				   &o->lc.renew_deadline_s) < 0)
				return 2;
			break;
		case 6:
			if (number(optarg, 1, 600, "--leader-election-retry-period", &o->lc.retry_s) < 0)
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
		case 'A': o->agent = true; break;
		case 'N': o->ag.node = optarg; break;
		case 11: o->ag.loop_root = optarg; break;
		case 'I':
			if (number(optarg, 1, 3600, "--interval", &o->ag.interval_s) < 0)
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
	return -1;
}

/*
 * --node-agent: make, preallocate and reclaim this node's images until
 * stopped; /metrics, /healthz and /readyz for the container's probes.
 */
static int run_agent(struct options *o)
{
	struct fvp_httpd_config hc = { .health = fvp_agent_health, .ud = &o->ag };
	struct fvp_httpd *httpd = NULL;
	char err[FV_KUBE_ERR_MAX];
	int r;

	o->ag.capacity_ns = p.site.capacity_ns;
	o->ag.ev.k = p.k;
	snprintf(o->ag.ev.identity, sizeof(o->ag.ev.identity), "%s", o->ag.node);
	fvp_metrics_set_agent(true);
	/* the agent's own port: on a host-network DaemonSet it shares the node with the provisioner's */
	hc.address = o->http ? o->http : FVP_AGENT_HTTP;
	if (*hc.address) {
		r = fvp_httpd_start(&hc, &httpd, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "flexvol-provisioner: %s\n", err);
			fv_kube_free(p.k);
			return 2;
		}
	}
	r = fvp_events_start(&o->ag.ev);
	if (r < 0)
		fvp_log_warning("events are posted by the agent's pass: no thread for them: %s",
				strerror(-r));
	r = fvp_agent_run(&o->ag, p.k, &stopping);
	fvp_events_stop(&o->ag.ev);
	fvp_httpd_stop(httpd);
	fv_kube_free(p.k);
	return r < 0 ? 1 : 0;
}

/* The controller: list, watch and work until stopped (with the lease, when elected). */
static int run_controller(struct options *o)
{
	char lns[DNS_NAME_MAX], lname[DNS_NAME_MAX], lid[DNS_NAME_MAX];
	struct fvp_httpd_config hc = { .health = health };
	struct fvp_httpd *httpd = NULL;
	struct fvp_lease *lease = NULL;
	struct fv_kube_config lkc;
	struct fv_kube *lk = NULL;
	int exit_code = 0;
	bool need_root = false;
	char err[FV_KUBE_ERR_MAX];
	int r;

	p.site.k = p.k;
	for (size_t i = 0; fvp_backends[i]; i++)
		if (fvp_backend_enabled(fvp_backends[i]) && !fvp_backends[i]->node_local)
			need_root = true;
	p.site.root = need_root ? o->root : NULL;
	p.site.rootfd = need_root ? fv_ownerdir_root_open(o->root) : -1;
	if (need_root && p.site.rootfd < 0) {
		fprintf(stderr, "flexvol-provisioner: cannot open --root '%s': %s\n", o->root,
			strerror(-p.site.rootfd));
		fv_kube_free(p.k);
		return 2;
	}
	fvp_flag_set(&p.healthy_at, mono_s());
	fvp_metrics_set_gauges(fvp_ctl_gauges, &p);
	if (!o->http)
		o->http = FVP_CONTROLLER_HTTP;
	if (*o->http) {
		hc.address = o->http;
		r = fvp_httpd_start(&hc, &httpd, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "flexvol-provisioner: %s\n", err);
			if (p.site.rootfd >= 0)
				close(p.site.rootfd);
			fv_kube_free(p.k);
			return 2;
		}
	}
	if (p.leader_elect) {
		if (!o->lc.ns) {
			pod_namespace(lns, sizeof(lns));
			o->lc.ns = lns;
		}
		if (!o->lc.name) {
			if (p.site.share)
				snprintf(lname, sizeof(lname), "flexvol-provisioner-%08x", fv_hash32(p.site.share));
			else
				snprintf(lname, sizeof(lname), "flexvol-provisioner");
			o->lc.name = lname;
		}
		if (!o->lc.identity) {
			const char *pod = getenv("POD_NAME");

			snprintf(lid, sizeof(lid), "%s", pod && *pod ? pod : p.ev.identity);
			o->lc.identity = lid;
		}
		if (!fv_kube_name_ok(o->lc.ns) || !fv_kube_name_ok(o->lc.name)) {
			fprintf(stderr, "flexvol-provisioner: the lease namespace and name must be DNS "
					"names: '%s' '%s'\n", o->lc.ns, o->lc.name);
			return 2;
		}
		/* its own client: a lease request never waits longer than the renew deadline */
		lkc = o->kc;
		lkc.timeout_s = o->lc.renew_deadline_s;
		r = fv_kube_new(&lkc, &lk, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "flexvol-provisioner: %s\n", r == -ENOMEM ? "out of memory" : err);
			return 2;
		}
		o->lc.heartbeat = &p.healthy_at;
		fvp_log_info("leader election: lease %s/%s as %s (duration %u s, renew deadline %u s, "
			 "retry %u s)", o->lc.ns, o->lc.name, o->lc.identity, o->lc.duration_s,
			 o->lc.renew_deadline_s, o->lc.retry_s);
		r = fvp_lease_acquire(lk, &o->lc, &stopping, on_lost, NULL, &lease);
		if (r < 0 && r != -ECANCELED) {
			fvp_log_error("leader election failed: %s", strerror(-r));
			exit_code = 1;
			fvp_flag_set(&stopping, 1);
		}
	}
	fvp_flag_set(&standing_by, 0);
	fvp_log_info("starting: server %s, root %s%s%s, resync %u s, %u workers, fs deadline %u s, "
		 "backoff %u..%u ms", o->kc.server, need_root ? o->root : "(none)",
		 p.site.share ? ", share " : "", p.site.share ? p.site.share : "", p.resync,
		 p.workers, p.site.fs_timeout_s, p.retry_base_ms, p.retry_max_ms);
	/* events from a thread of their own: a worker never waits for one (events.h) */
	p.ev.k = p.k;
	r = fvp_events_start(&p.ev);
	if (r < 0)
		fvp_log_warning("events are posted by the workers: no thread for them: %s",
				strerror(-r));
	if (!fvp_flag_get(&stopping))
		fvp_ctl_run(&p, &stopping);
	fvp_log_info("stopping");
	fvp_lease_release(lease);
	fvp_events_stop(&p.ev);
	fvp_httpd_stop(httpd);
	fvp_metrics_set_gauges(NULL, NULL);
	fv_kube_free(lk);
	if (p.site.rootfd >= 0)
		close(p.site.rootfd);
	fv_kube_free(p.k);
	return exit_code;
}

/*
 * `flexvol-provisioner migrate ARGS` was this program's command before flexvol-migrate became a
 * program of its own: it runs that one, from this program's directory (the image and the build
 * have both side by side; found by /proc/self/exe, or @self's path where there is no /proc),
 * with the same arguments.  Returns only on a failure.
 */
static int exec_migrate(const char *self, char **argv)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *slash;

	if (n > 0) {
		exe[n] = '\0';
		self = exe;
	}
	slash = strrchr(self, '/');
	if (!slash) {
		fprintf(stderr, "flexvol-provisioner migrate: the command is flexvol-migrate now: run it\n");
		return 1;
	}
	snprintf(path, sizeof(path), "%.*s/flexvol-migrate", (int)(slash - self), self);
	argv[0] = path;
	execv(path, argv);
	fprintf(stderr, "flexvol-provisioner migrate: the command is flexvol-migrate now: %s: %s\n",
		path, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	struct options o = {
		.root = "/persistentvolumes",
		.lc = { .duration_s = 15, .renew_deadline_s = 10, .retry_s = 2 },
		.ag = { .loop_root = "/var/lib/flexvol/loop", .interval_s = 10 },
	};
	_cleanup_free_ char *incluster = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	char err[FV_KUBE_ERR_MAX];
	int r;

	/* a backend call under its deadline: this program exec'd again (childcall.h) */
	if (argc == 3 && streq(argv[1], FVP_CHILDCALL_ARG))
		return fvp_childcall_main(argv[2]);
	/* the FlexVolume-to-CSI migration tool, its own program now (docs/migration.md) */
	if (argc >= 2 && streq(argv[1], "migrate"))
		return exec_migrate(argv[0], argv + 1);
	(void)fvp_childcall_init(argv[0]);
	p.leader_elect = true;
	p.resync = 300;
	p.watch_s = 300;
	p.workers = 4;
	p.retry_base_ms = 15000;
	p.retry_max_ms = 1000000;
	p.site.fs_timeout_s = 300;
	r = parse_options(argc, argv, &o);
	if (r >= 0)
		return r;
	setvbuf(stderr, NULL, _IOLBF, 0);
	if (!p.site.capacity_ns)
		p.site.capacity_ns = FVP_LOOP_CAPACITY_NS;
	if (!fv_kube_name_ok(p.site.capacity_ns)) {
		fprintf(stderr, "flexvol-provisioner: --capacity-namespace is not a namespace name\n");
		return 2;
	}
	if (o.agent && !o.ag.node)
		o.ag.node = getenv("NODE_NAME");
	if (o.agent && (!o.ag.node || !fv_kube_name_ok(o.ag.node))) {
		fprintf(stderr, "flexvol-provisioner: --node-agent needs --node or $NODE_NAME (a node "
				"name)\n");
		return 2;
	}
	r = fv_kube_config_incluster(&o.kc, &incluster, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "flexvol-provisioner: %s\n", err);
		return r == -ENOMEM ? 1 : 2;
	}
	o.kc.stop = &stopping;
	r = fv_kube_new(&o.kc, &p.k, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "flexvol-provisioner: %s\n", r == -ENOMEM ? "out of memory" : err);
		return 2;
	}
	if (p.retry_max_ms < p.retry_base_ms)
		p.retry_max_ms = p.retry_base_ms;
	if (o.lc.renew_deadline_s >= o.lc.duration_s || o.lc.retry_s >= o.lc.renew_deadline_s) {
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
	if (o.agent)
		return run_agent(&o);
	return run_controller(&o);
}
