/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which cluster flexvol-migrate talks to, found as kubectl finds it:
 *
 *   --server URL given        that server, with --token-file and --certificate-authority
 *   in a pod                  the pod's service account (KUBERNETES_SERVICE_HOST/PORT)
 *   otherwise                 kubectl's own configuration: --kubeconfig FILE, else KUBECONFIG,
 *                             else ~/.kube/config; its current context or --context NAME
 *
 * The last is served by `kubectl proxy` on a unix socket in a directory of our own (0700), which
 * the requests then go through.  We run kubectl rather than read kubeconfig files ourselves:
 * the files are YAML with merge rules over a KUBECONFIG list, and their users authenticate in
 * ways only kubectl implements in full (client certificates, tokens, exec credential plugins
 * such as the clouds', OIDC): through kubectl every one of them works exactly as for `kubectl
 * get`.  As a kubectl plugin (`kubectl flexvol migrate`) kubectl is there by definition.
 *
 * The proxy is ours from start to end: its own process group, SIGKILL when we die (parent-death
 * signal), a deadline to come up, killed by its PID and waited for when we are done; its
 * socket and directory removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fv/macro.h"
#include "fv/util.h"
#include "migrate.h"

/* How long kubectl proxy may take to listen (it reads the kubeconfig, nothing more). */
#define PROXY_START_S 20

/* Is something listening on @path? */
static bool listening(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* The last non-empty line of kubectl's output (its error), into @buf. */
static void last_line(const char *path, char *buf, size_t len)
{
	char all[4096], *s;
	ssize_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	buf[0] = '\0';
	if (fd >= 0) {
		n = read(fd, all, sizeof(all) - 1);
		close(fd);
	}
	if (n <= 0)
		return;
	while (n > 0 && (all[n - 1] == '\n' || all[n - 1] == '\r' || all[n - 1] == ' '))
		n--;
	all[n] = '\0';
	s = strrchr(all, '\n');
	snprintf(buf, len, "%s", s ? s + 1 : all);
}

static void proxy_stop(struct mig_cluster *c)
{
	char p[sizeof(c->dir) + 16];

	if (c->proxy > 0) {
		kill(c->proxy, SIGKILL);
		while (waitpid(c->proxy, NULL, 0) < 0 && errno == EINTR)
			;
		c->proxy = 0;
	}
	if (!c->dir[0])
		return;
	snprintf(p, sizeof(p), "%s/api.sock", c->dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/kubectl.log", c->dir);
	unlink(p);
	rmdir(c->dir);
	c->dir[0] = '\0';
}

static int proxy_start(struct mig_cluster *c, const struct mig_kubectl *kc, struct mig *m)
{
	char sockarg[sizeof(c->dir) + 32], logp[sizeof(c->dir) + 16], why[512];
	const char *argv[10];
	const char *tmp = getenv("TMPDIR");
	struct timespec nap = { 0, 20 * 1000 * 1000 };
	int n = 0, logfd, st, i;

	snprintf(c->dir, sizeof(c->dir), "%s/flexvol-migrate-XXXXXX", tmp && *tmp == '/' ? tmp : "/tmp");
	if (!mkdtemp(c->dir)) {
		c->dir[0] = '\0';
		return mig_fail(m, -errno, "cannot make a directory for kubectl proxy: %s",
			    strerror(errno));
	}
	snprintf(c->sock, sizeof(c->sock), "%s/api.sock", c->dir);
	if (strlen(c->sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return mig_fail(m, -ENAMETOOLONG, "'%s' is too long for a unix socket: set TMPDIR "
			    "to a shorter directory", c->sock);
	snprintf(sockarg, sizeof(sockarg), "--unix-socket=%s", c->sock);
	snprintf(logp, sizeof(logp), "%s/kubectl.log", c->dir);
	argv[n++] = kc->kubectl;
	if (kc->kubeconfig) {
		argv[n++] = "--kubeconfig";
		argv[n++] = kc->kubeconfig;
	}
	if (kc->context) {
		argv[n++] = "--context";
		argv[n++] = kc->context;
	}
	argv[n++] = "proxy";
	argv[n++] = sockarg;
	argv[n] = NULL;
	logfd = open(logp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (logfd < 0)
		return mig_fail(m, -errno, "cannot write '%s': %s", logp, strerror(errno));
	fflush(stdout);
	c->proxy = fork();
	if (c->proxy < 0) {
		close(logfd);
		c->proxy = 0;
		return mig_fail(m, -errno, "cannot start kubectl: %s", strerror(errno));
	}
	if (c->proxy == 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		(void)setpgid(0, 0);
		if (null < 0 || dup2(null, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
			_exit(126);
		execvp(argv[0], (char *const *)argv);
		dprintf(2, "cannot run '%s': %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(logfd);
	for (i = 0; i < PROXY_START_S * 50; i++) {
		pid_t w = waitpid(c->proxy, &st, WNOHANG);

		if (w == c->proxy) {
			c->proxy = 0;
			last_line(logp, why, sizeof(why));
			return mig_fail(m, -EIO, "kubectl proxy (for the cluster of %s) exited: %s",
				    kc->kubeconfig ? kc->kubeconfig : "the kubeconfig kubectl reads",
				    why[0] ? why : "no message");
		}
		if (listening(c->sock))
			return 0;
		nanosleep(&nap, NULL);
	}
	last_line(logp, why, sizeof(why));
	return mig_fail(m, -ETIMEDOUT, "kubectl proxy did not listen within %d s%s%s",
		    PROXY_START_S, why[0] ? ": " : "", why);
}

int mig_cluster_open(struct mig_cluster *c, struct fv_kube_config *cfg, const struct mig_kubectl *kc,
		     struct mig *m)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	int r;

	memset(c, 0, sizeof(*c));
	if ((kc->kubeconfig || kc->context) && cfg->server)
		return mig_fail(m, -EINVAL, "--server and --kubeconfig/--context exclude each other");
	if (cfg->server || (!kc->kubeconfig && !kc->context && host && *host))
		return fv_kube_config_incluster(cfg, &c->incluster, m->err, sizeof(m->err));
	r = proxy_start(c, kc, m);
	if (r < 0) {
		proxy_stop(c);
		return r;
	}
	cfg->server = "http://localhost";
	cfg->unix_socket = c->sock;
	cfg->token_file = NULL;
	cfg->ca_file = NULL;
	return 0;
}

void mig_cluster_close(struct mig_cluster *c)
{
	proxy_stop(c);
	free(c->incluster);
	c->incluster = NULL;
}
