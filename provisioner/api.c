/* SPDX-License-Identifier: Apache-2.0 */
/* Request paths and label selectors: see api.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

/*
 * Append @s to @buf (holding @n bytes of @len), every byte but [A-Za-z0-9._-]
 * as %XX.  Returns the new length, or len - 1 once something did not fit:
 * nothing more is appended after a cut.
 */
static size_t escape(char *buf, size_t len, size_t n, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';

		if (n + (plain ? 1 : 3) >= len) {
			buf[n] = '\0';
			return len - 1;
		}
		if (plain)
			buf[n++] = (char)c;
		else
			n += (size_t)snprintf(buf + n, len - n, "%%%02X", c);
	}
	buf[n] = '\0';
	return n;
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
	n = escape(buf, len, n, key);
	n = escape(buf, len, n, "=");
	escape(buf, len, n, value);
	return buf;
}
