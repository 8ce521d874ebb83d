/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer targets for flexvol-csi's services (issue 37 point 5): one
 * request of a method of the Identity, Node or Controller service, unpacked
 * with its real descriptor and handed to its real handler (csi/identity.c,
 * node.c, controller.c and the Controller tables, kit.c, profile.c,
 * snapshot.c; the answer made by grpc-calls.c's grpc_reply() and
 * grpc_fail()), the op layer below stubbed at its boundary (op-stub.c).
 * Built once per service with -DFUZZ_SVC='"identity"', '"node"' or
 * '"controller"'.  The input:
 *
 *   byte 0        the method, an index into the service's table (csi_node_methods...)
 *   byte 1        the driver profile: loop; nfs; nfs with --root and --share (IPv4, IPv6);
 *                 iscsi (csi_profile_init(), as flexvol-csi --driver makes it)
 *   bytes 2..33   the stubs' script: each call below the service takes the next byte
 *                 (0, past the end too: success)
 *   the rest      the request message (protobuf)
 *
 * A message protobuf-c cannot unpack is not the handlers' to see (the
 * endpoint answers it INTERNAL first: fuzz-grpc.c's targets).  What every
 * handler must do, or the target aborts:
 *
 *   - answer exactly once, with grpc_reply() or grpc_fail() (the endpoint
 *     drops a second answer and answers a missing one INTERNAL: both are
 *     wrong turns in a handler);
 *   - fail with a gRPC code of the spec (1..16) and a message;
 *   - answer OK only as the profile declares (no Controller service: every
 *     Controller call but its capabilities UNIMPLEMENTED; Node calls without
 *     staging, stats, expansion likewise), and with an answer that packs and
 *     unpacks as the method's response type, whose strings are UTF-8 when
 *     the request's were (grpc-go refuses the message otherwise);
 *   - answer what the spec asks of the method: a created volume's ID one
 *     the Node and Controller calls take, its capacity within the range
 *     asked; a snapshot's ID one DeleteSnapshot takes; an expansion no smaller
 *     than asked; ListSnapshots no more entries than asked; a node ID;
 *   - leave no descriptor open, no lock held (op-stub.c), no memory
 *     (LeakSanitizer), and no ASan or UBSan report.
 *
 * The service objects are built with -ftrivial-auto-var-init=pattern in the
 * fuzz build (tests/fuzz/fuzz.mk): a string read before anything was written
 * to it runs past its array, which ASan reports.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csi.h"
#include "controller.h"
#include "grpc-int.h"
#include "op-stub.h"
#include "fv/util.h"

#ifndef FUZZ_SVC
#error "build with -DFUZZ_SVC='\"identity\"' (or node, controller)"
#endif

#define SCRIPT 32

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void __real_grpc_reply(struct grpc_call *call, const ProtobufCMessage *resp);
int __real_grpc_fail(struct grpc_call *call, enum grpc_code code, const char *fmt, ...)
	_printf_(3, 4);
void __wrap_grpc_reply(struct grpc_call *call, const ProtobufCMessage *resp);
int __wrap_grpc_fail(struct grpc_call *call, enum grpc_code code, const char *fmt, ...)
	_printf_(3, 4);

/* flexvol-csi's profile (csi/main.c has it there) */
struct csi_profile csi_plugin;

static const struct {
	const struct fv_driver *drv;
	const char *root, *share;
} profiles[] = {
	{ &stub_driver_loop, NULL, NULL },
	{ &stub_driver_nfs, NULL, NULL },
	{ &stub_driver_nfs, "/srv/flexvol-share", "192.0.2.10:/export/k8s" },
	{ &stub_driver_nfs, "/srv/share", "[2001:db8::1]:/k8s" },
	{ &stub_driver_iscsi, NULL, NULL },
};

static const struct grpc_method *methods;
static size_t nmethods;
static const ProtobufCServiceDescriptor *service;
static unsigned int answers;
static bool verbose; /* FUZZ_CSI_VERBOSE set: each call's answer on stderr (running inputs by hand) */

