/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The provisioner's Prometheus metrics (text exposition format 0.0.4),
 * served on /metrics by httpd.c.  Counters and histograms live here, under
 * one mutex (workers update them); gauges (queue depth, leadership) are read
 * through a callback when rendered.
 *
 *   flexvol_provisioner_provision_total{result="success|failure"}
 *   flexvol_provisioner_provision_duration_seconds (histogram, per attempt)
 *   flexvol_provisioner_delete_total{result="success|failure"}
 *   flexvol_provisioner_delete_duration_seconds (histogram, per attempt)
 *   flexvol_provisioner_fs_operation_timeouts_total
 *   flexvol_provisioner_retries_total
 *   flexvol_provisioner_relists_total, flexvol_provisioner_watch_restarts_total
 *   flexvol_provisioner_queue_depth, flexvol_provisioner_queue_running
 *   flexvol_provisioner_leader (1 while this replica holds the lease)
 *   flexvol_provisioner_leader_transitions_total
 */
#ifndef FVP_METRICS_H
#define FVP_METRICS_H

#include <stdbool.h>
#include <stddef.h>

enum fvp_metric_op { FVP_M_PROVISION, FVP_M_DELETE, FVP_M_OPS };

enum fvp_metric_counter {
	FVP_M_FS_TIMEOUTS,
	FVP_M_RETRIES,
	FVP_M_RELISTS,
	FVP_M_WATCH_RESTARTS,
	FVP_M_LEADER_TRANSITIONS,
	FVP_M_COUNTERS,
};

struct fvp_gauges {
	double queue_depth; /* ready + waiting out a backoff */
	double queue_running;
	double leader;	    /* 1 or 0 */
};

/* One provisioning or reclaim attempt: its outcome and how long it took. */
void fvp_metrics_observe(enum fvp_metric_op op, bool ok, double seconds);
void fvp_metrics_inc(enum fvp_metric_counter c);

/* The gauges' source, called at every render (NULL: all 0). */
void fvp_metrics_set_gauges(void (*fn)(void *userdata, struct fvp_gauges *ret), void *userdata);

/* The exposition as a malloc'ed string (NULL when out of memory). */
char *fvp_metrics_render(void);

/* Forget every count (tests). */
void fvp_metrics_reset(void);

#endif
