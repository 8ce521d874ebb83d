/* SPDX-License-Identifier: Apache-2.0 */
/* The per-call context as drivers see it (fv/driver.h). */
#include <stdarg.h>
#include <stdio.h>
#include <strings.h>

#include "internal.h"

int fv_fail(struct fv_ctx *cx, int err, const char *fmt, ...)
{
	va_list ap;

	if (cx->message[0])
		return err;
	va_start(ap, fmt);
	vsnprintf(cx->message, sizeof(cx->message), fmt, ap);
	va_end(ap);
	return err;
}

void fv_ctx_add_detail(struct fv_ctx *cx, const char *text)
{
	size_t n = strlen(cx->detail);

	if (!text || !*text || n >= sizeof(cx->detail) - 4)
		return;
	snprintf(cx->detail + n, sizeof(cx->detail) - n, "%s%s", n ? "; " : "", text);
}

const char *fv_ctx_message(const struct fv_ctx *cx)
{
	return cx->message;
}

void fv_ctx_reset_message(struct fv_ctx *cx)
{
	cx->message[0] = '\0';
	cx->detail[0] = '\0';
}

void fv_ctx_save_message(const struct fv_ctx *cx, struct fv_saved_message *s)
{
	snprintf(s->message, sizeof(s->message), "%s", cx->message);
	snprintf(s->detail, sizeof(s->detail), "%s", cx->detail);
}

void fv_ctx_restore_message(struct fv_ctx *cx, const struct fv_saved_message *s, bool with_detail)
{
	snprintf(cx->message, sizeof(cx->message), "%s", s->message);
	if (with_detail)
		snprintf(cx->detail, sizeof(cx->detail), "%s", s->detail);
}

const struct fv_config *fv_ctx_config(const struct fv_ctx *cx)
{
	return &cx->cfg;
}

bool fv_ctx_node_is_local(const struct fv_ctx *cx, const char *node)
{
	/* node names are DNS names: compare without case */
	return strcasecmp(node, cx->cfg.node_name) == 0;
}
