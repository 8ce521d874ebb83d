/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The flexvol/loop node agent: flexvol-provisioner --node-agent, one per
 * node (a container of the installer DaemonSet).  Every pass it
 *
 * - lists the PVs labelled for this node (loop.h) and, for each of
 *   flexvol/loop: makes its image when missing (owner record = the PV's
 *   name, sized as the PV, every block allocated when the class asked for
 *   preallocate), keeps a preallocated image allocated after it grew, and
 *   reclaims a released PV whose policy is Delete: the image is removed only
 *   when its owner record names that PV and no loop device holds it, then the
 *   PV is deleted;
 * - publishes the loop root's free space and each image's size and allocated
 *   bytes in the ConfigMap named after the node (loop.h), which the
 *   controller's loop backend reads before it provisions on this node.
 *
 * Polling, not watching: a pass is one list of a handful of PVs and one
 * directory read; the report must be refreshed anyway (the controller does
 * not believe one older than FVP_LOOP_REPORT_MAX_AGE).
 *
 * Health, for the container's probes (httpd.c serves them, main.c starts it):
 * live while passes keep ending (within 2 intervals and a minute); ready once
 * a report is published and while the last pass reached the API (listed this
 * node's PVs and published or confirmed the report): an agent that cannot
 * reach the API leaves its node's report to age out, and says so.
 */
#ifndef FVP_AGENT_H
#define FVP_AGENT_H

#include <stdbool.h>
#include <stddef.h>

#include "events.h"

struct fv_kube;

struct fvp_agent {
	const char *node;	 /* this node's name */
	const char *loop_root;	 /* the loop driver's root on this node */
	const char *capacity_ns; /* the namespace of the report */
	unsigned int interval_s; /* between two passes */
	struct fvp_events ev;
	/* set by the passes, read by the HTTP thread (flag.h) */
	volatile int passed_at;	 /* monotonic s at the end of the last pass */
	volatile int api_ok;	 /* the last pass reached the API */
	volatile int published;	 /* a report was published (once is enough) */
};

/* One pass.  Returns 0, or <0 when the API or the loop root failed (logged). */
int fvp_agent_pass(struct fvp_agent *a, struct fv_kube *k);

/* Passes every interval_s until *stopping. */
int fvp_agent_run(struct fvp_agent *a, struct fv_kube *k, volatile int *stopping);

/*
 * The probes' answer (struct fvp_httpd_config's health, @ud the agent): 0,
 * or <0 with why in @msg.  @ready: /readyz, else /healthz.
 */
int fvp_agent_health(void *ud, bool ready, char *msg, size_t len);

#endif
