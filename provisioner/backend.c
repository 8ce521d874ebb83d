/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of backends (the one place that names them) and fvp_volume_done(). */
#include "backend.h"

extern const struct fvp_backend fvp_backend_nfs;

const struct fvp_backend *const fvp_backends[] = {
	&fvp_backend_nfs,
	NULL,
};

void fvp_volume_done(struct fvp_volume *vol)
{
	json_object_put(vol->flex_volume);
	json_object_put(vol->node_affinity);
	vol->flex_volume = vol->node_affinity = NULL;
}
