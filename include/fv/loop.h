/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the loop driver (drivers/loop/loop.c) and flexvol-provisioner's node
 * agent (provisioner/agent.c) agree on about an image file.
 */
#ifndef FV_LOOP_H
#define FV_LOOP_H

/*
 * An image's owner record: the extended attribute holding the name of the
 * volume it belongs to.  The driver records it at the first trusted op on
 * the image and refuses the image to any other volume; the agent removes
 * an image only when the record names the PV being reclaimed.  In the
 * trusted namespace: only CAP_SYS_ADMIN reads or writes it, so no tenant of
 * the loop root forges or clears it.
 */
#define FV_LOOP_OWNER_XATTR "trusted.flexvol.owner"

/* The name a volume was made for where it has one besides its owner (CSI's CreateVolume name). */
#define FV_LOOP_NAME_XATTR "trusted.flexvol.name"

/* What a copy (a snapshot, a restored or cloned volume) was made from: the source's ID. */
#define FV_LOOP_SOURCE_XATTR "trusted.flexvol.source"

#endif
