/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the flexvol/loop backend (backend-loop.c, in the controller) and the
 * node agent (agent.c, one per node in the installer DaemonSet) agree on.
 *
 * - Every PV of flexvol/loop carries the label FVP_LOOP_LABEL_NODE naming its
 *   node (fvp_node_label()): the agent lists its node's PVs by it, the
 *   backend the PVs that share a node's space.
 * - Its flexVolume options name the image "pvc-<claim uid>.img", directly in
 *   the node's loop root, its size in bytes, and "preallocate": "true" when
 *   the class asks for it (the driver ignores that key; the agent reads it).
 * - The agent publishes the node's space in the ConfigMap named after the
 *   node in the capacity namespace (default "flexvol-loop"): data "free"
 *   (bytes the loop root's filesystem has for new blocks), "time" (seconds
 *   since the epoch), "root", and one key per image "pvc-<uid>.img" with
 *   "<size> <allocated>" in bytes.
 * - An image's owner record is the extended attribute FV_LOOP_OWNER_XATTR (fv/loop.h)
 *   holding the PV's name (the name the loop driver records at mountdevice).
 */
#ifndef FVP_LOOP_H
#define FVP_LOOP_H

#include <stdbool.h>
#include <stddef.h>

#define FVP_LOOP_PROVISIONER "flexvol/loop"
#define FVP_LOOP_DRIVER "flexvol/loop"
#define FVP_LOOP_LABEL_NODE "flexvol/node"
#define FVP_LOOP_CAPACITY_NS "flexvol-loop"
#define FVP_LOOP_REPORT_MAX_AGE 300 /* seconds: an older capacity report is not believed */

/* The value of FVP_LOOP_LABEL_NODE for node @node (label values are at most 63 bytes). */
void fvp_node_label(const char *node, char *buf, size_t len);

#endif
