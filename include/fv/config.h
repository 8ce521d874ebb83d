/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node configuration (docs/design.md, "Node configuration").
 *
 * Read from /etc/flexvol/flexvol.conf, or the file named by FLEXVOL_CONFIG;
 * each key can then be overridden by its environment variable.  The file is
 * "key = value" lines; '#' starts a comment; unknown keys are an error (a
 * typo must not silently fall back to a default on a production node).
 *
 *	key             env                      default
 *	loop_root       FLEXVOL_LOOP_ROOT        /var/lib/flexvol/loop
 *	state_dir       FLEXVOL_STATE_DIR        /var/lib/flexvol/state
 *	run_dir         FLEXVOL_RUN_DIR          /run/flexvol
 *	log_file        FLEXVOL_LOG_FILE         /var/log/flexvol/<driver>.log
 *	node_name       FLEXVOL_NODE_NAME        uname -n
 *	lock_timeout    FLEXVOL_LOCK_TIMEOUT     150   (seconds)
 *	helper_timeout  FLEXVOL_HELPER_TIMEOUT   120   (seconds, mkfs/resize/iscsiadm...)
 *	mount_timeout   FLEXVOL_MOUNT_TIMEOUT    60    (seconds, network mounts)
 *	device_timeout  FLEXVOL_DEVICE_TIMEOUT   60    (seconds, waiting for a device node)
 *	helper_path     FLEXVOL_HELPER_PATH      /usr/sbin:/usr/bin:/sbin:/bin
 *	attach_mode     FLEXVOL_ATTACH_MODE      controller  (or node: block drivers do the
 *	                                         node-side attach in mount, init says attach:false)
 *	gc_grace        FLEXVOL_GC_GRACE         600   (seconds: the garbage collector leaves
 *	                                         younger attachments alone; 0: none)
 *	gc_interval     FLEXVOL_GC_INTERVAL      60    (seconds between the opportunistic passes
 *	                                         of node-side ops; 0: none, only the op gc)
 *	debug           FLEXVOL_DEBUG            false (true: debug lines in the log)
 *	chap_dir        FLEXVOL_CHAP_DIR         /etc/flexvol/chap  (the only directory whose
 *	                                         files iscsi's chapCredentialsFile may name)
 */
#ifndef FV_CONFIG_H
#define FV_CONFIG_H

#include <limits.h>
#include <stdbool.h>

#define FV_NODE_NAME_MAX 256  /* a Kubernetes node name: a DNS subdomain, at most 253 bytes */
#define FV_ATTACH_MODE_MAX 16 /* the longest attach mode, "controller", and a NUL */
/*
 * A configured directory or search path: at most 1023 bytes (longer is refused as too long).
 * Not PATH_MAX: the six of them are set at every call, and six 4 KiB fields were six pages to
 * fault in (2 us each here); paths are made under them in PATH_MAX buffers.
 */
#define FV_CONFIG_PATH_MAX 1024
/* An error text of the config parser: "FILE:LINE: " and what is wrong with one line. */
#define FV_CONFIG_ERR_MAX 512

/* The small fields first: init reads attach_mode alone and touches no page of the paths. */
struct fv_config {
	char attach_mode[FV_ATTACH_MODE_MAX]; /* "controller" or "node" */
	unsigned int lock_timeout;   /* seconds */
	unsigned int helper_timeout; /* seconds */
	unsigned int mount_timeout;  /* seconds */
	unsigned int device_timeout; /* seconds */
	unsigned int gc_grace;	     /* seconds (docs/design.md, "Garbage collection") */
	unsigned int gc_interval;    /* seconds; 0: no opportunistic pass */
	bool debug;		     /* debug lines in the log */
	char node_name[FV_NODE_NAME_MAX];
	char loop_root[FV_CONFIG_PATH_MAX];
	char state_dir[FV_CONFIG_PATH_MAX];
	char run_dir[FV_CONFIG_PATH_MAX];
	char log_file[FV_CONFIG_PATH_MAX];
	char helper_path[FV_CONFIG_PATH_MAX];
	char chap_dir[FV_CONFIG_PATH_MAX]; /* iscsi CHAP credentials files live here, and only here */
};

/*
 * fv_config_load() - fill @cfg from defaults, the config file and the
 * environment, for driver @driver (used in the default log file name).
 * Returns: 0, or -errno / -FV_ERR_BADOPT with a description in @err
 * (FV_CONFIG_ERR_MAX).
 */
int fv_config_load(struct fv_config *cfg, const char *driver, char *err, size_t errlen);

/*
 * fv_config_attach_mode() - the attach mode alone into @mode
 * (FV_ATTACH_MODE_MAX), from the same defaults, file and environment, every
 * other key checked as fv_config_load() checks it but kept nowhere (init's
 * capabilities: no page of a struct fv_config's paths touched).  Same return.
 */
int fv_config_attach_mode(char *mode, char *err, size_t errlen);

/*
 * fv_config_check_file() - defaults plus the file @path alone (no
 * environment: it must not hide a mistake in the file), as the installer
 * checks a node config before installing it.  Same return as above.
 */
int fv_config_check_file(struct fv_config *cfg, const char *driver, const char *path, char *err,
			 size_t errlen);

#endif
