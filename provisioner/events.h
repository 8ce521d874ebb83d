/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the provisioner tells: one log line per action on stderr (kubectl
 * logs), and Events on claims and PVs, each the same event for the same
 * object at most every FVP_EVENT_REPEAT_S.
 *
 * Events are posted by a thread of their own (fvp_events_start()), from a
 * queue of at most FVP_EVENT_QUEUE_MAX: a worker never waits for an event's
 * POST, nor for an API server that answers it slowly.  An event that finds
 * the queue full is dropped and counted (events_dropped_total), as
 * client-go's broadcaster drops past its 1,000; its log line is written all
 * the same.  Without a started sender (the unit tests) an event is posted
 * in the calling thread.
 *
 * Log lines have klog's text form, so that whatever reads the logs of
 * Kubernetes' own components reads ours:
 *
 *	I1204 01:02:03.123456   12345 provision.c:266] "Event occurred" object="ns/c" ...
 *
 * a severity letter (I info, W warning, E error), month and day, the UTC
 * time to the microsecond, the process id padded to 7, the source file and
 * line, "]", then the message: free text (klog's Infof), or a quoted message
 * and key="value" pairs (klog's InfoS; fvp_logs()).  Control characters in
 * a message become spaces: one line is one entry, whatever an API error or
 * an object's name holds.
 */
#ifndef FVP_EVENTS_H
#define FVP_EVENTS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "fv/macro.h"

/* the events' source and reportingComponent, the log's name for this program */
#define FVP_COMPONENT "flexvol-provisioner"
#define FVP_EVENT_REPEAT_S 600 /* the same event for the same object at most every 10 min */
/* what was sent, per object and reason: a claim's Provisioning and ProvisioningFailed are two */
#define FVP_EVENT_CACHE 512
/* events waiting for the sender, at most (client-go's maxQueuedEvents) */
#define FVP_EVENT_QUEUE_MAX 1000
/* at the stop, the sender posts what is queued for this long at most; the rest is dropped */
#define FVP_EVENT_DRAIN_S 5

struct fv_kube;
struct fvp_event_sender;

struct fvp_events {
	struct fv_kube *k;
	char identity[256]; /* the pod's host name: reportingInstance */
	struct {
		char key[96];	     /* the object's uid */
		unsigned long reason; /* a hash of the reason */
		unsigned long hash;  /* a hash of the message */
		time_t when;
	} sent[FVP_EVENT_CACHE];
	struct fvp_event_sender *tx; /* NULL: events posted by the caller */
};

/* Start the sender thread of @ev (its k set).  0 or -errno. */
int fvp_events_start(struct fvp_events *ev);

/*
 * Stop it: what is queued is posted for up to FVP_EVENT_DRAIN_S (each POST
 * within the client's own timeout), the rest dropped and counted; the thread
 * is joined.  Events after this are posted by their caller.  NULL-safe.
 */
void fvp_events_stop(struct fvp_events *ev);

/* Events waiting for the sender now (tests, metrics). */
size_t fvp_events_queued(struct fvp_events *ev);

/* klog's severities: the line's first letter */
enum fvp_severity {
	FVP_INFO = 'I',
	FVP_WARNING = 'W', /* something is refused or failed and is retried */
	FVP_ERROR = 'E',   /* something failed that needs a person, or the process stops */
};

/* One free-text line from @file:@line (the macros below fill them in). */
void fvp_log_at(enum fvp_severity sev, const char *file, int line, const char *fmt, ...)
	_printf_(4, 5);
#define fvp_log_info(...) fvp_log_at(FVP_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define fvp_log_warning(...) fvp_log_at(FVP_WARNING, __FILE__, __LINE__, __VA_ARGS__)
#define fvp_log_error(...) fvp_log_at(FVP_ERROR, __FILE__, __LINE__, __VA_ARGS__)

/*
 * One structured line: "@msg" then key="value" for each pair of @kv (@n
 * strings: key, value, key, value...; a NULL value is skipped).  Values are
 * quoted and escaped as klog quotes them.
 */
void fvp_logs_at(enum fvp_severity sev, const char *file, int line, const char *msg,
		 const char *const *kv, size_t n);

/*
 * Post an Event about @obj (a claim or a PV, its kind read from the object)
 * and log it (a Warning event as a warning line, from the caller's line).
 * @warning: type Warning, else Normal.
 */
void fvp_event_at(const char *file, int line, struct fvp_events *ev, json_object *obj,
		  bool warning, const char *reason, const char *fmt, ...) _printf_(7, 8);
#define fvp_event(...) fvp_event_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