#define die(...) stub_die("fuzz-csi", __VA_ARGS__)

void __wrap_grpc_reply(struct grpc_call *call, const ProtobufCMessage *resp)
{
	answers++;
	__real_grpc_reply(call, resp);
}

int __wrap_grpc_fail(struct grpc_call *call, enum grpc_code code, const char *fmt, ...)
{
	char msg[sizeof(call->msg)];
	va_list ap;

	answers++;
	if (code <= GRPC_OK || code > GRPC_UNAUTHENTICATED)
		die("%s: failed with gRPC code %d", call->path, (int)code);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!msg[0])
		die("%s: failed (code %d) without a message", call->path, (int)code);
	return __real_grpc_fail(call, code, "%s", msg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	if (streq(FUZZ_SVC, "identity")) {
		methods = csi_identity_methods;
		nmethods = csi_identity_n;
		service = &csi__v1__identity__descriptor;
	} else if (streq(FUZZ_SVC, "node")) {
		methods = csi_node_methods;
		nmethods = csi_node_n;
		service = &csi__v1__node__descriptor;
	} else {
		methods = csi_controller_methods;
		nmethods = csi_controller_n;
		service = &csi__v1__controller__descriptor;
	}
	stub_init();
	verbose = getenv("FUZZ_CSI_VERBOSE");
	return 0;
}

/* --- UTF-8 ----------------------------------------------------------------------------------- */

/* Valid UTF-8 by Go's rules (no overlong form, no surrogate, nothing past U+10FFFF)? */
static bool utf8_ok(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s) {
		unsigned int c = *s, n, v;

		if (c < 0x80) {
			s++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			n = 1, v = c & 0x1f;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2, v = c & 0x0f;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3, v = c & 0x07;
		else
			return false;
		for (unsigned int i = 1; i <= n; i++) {
			if ((s[i] & 0xc0) != 0x80)
				return false;
			v = v << 6 | (s[i] & 0x3f);
		}
		if ((n == 2 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) ||
		    (n == 3 && (v < 0x10000 || v > 0x10ffff)))
			return false;
		s += n + 1;
	}
	return true;
}

/* Are all strings of @m, and of the messages in it, valid UTF-8? */
static bool strings_ok(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	for (unsigned int i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *at = (const char *)m + f->offset;
		size_t n = 1;

		if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
		    *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			n = *(const size_t *)((const char *)m + f->quantifier_offset);
			at = *(const char *const *)at;
		}
		for (size_t k = 0; k < n; k++) {
			const void *v = ((const void *const *)at)[k];

			if (!v)
				continue;
			if (f->type == PROTOBUF_C_TYPE_STRING ? !utf8_ok(v) : !strings_ok(v))
				return false;
		}
	}
	return true;
}

/* --- what the spec asks of an answer --------------------------------------------------------- */

static void check_capacity(const char *method, int64_t cap, const Csi__V1__CapacityRange *cr,
			   bool zero_ok)
{
	if (cap < 0)
		die("%s: capacity %lld", method, (long long)cap);
	if (!cr || (zero_ok && cap == 0))
		return;
	if (cap < cr->required_bytes || (cr->limit_bytes && cap > cr->limit_bytes))
		die("%s: capacity %lld outside the range asked (%lld to %lld)", method,
		    (long long)cap, (long long)cr->required_bytes, (long long)cr->limit_bytes);
}

