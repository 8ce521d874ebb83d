/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-csi: the CSI endpoint of one flexvol driver (docs/design.md, "CSI").
 *
 *   flexvol-csi --endpoint unix:///csi/csi.sock --driver loop [--driver-name NAME]
 *
 * Serves the Identity, Node and Controller services on the unix socket, on
 * the same op layer as the FlexVolume drivers; logs one line per call on
 * stderr.  SIGTERM or SIGINT: the call in progress finishes, the socket
 * file is removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csi.h"
#include "fv/config.h"
#include "fv/driver.h"
#include "fv/op.h"
#include "fv/log.h"
#include "fv/util.h"
#include "fv/version.h"

struct csi_profile csi_plugin;

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	stop = 1;
}

static int usage(FILE *f, int rc)
{
	fprintf(f, "usage: flexvol-csi --endpoint unix:///PATH --driver DRIVER "
		    "[--driver-name NAME] [--root DIR --share SERVER:/PATH]\n"
		    "  --endpoint     the unix socket to serve (unix:///path, unix:/path or /path)\n"
		    "  --driver       the flexvol driver to serve (loop, nfs, iscsi)\n"
		    "  --driver-name  the CSI driver name (default DRIVER.csi.flexvol)\n"
		    "  --root, --share  nfs: serve the Controller service, a directory per volume\n"
		    "                 in the share SERVER:/PATH, which is mounted at DIR here\n"
		    "  --version      print the version\n");
	return rc;
}

/* The socket path of a CSI endpoint URL, or NULL. */
static const char *endpoint_path(const char *url)
{
	if (strncmp(url, "unix://", 7) == 0)
		url += 7;
	else if (strncmp(url, "unix:", 5) == 0)
		url += 5;
	return url[0] == '/' ? url : NULL;
}

/* The drivers this endpoint can serve: the FlexVolume program's list (drivers/registry.c). */
static const struct fv_driver *csi_driver_find(const char *name)
{
	for (size_t i = 0; i < fv_registry_n; i++)
		if (strcmp(fv_registry[i]->name, name) == 0)
			return fv_registry[i];
	return NULL;
}

int main(int argc, char **argv)
{
	static struct grpc_method methods[32];
	const char *endpoint = NULL, *driver = NULL, *name = NULL, *root = NULL, *share = NULL, *path;
	const struct fv_driver *drv;
	struct sigaction sa = { .sa_handler = on_stop };
	struct fv_config cfg;
	char err[512];
	size_t n = 0;
	int lfd, r;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], **slot = NULL;

		if (streq(a, "--version")) {
			printf("%s\n", fv_version);
			return 0;
		}
		if (streq(a, "--help") || streq(a, "-h"))
			return usage(stdout, 0);
		if (streq(a, "--endpoint"))
			slot = &endpoint;
		else if (streq(a, "--driver"))
			slot = &driver;
		else if (streq(a, "--driver-name"))
			slot = &name;
		else if (streq(a, "--root"))
			slot = &root;
		else if (streq(a, "--share"))
			slot = &share;
		if (!slot || i + 1 >= argc)
			return usage(stderr, 2);
		*slot = argv[++i];
	}
	if (!endpoint || !driver)
		return usage(stderr, 2);
	path = endpoint_path(endpoint);
	if (!path) {
		fprintf(stderr, "flexvol-csi: --endpoint %s: not a unix socket path\n", endpoint);
		return 2;
	}
	drv = csi_driver_find(driver);
	if (!drv) {
		fprintf(stderr, "flexvol-csi: --driver %s: no such flexvol driver\n", driver);
		return 2;
	}
	if (!root != !share || (root && !fv_op_served(drv, FV_OP_PUBLISH)) ||
	    (root && drv->blk)) {
		fprintf(stderr, "flexvol-csi: --root and --share go together, with a driver "
				"that mounts shares (nfs)\n");
		return 2;
	}
	if (share && (!strstr(share, ":/") || share[0] == ':' || root[0] != '/')) {
		fprintf(stderr, "flexvol-csi: --share %s --root %s: SERVER:/PATH and an absolute "
				"directory\n", share, root);
		return 2;
	}
	if (csi_profile_init(&csi_plugin, drv, name, root, share, err, sizeof(err)) < 0) {
		fprintf(stderr, "flexvol-csi: %s\n", err);
		return 2;
	}

	/* fds 0-2 are open (a socket must never become fd 1 or 2): /dev/null where one is closed */
	for (;;) {
		int fd = open("/dev/null", O_RDWR); /* not CLOEXEC: 0-2 are the helpers' too */

		if (fd > 2)
			close(fd);
		if (fd < 0 || fd > 2)
			break;
	}
	sigaction(SIGTERM, &sa, NULL); /* no SA_RESTART: poll() returns */
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	umask(022);

	/* the op layer's log, as the FlexVolume driver's; every call reads the config afresh */
	r = fv_config_load(&cfg, csi_plugin.drv->name, err, sizeof(err));
	if (r < 0)
		fprintf(stderr, "flexvol-csi: node configuration: %s (node calls fail until it is "
				"mended)\n", err);
	fv_log_open(csi_plugin.drv->name, r < 0 ? NULL : cfg.log_file);

	if (csi_identity_n + csi_node_n + csi_controller_n > ARRAY_SIZE(methods))
		abort(); /* a method table outgrew this array: a build mistake */
	for (size_t i = 0; i < csi_identity_n; i++)
		methods[n++] = csi_identity_methods[i];
	for (size_t i = 0; i < csi_node_n; i++)
		methods[n++] = csi_node_methods[i];
	for (size_t i = 0; i < csi_controller_n; i++)
		methods[n++] = csi_controller_methods[i];

	lfd = grpc_listen_unix(path);
	if (lfd < 0) {
		fprintf(stderr, "flexvol-csi: cannot listen on %s: %s\n", path, strerror(-lfd));
		return 1;
	}
	fprintf(stderr, "flexvol-csi %s: %s (driver %s) on %s\n", fv_version, csi_plugin.name,
		csi_plugin.drv->name, path);
	r = grpc_serve(lfd, methods, n, &stop);
	close(lfd);
	unlink(path);
	fv_log_close();
	if (r < 0) {
		fprintf(stderr, "flexvol-csi: %s\n", strerror(-r));
		return 1;
	}
	return 0;
}
