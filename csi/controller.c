/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service (csi/controller.h): the calls of the driver's
 * table, ValidateVolumeCapabilities and ControllerGetCapabilities.
 */
#include <stdio.h>
#include <string.h>

#include "controller.h"
#include "../src/internal.h"
#include "fv/util.h"

/* The drivers with a Controller service. */
static const struct csi_controller *const controllers[] = { &csi_controller_loop,
							     &csi_controller_nfs,
							     &csi_controller_iscsi };

/* The table of the endpoint's driver when it serves the Controller service, or NULL. */
static const struct csi_controller *served(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(controllers); i++)
		if (streq(controllers[i]->driver, csi_ep.drv->name))
			return controllers[i]->serves() ? controllers[i] : NULL;
	return NULL;
}

bool csi_controller_serves(void)
{
	return served() != NULL;
}

bool csi_expands(void)
{
	const struct csi_controller *c = served();

	return c && c->expand && c->node_expand;
}

void csi_volume_id_of(const char *name, bool (*ok)(const char *id), char *id, size_t len)
{
	if (ok(name))
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
	const char *fstype;
	bool ro;

	if (!*q->name)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "name is required");
	if (!q->n_volume_capabilities)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT, "volume_capabilities are required");
	for (size_t i = 0; i < q->n_volume_capabilities; i++)
		if (csi_check_capability(call, q->volume_capabilities[i], &fstype, &ro) < 0)
			return -1;
	if (q->volume_content_source)
		return -grpc_fail(call, GRPC_INVALID_ARGUMENT,
				  "no volume content source is served (no snapshots, no clones)");
	return 0;
}

static void validate_capabilities(const struct csi_controller *c, struct grpc_call *call,
				  const ProtobufCMessage *m)
{
	const Csi__V1__ValidateVolumeCapabilitiesRequest *q = (const void *)m;
	Csi__V1__ValidateVolumeCapabilitiesResponse resp =
		CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed ok =
		CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__CONFIRMED__INIT;
	struct fv_ctx cx;
	bool ro;

	if (!*q->volume_id || !q->n_volume_capabilities)
		return (void)grpc_fail(call, GRPC_INVALID_ARGUMENT,
				       "volume_id and volume_capabilities are required");
	if (csi_ctx_load(call, &cx) < 0 || c->exists(call, &cx, q->volume_id) < 0)
		return;
	for (size_t i = 0; i < q->n_volume_capabilities; i++) {
		const Csi__V1__VolumeCapability *v = q->volume_capabilities[i];

		/* the checks of csi_check_capability(), answered as "not confirmed" */
		if (v->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT ||
		    v->mount->n_mount_flags ||
		    !csi_mode_served(v->access_mode ? v->access_mode->mode : 0, &ro)) {
			resp.message = (char *)"not served: only filesystem volumes without mount "
					       "flags, in the access modes the driver serves";
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
	Csi__V1__ControllerServiceCapability cap[4], *caps[4];
	Csi__V1__ControllerServiceCapability__RPC rpc[4];
	Csi__V1__ControllerServiceCapability__RPC__Type types[4];
	const struct csi_controller *c = served();
	size_t n = 0;

	(void)m;
	if (c && c->create) {
		types[n++] = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME;
		types[n++] = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY;
	}
	if (csi_expands())
		types[n++] = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME;
	if (c && c->publish)
		types[n++] = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME;
	for (size_t i = 0; i < n; i++) {
		csi__v1__controller_service_capability__rpc__init(&rpc[i]);
		csi__v1__controller_service_capability__init(&cap[i]);
		rpc[i].type = types[i];
		cap[i].type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
		cap[i].rpc = &rpc[i];
		caps[i] = &cap[i];
	}
	r.n_capabilities = n;
	r.capabilities = caps;
	grpc_reply(call, &r.base);
}

/* A call of the driver's table; a driver without the service or the call: UNIMPLEMENTED. */
enum call_kind { CREATE, REMOVE, VALIDATE, CAPACITY, EXPAND, NODE_EXPAND, PUBLISH, UNPUBLISH };

static void dispatch(enum call_kind k, struct grpc_call *call, const ProtobufCMessage *m)
{
	const struct csi_controller *c = served();
	csi_handler *h = NULL;

	if (!c)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "%s volumes have no Controller "
				       "service here", csi_ep.drv->name);
	switch (k) {
	case CREATE: h = c->create; break;
	case REMOVE: h = c->remove; break;
	case VALIDATE: return validate_capabilities(c, call, m);
	case CAPACITY: h = c->capacity; break;
	case EXPAND: h = csi_expands() ? c->expand : NULL; break;
	case NODE_EXPAND: h = csi_expands() ? c->node_expand : NULL; break;
	case PUBLISH: h = c->publish; break;
	case UNPUBLISH: h = c->unpublish; break;
	}
	if (!h)
		return (void)grpc_fail(call, GRPC_UNIMPLEMENTED, "not served for %s volumes",
				       csi_ep.drv->name);
	h(call, m);
}

#define CALL(fn, kind)                                                                             \
	static void fn(struct grpc_call *call, const ProtobufCMessage *m)                         \
	{                                                                                          \
		dispatch(kind, call, m);                                                           \
	}
CALL(create_volume, CREATE)
CALL(delete_volume, REMOVE)
CALL(validate_volume_capabilities, VALIDATE)
CALL(get_capacity, CAPACITY)
CALL(controller_expand, EXPAND)
CALL(node_expand, NODE_EXPAND)
CALL(controller_publish, PUBLISH)
CALL(controller_unpublish, UNPUBLISH)

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
	{ "/csi.v1.Controller/ControllerGetCapabilities",
	  &csi__v1__controller_get_capabilities_request__descriptor, controller_get_capabilities,
	  true },
	{ "/csi.v1.Node/NodeExpandVolume", &csi__v1__node_expand_volume_request__descriptor,
	  node_expand, false },
};
const size_t csi_controller_n = ARRAY_SIZE(csi_controller_methods);