static void check_answer(const char *method, const ProtobufCMessage *req,
			 const ProtobufCMessage *resp)
{
	if (streq(method, "CreateVolume")) {
		const Csi__V1__CreateVolumeRequest *q = (const void *)req;
		const Csi__V1__Volume *v = ((const Csi__V1__CreateVolumeResponse *)resp)->volume;

		if (!v || !csi_id_ok(v->volume_id))
			die("CreateVolume: answered volume ID '%s' is none the other calls take",
			    v ? v->volume_id : "(no volume)");
		check_capacity(method, v->capacity_bytes, q->capacity_range, true);
		if (csi_plugin.node_local &&
		    (v->n_accessible_topology != 1 || v->accessible_topology[0]->n_segments != 1 ||
		     !streq(v->accessible_topology[0]->segments[0]->key, csi_plugin.topology_key)))
			die("CreateVolume: a node-local volume without its node's topology");
	} else if (streq(method, "ControllerExpandVolume")) {
		const Csi__V1__ControllerExpandVolumeRequest *q = (const void *)req;
		const Csi__V1__ControllerExpandVolumeResponse *r = (const void *)resp;

		check_capacity(method, r->capacity_bytes, q->capacity_range, false);
	} else if (streq(method, "NodeExpandVolume")) {
		const Csi__V1__NodeExpandVolumeRequest *q = (const void *)req;
		const Csi__V1__NodeExpandVolumeResponse *r = (const void *)resp;

		check_capacity(method, r->capacity_bytes, q->capacity_range, true);
	} else if (streq(method, "GetCapacity")) {
		const Csi__V1__GetCapacityResponse *r = (const void *)resp;

		if (r->available_capacity < 0 ||
		    (r->maximum_volume_size && r->maximum_volume_size->value < 0) ||
		    (r->minimum_volume_size && r->minimum_volume_size->value < 0))
			die("GetCapacity: a negative figure");
	} else if (streq(method, "CreateSnapshot")) {
		const Csi__V1__CreateSnapshotRequest *q = (const void *)req;
		const Csi__V1__CreateSnapshotResponse *r = (const void *)resp;
		const Csi__V1__Snapshot *s = r->snapshot;

		if (!s || !csi_snapshot_id_ok(s->snapshot_id) || !s->ready_to_use ||
		    !streq(s->source_volume_id, q->source_volume_id) || s->size_bytes < 0)
			die("CreateSnapshot: answered snapshot '%s' of '%s'",
			    s ? s->snapshot_id : "(none)", s ? s->source_volume_id : "");
	} else if (streq(method, "ListSnapshots")) {
		const Csi__V1__ListSnapshotsRequest *q = (const void *)req;
		const Csi__V1__ListSnapshotsResponse *r = (const void *)resp;

		if (q->max_entries > 0 && r->n_entries > (size_t)q->max_entries)
			die("ListSnapshots: %zu entries, %d asked", r->n_entries, q->max_entries);
		for (size_t i = 0; i < r->n_entries; i++)
			if (!r->entries[i]->snapshot || !*r->entries[i]->snapshot->snapshot_id)
				die("ListSnapshots: an entry without a snapshot ID");
	} else if (streq(method, "NodeGetInfo")) {
		if (!*((const Csi__V1__NodeGetInfoResponse *)resp)->node_id)
			die("NodeGetInfo: no node ID");
	} else if (streq(method, "ControllerPublishVolume")) {
		const Csi__V1__ControllerPublishVolumeResponse *r = (const void *)resp;

		if (r->n_publish_context != 1 || !streq(r->publish_context[0]->key, "device") ||
		    !*r->publish_context[0]->value)
			die("ControllerPublishVolume: no device in the publish context");
	} else if (streq(method, "ValidateVolumeCapabilities")) {
		const Csi__V1__ValidateVolumeCapabilitiesResponse *r = (const void *)resp;
		char why[256];

		for (size_t i = 0; r->confirmed && i < r->confirmed->n_volume_capabilities; i++)
			if (!csi_capability_served(r->confirmed->volume_capabilities[i], why,
						   sizeof(why)))
				die("ValidateVolumeCapabilities: confirmed what is not "
				    "served: %s", why);
	}
}

