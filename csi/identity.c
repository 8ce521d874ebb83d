/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Identity service: who we are, what we have, whether we are up.
 * What the endpoint serves for the driver is the profile's (profile.c): the
 * Controller service where the driver has a Controller table set up to
 * serve, volume accessibility constraints for node-local drivers (their
 * NodeGetInfo names the node), online expansion where it grows them.
 */
#include "csi.h"
#include "fv/version.h"

static void get_plugin_info(struct grpc_call *call, const ProtobufCMessage *req)
{
	Csi__V1__GetPluginInfoResponse r = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;

	r.name = csi_plugin.name;
	r.vendor_version = (char *)fv_version;
	grpc_reply(call, &r.base);
}

static void get_plugin_capabilities(struct grpc_call *call, const ProtobufCMessage *req)
{
	Csi__V1__GetPluginCapabilitiesResponse r = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;

	r.n_capabilities = csi_plugin.n_plugin_caps;
	r.capabilities = csi_plugin.plugin_caps;
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
