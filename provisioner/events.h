/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the provisioner tells: one log line per action on stderr (kubectl
 * logs), and Events on claims and PVs, each the same event for the same
 * object at most every FVP_EVENT_REPEAT_S.
 */
#ifndef FVP_EVENTS_H
#define FVP_EVENTS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <time.h>

#include "fv/macro.h"

#define FVP_EVENT_REPEAT_S 600 /* the same event for the same object at most every 10 min */
#define FVP_EVENT_CACHE 256

struct fvp_kube;

struct fvp_events {
	struct fvp_kube *k;
	char identity[256]; /* the pod's host name: reportingInstance */
	struct {
		char key[96];
		unsigned long hash;
		time_t when;
	} sent[FVP_EVENT_CACHE];
};

void fvp_log_info(const char *fmt, ...) _printf_(1, 2);

/*
 * Post an Event about @obj (a claim or a PV, its kind read from the object)
 * and log it.  @warning: type Warning, else Normal.
 */
void fvp_event(struct fvp_events *ev, json_object *obj, bool warning, const char *reason,
	   const char *fmt, ...) _printf_(5, 6);

#endif
