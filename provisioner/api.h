/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Kubernetes API as the controller and the node agent address it: the
 * one place a request path is built (api.c), the finalizer that guards our
 * PVs, and the room a quantity or a time we write takes.  No I/O (lib/kube.c
 * sends the requests).
 */
#ifndef FVP_API_H
#define FVP_API_H

#include <stddef.h>
#include <stdint.h>

/*
 * On our PVs with reclaim policy Delete (KEP-2644, the name every external
 * provisioner uses): a PV deleted while it is Released, even while this
 * process is down, stays until its asset is reclaimed.  The controller adds
 * and removes it; the node agent removes it once it reclaimed the image.
 */
#define FVP_PV_FINALIZER "external-provisioner.volume.kubernetes.io/finalizer"

/*
 * A request path: the longest is a namespaced object's subresource, two
 * names of at most 253 bytes (fv_kube_name_ok()) and fewer than 100 fixed bytes.
 */
#define FVP_API_PATH_MAX 600

/* A quantity we write, "<bytes / 2^20>Mi": at most 20 digits and the suffix. */
#define FVP_QUANTITY_MAX 32
/* A time as fv_time_rfc3339() writes it, "2026-01-02T03:04:05Z". */
#define FVP_TIME_MAX 32

/* The kinds of object the provisioner reads or writes. */
enum fvp_api_kind {
	FVP_API_PV,		/* cluster-wide */
	FVP_API_PVC,
	FVP_API_CLASS,		/* cluster-wide */
	FVP_API_NODE,		/* cluster-wide */
	FVP_API_CONFIGMAP,
	FVP_API_EVENT,
	FVP_API_LEASE,
};

/*
 * fvp_api_path() - the path of object @name of @kind in namespace @ns (NULL
 * for a cluster-wide kind), or of the collection when @name is NULL, with
 * "/@sub" appended when @sub is not NULL ("status").  Names that fv_kube_name_ok()
 * accepts always fit in FVP_API_PATH_MAX; a longer one is cut as snprintf()
 * cuts.
 * Returns: @buf.
 */
const char *fvp_api_path(char *buf, size_t len, enum fvp_api_kind kind, const char *ns,
			 const char *name, const char *sub);

/*
 * fvp_api_select() - the path of the cluster-wide collection of @kind with
 * the label selector @key=@value, escaped for the query string.
 * Returns: @buf.
 */
const char *fvp_api_select(char *buf, size_t len, enum fvp_api_kind kind, const char *key,
			   const char *value);

/* Quantities are read by fv_quantity() (fv/kubejson.h), the API's own grammar. */

#endif
