/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service (csi/controller.h): each call checked against
 * the profile, then handed to the driver's table; ValidateVolumeCapabilities
 * and ControllerGetCapabilities answered here.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "controller.h"
#include "fv/driver.h"
#include "fv/util.h"

/* The drivers with a Controller table. */
static const struct csi_controller *const controllers[] = { &csi_controller_loop,
							     &csi_controller_nfs,
							     &csi_controller_iscsi };

const struct csi_controller *csi_controller_of(const struct csi_profile *p)
{
	for (size_t i = 0; i < ARRAY_SIZE(controllers); i++)
		if (streq(controllers[i]->driver, p->drv->name))
			return !controllers[i]->serves || controllers[i]->serves(p) ?
				       controllers[i] : NULL;
	return NULL;
}

bool csi_id_ok(const char *id)
{
	const struct csi_controller *c = csi_plugin.controller;

	return csi_volume_id_ok(id) && (!c || !c->id_ok || c->id_ok(id));
}

void csi_volume_id_of(const char *name, char *id, size_t len)
{
	if (csi_id_ok(name))
		snprintf(id, len, "%s", name);
	else
		snprintf(id, len, "pvc-%016llx", (unsigned long long)fv_hash64(name));
}

bool csi_sidecar_param(const char *key)
{
	return strncmp(key, "csi.storage.k8s.io/", 19) == 0;
}

int csi_create_checks(struct grpc_call *call, const Csi__V1__CreateVolumeRequest *q)
{
	const struct csi_controller *c = csi_plugin.controller;
	const Csi__V1__VolumeContentSource *s;
	const char *fstype;
	bool ro;

	size_t n = strlen(q->name);

	if (csi_need(call, n, "name") < 0 ||
	    csi_need(call, q->n_volume_capabilities, "volume_capabilities") < 0)
		return -1;
	/* kept with the volume (fv_owner's pv, an image's name record) and in its log lines */
	if (n > CSI_NAME_MAX)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "name of %zu bytes: at most %d", n,
				  CSI_NAME_MAX);
	for (const char *p = q->name; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "the name holds a control "
					  "character");
	for (size_t i = 0; i < q->n_volume_capabilities; i++)
		if (csi_check_capability(call, q->volume_capabilities[i], &fstype, &ro) < 0)
			return -1;
	s = q->volume_content_source;
	if (s && s->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT &&
	    !(c && c->create_snapshot))
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "%s volumes have no snapshots to "
				  "restore", csi_plugin.drv->name);
	if (s && s->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME && !(c && c->clones))
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "%s volumes are not cloned",
				  csi_plugin.drv->name);
	if (s && s->type_case != CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT &&
	    s->type_case != CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "a content source of no known type");
	return 0;
}

int csi_check_made(struct grpc_call *call, const char *id, uint64_t have,
		   const Csi__V1__CapacityRange *cr)
{
	/* a record past int64 (an nfs owner record's "size" is read as it is written there) */
	if (have > INT64_MAX)
		return -grpc_fail(call, GRPC_FAILED_PRECONDITION, "volume %s is recorded with %llu "
				  "bytes, more than a capacity can be", id, (unsigned long long)have);
	if (!cr || (have >= (uint64_t)cr->required_bytes &&
		    (!cr->limit_bytes || have <= (uint64_t)cr->limit_bytes)))
		return 0;
	return -grpc_fail(call, GRPC_ALREADY_EXISTS, "volume %s exists with %llu bytes, outside "
			  "the range asked now (%lld to %lld)", id, (unsigned long long)have,
			  (long long)cr->required_bytes, (long long)cr->limit_bytes);
}

void csi_reply_volume(struct grpc_call *call, const char *id, uint64_t capacity, size_t n,
		      const char *const *keys, const char *const *vals, const char *node,
		      const Csi__V1__VolumeContentSource *source)
{
	Csi__V1__CreateVolumeResponse resp = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
	Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;
	Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT, *topos[] = { &topo };
	Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
	Csi__V1__Topology__SegmentsEntry *segs[] = { &seg };
	Csi__V1__Volume__VolumeContextEntry ctx[4], *ctxs[4];

	if (n > ARRAY_SIZE(ctx))
		return (void)grpc_fail(call, GRPC_INTERNAL, "a volume context of %zu entries", n);
	for (size_t i = 0; i < n; i++) {
		csi__v1__volume__volume_context_entry__init(&ctx[i]);
		ctx[i].key = (char *)keys[i];
		ctx[i].value = (char *)vals[i];
		ctxs[i] = &ctx[i];
	}
	vol.volume_id = (char *)id;
	vol.capacity_bytes = (int64_t)capacity;
	vol.n_volume_context = n;
	vol.volume_context = ctxs;
	if (csi_plugin.node_local) {
		seg.key = csi_plugin.topology_key;
		seg.value = (char *)node;
		topo.n_segments = 1;
		topo.segments = segs;
		vol.n_accessible_topology = 1;
		vol.accessible_topology = topos;
	}
	vol.content_source = (Csi__V1__VolumeContentSource *)source;
	resp.volume = &vol;
	grpc_reply(call, &resp.base);
}

