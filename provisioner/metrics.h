/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The provisioner's Prometheus metrics (text exposition format 0.0.4),
 * served on /metrics by httpd.c.  Counters and histograms live here, under
 * one mutex (workers update them); gauges (queue depth, leadership) are read
 * through a callback when rendered.
 *
 * The controller (--node-agent not given):
 *   flexvol_provisioner_provision_total{backend,class,result="success|failure"}
 *   flexvol_provisioner_provision_duration_seconds{backend,class} (histogram, per attempt)
 *   flexvol_provisioner_delete_total{backend,class,result="success|failure"}
 *   flexvol_provisioner_delete_duration_seconds{backend,class} (histogram, per attempt)
 *   flexvol_provisioner_fs_operation_timeouts_total
 *   flexvol_provisioner_retries_total
 *   flexvol_provisioner_relists_total, flexvol_provisioner_watch_restarts_total
 *   flexvol_provisioner_queue_depth, flexvol_provisioner_queue_running
 *   flexvol_provisioner_leader (1 while this replica holds the lease)
 *   flexvol_provisioner_leader_transitions_total
 *   flexvol_provisioner_events_dropped_total (events.h: the sender's queue was full)
 * The node agent:
 *   flexvol_provisioner_agent_passes_total{result="success|failure"}
 *   flexvol_provisioner_agent_last_success_timestamp_seconds
 * Both:
 *   flexvol_provisioner_build_info{version,compiler,arch} 1
 *   process_cpu_seconds_total, process_start_time_seconds, process_open_fds,
 *   process_max_fds, process_resident_memory_bytes, process_virtual_memory_bytes
 *   (the names of Prometheus' process collector; those read from /proc are
 *   left out where it is not mounted)
 *
 * Cardinality: a series per backend and class, never per claim.  Classes
 * are few, but nothing bounds their number, so at most FVP_METRICS_CLASSES
 * (backend, class) pairs get series of their own; the others are counted
 * under class="_other".
 */
#ifndef FVP_METRICS_H
#define FVP_METRICS_H

#include <stdbool.h>
#include <stddef.h>

enum fvp_metric_op { FVP_M_PROVISION, FVP_M_DELETE, FVP_M_OPS };

/* (backend, class) pairs with series of their own, per operation */
#define FVP_METRICS_CLASSES 48
/* the label of the others */
#define FVP_METRICS_OTHER "_other"

enum fvp_metric_counter {
	FVP_M_FS_TIMEOUTS,
	FVP_M_RETRIES,
	FVP_M_RELISTS,
	FVP_M_WATCH_RESTARTS,
	FVP_M_LEADER_TRANSITIONS,
	FVP_M_EVENTS_DROPPED,
	FVP_M_COUNTERS,
};

struct fvp_gauges {
	double queue_depth; /* ready + waiting out a backoff */
	double queue_running;
	double leader;	    /* 1 or 0 */
};

/*
 * One provisioning or reclaim attempt by @backend for StorageClass @cls
 * (either may be NULL: ""): its outcome and how long it took.
 */
void fvp_metrics_observe(enum fvp_metric_op op, const char *backend, const char *cls, bool ok,
			 double seconds);
void fvp_metrics_inc(enum fvp_metric_counter c);

/* What this process renders: the controller's metrics (the default) or the node agent's. */
void fvp_metrics_set_agent(bool agent);
/* One node agent pass, and its outcome. */
void fvp_metrics_agent_pass(bool ok);

/* The gauges' source, called at every render (NULL: all 0). */
void fvp_metrics_set_gauges(void (*fn)(void *userdata, struct fvp_gauges *ret), void *userdata);

/* The exposition as a malloc'ed string (NULL when out of memory). */
char *fvp_metrics_render(void);

/* Forget every count (tests). */
void fvp_metrics_reset(void);

#endif
