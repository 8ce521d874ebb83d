/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/: the per-call context. Drivers see it only through fv/driver.h. */
#ifndef FV_INTERNAL_H
#define FV_INTERNAL_H

#include "fv/config.h"
#include "fv/driver.h"

#define FV_MESSAGE_MAX 2048

struct fv_ctx {
	const struct fv_driver *drv;
	struct fv_config cfg;
	char message[FV_MESSAGE_MAX]; /* the reply's "message"; first fv_fail() wins */
	char detail[FV_MESSAGE_MAX];  /* helper output appended to the message */
};



/* opts.c: parse the kubelet options JSON into @o.  Returns 0 or -FV_ERR_BADOPT (message set). */
int fv_opts_parse(struct fv_ctx *cx, const char *json, struct fv_opts *o);
void fv_opts_done(struct fv_opts *o);
#endif