/* May @method answer OK with this profile (what it declared)? */
static bool declared(const char *method)
{
	const struct csi_controller *c = csi_plugin.controller;

	if (streq(method, "NodeStageVolume") || streq(method, "NodeUnstageVolume"))
		return csi_plugin.stages;
	if (streq(method, "NodePublishVolume") || streq(method, "NodeUnpublishVolume"))
		return csi_plugin.stages || csi_plugin.mounts;
	if (streq(method, "NodeGetVolumeStats"))
		return csi_plugin.stats;
	if (streq(method, "NodeExpandVolume") || streq(method, "ControllerExpandVolume"))
		return csi_plugin.expands;
	if (streq(service->name, "csi.v1.Controller") &&
	    !streq(method, "ControllerGetCapabilities"))
		return c && (!streq(method, "ControllerPublishVolume") || c->publish) &&
		       (!streq(method, "ControllerUnpublishVolume") || c->unpublish) &&
		       (!strstr(method, "Snapshot") || c->create_snapshot) &&
		       (!streq(method, "CreateVolume") || c->create) &&
		       (!streq(method, "DeleteVolume") || c->remove) &&
		       (!streq(method, "GetCapacity") || c->capacity);
	return true;
}

/* --- descriptors left open ------------------------------------------------------------------- */

#define FDS 64

static void open_fds(bool out[FDS])
{
	for (int fd = 0; fd < FDS; fd++)
		out[fd] = fcntl(fd, F_GETFD) >= 0;
}

/* --- one input ------------------------------------------------------------------------------- */

static const ProtobufCMethodDescriptor *method_of(const char *path)
{
	const char *name = strrchr(path, '/') + 1;

	for (unsigned int i = 0; i < service->n_methods; i++)
		if (streq(service->methods[i].name, name))
			return &service->methods[i];
	die("%s: no method of %s", path, service->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct grpc_method *m;
	const ProtobufCMethodDescriptor *md;
	const char *method;
	ProtobufCMessage *req, *resp;
	struct grpc_call *call;
	size_t off = 2 + SCRIPT, n;
	bool before[FDS], after[FDS], clean;
	char err[256];
	int p;

	if (size < 2)
		return 0;
	m = &methods[data[0] % nmethods];
	p = data[1] % ARRAY_SIZE(profiles);
	req = protobuf_c_message_unpack(m->request, NULL, size > off ? size - off : 0,
					size > off ? data + off : data);
	if (!req)
		return 0;
	if (csi_profile_init(&csi_plugin, profiles[p].drv, NULL, profiles[p].root,
			     profiles[p].share, err, sizeof(err)) < 0)
		die("profile %d: %s", p, err);
	md = method_of(m->path);
	method = md->name;
	clean = strings_ok(req);
	call = calloc(1, sizeof(*call));
	if (!call)
		die("out of memory");
	snprintf(call->path, sizeof(call->path), "%s", m->path);

	open_fds(before);
	answers = 0;
	stub_begin(data + 2, size - 2 < SCRIPT ? size - 2 : SCRIPT);
	m->run(call, req);
	stub_end();
	open_fds(after);

	if (verbose)
		fprintf(stderr, "%s profile %d: code %d %s\n", m->path, p, (int)call->code,
			call->code ? call->msg : "");
	if (answers != 1)
		die("%s: answered %u times", m->path, answers);
	for (int fd = 0; fd < FDS; fd++)
		if (before[fd] != after[fd])
			die("%s: descriptor %d %s", m->path, fd,
			    after[fd] ? "left open" : "closed");
	if (call->code != GRPC_OK)
		goto out;
	if (!declared(method))
		die("%s: answered OK, which profile %d does not declare", m->path, p);
	if (call->out_len < 5)
		die("%s: an answer of %zu bytes", m->path, call->out_len);
	n = (size_t)call->out[1] << 24 | (size_t)call->out[2] << 16 | (size_t)call->out[3] << 8 |
	    call->out[4];
	if (call->out[0] != 0 || n != call->out_len - 5)
		die("%s: the answer's prefix says %zu bytes of %zu", m->path, n, call->out_len - 5);
	resp = protobuf_c_message_unpack(md->output, NULL, n, call->out + 5);
	if (!resp)
		die("%s: the answer does not unpack as %s", m->path, md->output->name);
	if (clean && !strings_ok(resp))
		die("%s: a string of the answer is not UTF-8", m->path);
	check_answer(method, req, resp);
	protobuf_c_message_free_unpacked(resp, NULL);
out:
	protobuf_c_message_free_unpacked(req, NULL);
	free(call->out);
	free(call);
	return 0;
}
