/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Identity service: who we are, what we have, whether we are up.
 * Only what the endpoint really serves for the driver is declared: the
 * Controller service where it makes volumes (controller.c), volume
 * accessibility constraints for node-local drivers (their NodeGetInfo names
 * the node), online expansion where it grows them.
 */
#include "csi.h"
#include "fv/version.h"

static void get_plugin_info(struct grpc_call *call, const ProtobufCMessage *req)
{
	Csi__V1__GetPluginInfoResponse r = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;

	r.name = csi_ep.name;
	r.vendor_version = (char *)fv_version;
	grpc_reply(call, &r.base);
}

static void get_plugin_capabilities(struct grpc_call *call, const ProtobufCMessage *req)
{
	Csi__V1__GetPluginCapabilitiesResponse r = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__PluginCapability cap[3], *caps[3];
	Csi__V1__PluginCapability__Service svc[2];
	Csi__V1__PluginCapability__VolumeExpansion exp = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__INIT;
	size_t n = 0, ns = 0;

	if (csi_controller_serves()) {
		csi__v1__plugin_capability__service__init(&svc[ns]);
		svc[ns].type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE;
		csi__v1__plugin_capability__init(&cap[n]);
		cap[n].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
		cap[n++].service = &svc[ns++];
	}
	if (csi_node_local()) {
		csi__v1__plugin_capability__service__init(&svc[ns]);
		svc[ns].type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS;
		csi__v1__plugin_capability__init(&cap[n]);
		cap[n].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
		cap[n++].service = &svc[ns++];
	}
	if (csi_expands()) {
		/* a mounted volume grows: the op layer's expandfs is online */
		exp.type = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE;
		csi__v1__plugin_capability__init(&cap[n]);
		cap[n].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
		cap[n++].volume_expansion = &exp;
	}
	for (size_t i = 0; i < n; i++)
		caps[i] = &cap[i];
	r.n_capabilities = n;
	r.capabilities = caps;
	grpc_reply(call, &r.base);
}

/* Ready as soon as it answers: the op layer needs nothing started. */
static void probe(struct grpc_call *call, const ProtobufCMessage *req)
{
	Csi__V1__ProbeResponse r = CSI__V1__PROBE_RESPONSE__INIT;
	Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;

	ready.value = 1;
	r.ready = &ready;
	grpc_reply(call, &r.base);
}

const struct grpc_method csi_identity_methods[] = {
	{ "/csi.v1.Identity/GetPluginInfo", &csi__v1__get_plugin_info_request__descriptor,
	  get_plugin_info, true },
	{ "/csi.v1.Identity/GetPluginCapabilities",
	  &csi__v1__get_plugin_capabilities_request__descriptor, get_plugin_capabilities, true },
	{ "/csi.v1.Identity/Probe", &csi__v1__probe_request__descriptor, probe, true },
};
const size_t csi_identity_n = ARRAY_SIZE(csi_identity_methods);
