/* SPDX-License-Identifier: Apache-2.0 */
/* Request paths and label selectors: see api.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fv/kubejson.h"
#include "fv/util.h"
#include "api.h"

static const struct {
	const char *group;	/* the API group's path prefix */
	const char *plural;	/* the resource */
} kinds[] = {
	[FVP_API_PV] = { "/api/v1", "persistentvolumes" },
	[FVP_API_PVC] = { "/api/v1", "persistentvolumeclaims" },
	[FVP_API_CLASS] = { "/apis/storage.k8s.io/v1", "storageclasses" },
	[FVP_API_NODE] = { "/api/v1", "nodes" },
	[FVP_API_CONFIGMAP] = { "/api/v1", "configmaps" },
	[FVP_API_EVENT] = { "/api/v1", "events" },
	[FVP_API_LEASE] = { "/apis/coordination.k8s.io/v1", "leases" },
};

const char *fvp_api_path(char *buf, size_t len, enum fvp_api_kind kind, const char *ns,
			 const char *name, const char *sub)
{
	snprintf(buf, len, "%s%s%s/%s%s%s%s%s", kinds[kind].group, ns ? "/namespaces/" : "",
		 ns ? ns : "", kinds[kind].plural, name ? "/" : "", name ? name : "",
		 name && sub ? "/" : "", name && sub ? sub : "");
	return buf;
}

const char *fvp_api_select(char *buf, size_t len, enum fvp_api_kind kind, const char *key,
			   const char *value)
{
	size_t n;

	fvp_api_path(buf, len, kind, NULL, NULL, NULL);
	n = strlen(buf);
	if (n + sizeof("?labelSelector=") > len)
		return buf;
	memcpy(buf + n, "?labelSelector=", sizeof("?labelSelector="));
	n += sizeof("?labelSelector=") - 1;
	n = fv_kube_query_escape(buf, len, n, key);
	n = fv_kube_query_escape(buf, len, n, "=");
	fv_kube_query_escape(buf, len, n, value);
	return buf;
}
