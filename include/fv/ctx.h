/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-call context, for a program that runs op-layer code outside a
 * kubelet call (flexvol-provisioner checks options and runs helpers with
 * it).  A zeroed struct fv_ctx is a context without a driver or a loaded
 * configuration; after a failing call its message says why.  Drivers see
 * the context only through fv/driver.h.
 */
#ifndef FV_CTX_H
#define FV_CTX_H

#include <stdbool.h>

#include "fv/config.h"
#include "fv/driver.h"

/* Bytes kept of the reply's message and of the helper output appended to it (longer is cut). */
#define FV_MESSAGE_MAX 2048

struct fv_ctx {
	const struct fv_driver *drv;
	bool config_ok;		      /* cfg was loaded (init works without it) */
	struct fv_config cfg;
	char message[FV_MESSAGE_MAX]; /* the reply's "message"; first fv_fail() wins */
	char detail[FV_MESSAGE_MAX];  /* helper output appended to the message */
};

/* opts.c: parse the kubelet options JSON into @o.  Returns 0 or -FV_ERR_BADOPT (message set). */
int fv_opts_parse(struct fv_ctx *cx, const char *json, struct fv_opts *o);
/*
 * fv_opts_set() - the options @pairs (@n of them, borrowed: they must live
 * as long as @o) into @o, the kubernetes.io keys among them read into the
 * typed fields as fv_opts_parse() reads them.  Returns 0 or -FV_ERR_BADOPT.
 */
int fv_opts_set(struct fv_ctx *cx, const struct fv_opt_pair *pairs, size_t n, struct fv_opts *o);
/*
 * fv_opts_from_object() - the options of the JSON object @obj (a state
 * record's, say) into @o, which takes a reference to it.  0 or <0.
 */
int fv_opts_from_object(struct fv_ctx *cx, struct json_object *obj, struct fv_opts *o);
void fv_opts_done(struct fv_opts *o);
static inline void fv_opts_donep(struct fv_opts *o)
{
	fv_opts_done(o);
}

#endif
