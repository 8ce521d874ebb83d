/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CSI Controller service of iscsi (csi/controller.h): ControllerPublishVolume and
 * ControllerUnpublishVolume, on the op layer's attach and detach as the
 * controller-manager runs them for a FlexVolume PV in controller attach mode
 * (docs/design.md, "Two attach modes").
 *
 *   ControllerPublishVolume    the driver's attach for the node: it validates the
 *                              options (the volume context) and answers the
 *                              device's handle, touching nothing; publish context
 *                              {"device": <handle>}
 *   ControllerUnpublishVolume  the driver's detach of the volume for the node: of
 *                              another node's (a controller is never the node), nothing
 *
 * What this buys is the attach/detach controller's bookkeeping: with the
 * CSIDriver's attachRequired: true, a VolumeAttachment per node, and a
 * ReadWriteOnce volume refused on a second node (Multi-Attach) before any
 * node logs in; the login itself stays in NodeStageVolume, where the
 * FlexVolume driver's waitforattach and mountdevice do it, and the write
 * fence (SCSI persistent reservations) there too.  The LUNs are the storage
 * administrator's: no CreateVolume, static PVs.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "csi.h"
#include "controller.h"
#include "fv/lock.h"
#include "fv/op.h"

/* A volume ID with its context: its options or NOT_FOUND (no context names no LUN). */
static void publish(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__ControllerPublishVolumeRequest *q = (const void *)m;
	Csi__V1__ControllerPublishVolumeResponse resp = CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__INIT;
	Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry dev =
		CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__PUBLISH_CONTEXT_ENTRY__INIT;
	Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *devs[] = { &dev };
	_cleanup_(fv_opts_donep) struct fv_opts o = { 0 };
	struct fv_op_call c = { .op = FV_OP_ATTACH };
	const char *fstype = NULL;
	bool ro = false;
	struct fv_ctx cx;
	int r;

	if (csi_need(call, *q->volume_id && *q->node_id && q->volume_capability,
		     "volume_id, node_id and volume_capability") < 0 ||
	    csi_check_capability(call, q->volume_capability, &fstype, &ro) < 0)
		return;
	if (!csi_volume_id_ok(q->volume_id) || !q->n_volume_context)
		return (void)grpc_fail(call, GRPC_NOT_FOUND, "no %s volume '%s': its volume context "
				       "names no LUN", csi_plugin.drv->name, q->volume_id);
	if (csi_open(call, &cx, q->volume_id) < 0 ||
	    csi_opts(call, &cx, q->volume_id, fstype, ro || q->readonly, CSI_MAP(q, volume_context),
		     CSI_MAP(q, secrets), &o) < 0)
		return;
	c.opts = &o;
	c.node = q->node_id;
	r = fv_op_run(&cx, &c);
	if (r < 0)
		return (void)csi_fail(call, &cx, r, "publish");
	dev.key = (char *)"device";
	dev.value = c.ret_device;
	resp.n_publish_context = 1;
	resp.publish_context = devs;
	grpc_reply(call, &resp.base);
	free(c.ret_device);
}

static void unpublish(struct grpc_call *call, const ProtobufCMessage *m)
{
	const Csi__V1__ControllerUnpublishVolumeRequest *q = (const void *)m;
	Csi__V1__ControllerUnpublishVolumeResponse resp =
		CSI__V1__CONTROLLER_UNPUBLISH_VOLUME_RESPONSE__INIT;
	struct fv_op_call c = { .op = FV_OP_DETACH };
	struct fv_ctx cx;
	int r;

	if (csi_need(call, *q->volume_id, "volume_id") < 0)
		return;
	/* no volume of ours can have this ID: nothing published */
	if (!csi_volume_id_ok(q->volume_id))
		return grpc_reply(call, &resp.base);
	if (csi_open(call, &cx, NULL) < 0)
		return;
	c.name = q->volume_id;
	c.node = q->node_id;
	r = fv_op_run(&cx, &c);
	if (r < 0)
		return (void)csi_fail(call, &cx, r, "unpublish");
	grpc_reply(call, &resp.base);
}

/* ValidateVolumeCapabilities: an ID alone names no LUN of an administrator's. */
static int no_volume(struct grpc_call *call, struct fv_ctx *cx, const char *id)
{
	(void)cx;
	return -grpc_fail(call, GRPC_NOT_FOUND, "no %s volume '%s' is known to this endpoint: its "
			  "LUNs are named by static PVs", csi_plugin.drv->name, id);
}

const struct csi_controller csi_controller_iscsi = {
	.driver = "iscsi",
	.exists = no_volume,
	.publish = publish,
	.unpublish = unpublish,
};
