/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the drivers' snapshot calls share (controller.h): snapshot IDs, the
 * Snapshot answer, ListSnapshots' filters and pages.  The drivers make,
 * keep and remove the copies (controller-loop.c: files in the loop root;
 * controller-nfs.c: directories on the share).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller.h"
#include "fv/util.h"

#define SNAPSHOT_ID_MAX 63

bool csi_snapshot_id_ok(const char *id)
{
	size_t n = strlen(id);

	return n > 0 && n <= SNAPSHOT_ID_MAX && id[0] != '-' &&
	       strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

void csi_snapshot_id_of(const char *name, char *id, size_t len)
{
	if (csi_snapshot_id_ok(name))
		snprintf(id, len, "%s", name);
	else
		snprintf(id, len, "snapshot-%016llx", (unsigned long long)fv_hash64(name));
}

/* A Snapshot message for @s (its strings borrowed). */
static void fill(Csi__V1__Snapshot *m, Google__Protobuf__Timestamp *t, const struct csi_snapshot *s)
{
	csi__v1__snapshot__init(m);
	google__protobuf__timestamp__init(t);
	t->seconds = s->created;
	m->snapshot_id = (char *)s->id;
	m->source_volume_id = (char *)s->source;
	m->size_bytes = (int64_t)s->size;
	m->creation_time = t;
	m->ready_to_use = true; /* made whole before it is answered */
}

void csi_reply_snapshot(struct grpc_call *call, const char *id, const char *source, uint64_t size,
			int64_t created)
{
	Csi__V1__CreateSnapshotResponse resp = CSI__V1__CREATE_SNAPSHOT_RESPONSE__INIT;
	struct csi_snapshot s = { .size = size, .created = created };
	Google__Protobuf__Timestamp t;
	Csi__V1__Snapshot m;

	snprintf(s.id, sizeof(s.id), "%s", id);
	snprintf(s.source, sizeof(s.source), "%s", source);
	fill(&m, &t, &s);
	resp.snapshot = &m;
	grpc_reply(call, &resp.base);
}

static int by_id(const void *a, const void *b)
{
	return strcmp(((const struct csi_snapshot *)a)->id, ((const struct csi_snapshot *)b)->id);
}

void csi_reply_snapshots(struct grpc_call *call, const Csi__V1__ListSnapshotsRequest *q,
			 struct csi_snapshot *s, size_t n)
{
	Csi__V1__ListSnapshotsResponse resp = CSI__V1__LIST_SNAPSHOTS_RESPONSE__INIT;
	Csi__V1__ListSnapshotsResponse__Entry *ents = NULL, **entp = NULL;
	Csi__V1__Snapshot *msgs = NULL;
	Google__Protobuf__Timestamp *ts = NULL;
	size_t start = 0, k = 0, max;
	char next[24], *end = NULL;

	if (q->max_entries < 0)
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT, "max_entries is negative");
	/* the token is where the previous page stopped, in the ID order below */
	if (*q->starting_token) {
		unsigned long long v = strtoull(q->starting_token, &end, 10);

		if (*end || v > n)
			return (void)grpc_fail(call, GRPC_ABORTED, "starting_token '%s' is none of "
					       "ours", q->starting_token);
		start = (size_t)v;
	}
	/* the filters: one snapshot, or the snapshots of one volume */
	for (size_t i = 0; i < n; i++)
		if ((!*q->snapshot_id || streq(s[i].id, q->snapshot_id)) &&
		    (!*q->source_volume_id || streq(s[i].source, q->source_volume_id)))
			s[k++] = s[i];
	n = k;
	k = 0;
	if (start > n)
		return (void)grpc_fail(call, GRPC_ABORTED, "starting_token '%s' is past the end",
				       q->starting_token);
	if (n > 1) /* none: @s may be NULL, which qsort() must not get */
		qsort(s, n, sizeof(*s), by_id);
	max = q->max_entries ? (size_t)q->max_entries : n;
	if (n - start < max)
		max = n - start;
	ents = calloc(max ? max : 1, sizeof(*ents));
	entp = calloc(max ? max : 1, sizeof(*entp));
	msgs = calloc(max ? max : 1, sizeof(*msgs));
	ts = calloc(max ? max : 1, sizeof(*ts));
	if (!ents || !entp || !msgs || !ts) {
		grpc_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (k = 0; k < max; k++) {
		csi__v1__list_snapshots_response__entry__init(&ents[k]);
		fill(&msgs[k], &ts[k], &s[start + k]);
		ents[k].snapshot = &msgs[k];
		entp[k] = &ents[k];
	}
	resp.n_entries = max;
	resp.entries = entp;
	if (start + max < n) {
		snprintf(next, sizeof(next), "%zu", start + max);
		resp.next_token = next;
	}
	grpc_reply(call, &resp.base);
out:
	free(ents);
	free(entp);
	free(msgs);
	free(ts);
}
