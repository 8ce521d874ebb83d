/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of backends (the one place that names them), fvp_volume_done(), fvp_pv_driver_options(). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "fv/kubejson.h"

extern const struct fvp_backend fvp_backend_nfs;
extern const struct fvp_backend fvp_backend_loop;

const struct fvp_backend *const fvp_backends[] = {
	&fvp_backend_nfs,
	&fvp_backend_loop,
	NULL,
};

/* bit i: fvp_backends[i] is served; all until fvp_backends_select() */
static unsigned int enabled = ~0u;

int fvp_backends_select(const char *list, char *err, size_t errlen)
{
	unsigned int mask = 0;
	const char *p = list;

	while (p && *p) {
		size_t n = strcspn(p, ",");
		size_t i;

		for (i = 0; fvp_backends[i]; i++)
			if (strlen(fvp_backends[i]->name) == n && !strncmp(fvp_backends[i]->name, p, n))
				break;
		if (!fvp_backends[i]) {
			snprintf(err, errlen, "unknown provisioner '%.*s'", (int)n, p);
			return -EINVAL;
		}
		mask |= 1u << i;
		p += n;
		if (*p == ',')
			p++;
	}
	if (!mask) {
		snprintf(err, errlen, "no provisioner named");
		return -EINVAL;
	}
	enabled = mask;
	return 0;
}

bool fvp_backend_enabled(const struct fvp_backend *b)
{
	for (size_t i = 0; fvp_backends[i]; i++)
		if (fvp_backends[i] == b)
			return enabled & (1u << i);
	return false;
}

void fvp_volume_done(struct fvp_volume *vol)
{
	json_object_put(vol->flex_volume);
	json_object_put(vol->node_affinity);
	json_object_put(vol->labels);
	vol->flex_volume = vol->node_affinity = vol->labels = NULL;
}

json_object *fvp_pv_driver_options(json_object *pv, const char *driver)
{
	json_object *spec = fv_json_get(pv, "spec"), *fx = fv_json_get(spec, "flexVolume");

	if (fx)
		return fv_json_str(fx, "driver") && streq(fv_json_str(fx, "driver"), driver) ?
			       fv_json_get(fx, "options") : NULL;
	return fv_json_get(fv_json_get(spec, "csi"), "volumeAttributes");
}