static void validate_capabilities(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__ValidateVolumeCapabilitiesRequest *q = (const void *)m;
	Csi__V1__ValidateVolumeCapabilitiesResponse resp =
		CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed ok =
		CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__CONFIRMED__INIT;
	char why[256];
	struct fv_ctx cx;

	if (csi_need(call, *q->volume_id && q->n_volume_capabilities,
		     "volume_id and volume_capabilities") < 0 ||
	    csi_open(call, &cx, NULL) < 0 ||
	    csi_plugin.controller->exists(call, &cx, q->volume_id) < 0)
		return;
	for (size_t i = 0; i < q->n_volume_capabilities; i++) {
		/* what CreateVolume and NodeStageVolume refuse is not confirmed */
		if (!csi_capability_served(q->volume_capabilities[i], why, sizeof(why))) {
			resp.message = why;
			return grpc_reply(call, &resp.base);
		}
	}
	ok.n_volume_capabilities = q->n_volume_capabilities;
	ok.volume_capabilities = q->volume_capabilities;
	ok.n_volume_context = q->n_volume_context;
	ok.volume_context = (void *)q->volume_context;
	ok.n_parameters = q->n_parameters;
	ok.parameters = (void *)q->parameters;
	resp.confirmed = &ok;
	grpc_reply(call, &resp.base);
}

static void controller_get_capabilities(struct grpc_call *call, const ProtobufCMessage *m)
{
	Csi__V1__ControllerGetCapabilitiesResponse r =
		CSI__V1__CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;

	r.n_capabilities = csi_plugin.n_controller_caps;
	r.capabilities = csi_plugin.controller_caps;
	grpc_reply(call, &r.base);
}

/* The Controller calls, each the table's handler at this offset (validate: ours). */
#define HANDLER(f) offsetof(struct csi_controller, f)

static void dispatch(size_t slot, struct grpc_call *call, const ProtobufCMessage *m)
{
	const struct csi_controller *c = csi_plugin.controller;
	csi_handler *h;

	if (!c)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes have no Controller "
				       "service here", csi_plugin.drv->name);
	if (slot == HANDLER(exists))
		return validate_capabilities(call, m);
	h = *(csi_handler *const *)(const void *)((const char *)c + slot);
	/* the profile declares expansion only with the node's half */
	if (slot == HANDLER(expand) && !csi_plugin.expands)
		h = NULL;
	if (!h)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "not served for %s volumes",
				       csi_plugin.drv->name);
	h(call, m);
}

/* One gRPC method per Controller call, all through dispatch(). */
#define CONTROLLER_METHOD(fn, slot)                                                                \
	static void fn(struct grpc_call *call, const ProtobufCMessage *m)                         \
	{                                                                                          \
		dispatch(HANDLER(slot), call, m);                                                  \
	}
CONTROLLER_METHOD(create_volume, create)
CONTROLLER_METHOD(delete_volume, remove)
CONTROLLER_METHOD(validate_volume_capabilities, exists)
CONTROLLER_METHOD(get_capacity, capacity)
CONTROLLER_METHOD(controller_expand, expand)
CONTROLLER_METHOD(controller_publish, publish)
CONTROLLER_METHOD(controller_unpublish, unpublish)
CONTROLLER_METHOD(create_snapshot, create_snapshot)
CONTROLLER_METHOD(delete_snapshot, delete_snapshot)
CONTROLLER_METHOD(list_snapshots, list_snapshots)

const struct grpc_method csi_controller_methods[] = {
	{ "/csi.v1.Controller/CreateVolume", &csi__v1__create_volume_request__descriptor,
	  create_volume, false },
	{ "/csi.v1.Controller/DeleteVolume", &csi__v1__delete_volume_request__descriptor,
	  delete_volume, false },
	{ "/csi.v1.Controller/ValidateVolumeCapabilities",
	  &csi__v1__validate_volume_capabilities_request__descriptor, validate_volume_capabilities,
	  true },
	{ "/csi.v1.Controller/GetCapacity", &csi__v1__get_capacity_request__descriptor,
	  get_capacity, true },
	{ "/csi.v1.Controller/ControllerExpandVolume",
	  &csi__v1__controller_expand_volume_request__descriptor, controller_expand, false },
	{ "/csi.v1.Controller/ControllerPublishVolume",
	  &csi__v1__controller_publish_volume_request__descriptor, controller_publish, false },
	{ "/csi.v1.Controller/ControllerUnpublishVolume",
	  &csi__v1__controller_unpublish_volume_request__descriptor, controller_unpublish, false },
	{ "/csi.v1.Controller/CreateSnapshot", &csi__v1__create_snapshot_request__descriptor,
	  create_snapshot, false },
	{ "/csi.v1.Controller/DeleteSnapshot", &csi__v1__delete_snapshot_request__descriptor,
	  delete_snapshot, false },
	{ "/csi.v1.Controller/ListSnapshots", &csi__v1__list_snapshots_request__descriptor,
	  list_snapshots, true },
	{ "/csi.v1.Controller/ControllerGetCapabilities",
	  &csi__v1__controller_get_capabilities_request__descriptor, controller_get_capabilities,
	  true },
};
const size_t csi_controller_n = ARRAY_SIZE(csi_controller_methods);
