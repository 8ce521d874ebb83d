/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reply.  kubelet unmarshals the whole combined output into its
 * DriverStatus (contract §1.4): "status" is one of three exact words,
 * "attached" must be a JSON boolean, "capabilities" must never be null.
 * Exit 0 for Success and Not supported, 1 for Failure (§3.2).
 */
#include <json-c/json.h>
#include <stdio.h>

#include "internal.h"

static const char *const words[] = {
	[FV_SUCCESS] = "Success",
	[FV_FAILURE] = "Failure",
	[FV_NOT_SUPPORTED] = "Not supported",
};

const char *fv_status_word(enum fv_status st)
{
	return words[st];
}

static void add_bool(json_object *o, const char *key, bool v)
{
	json_object_object_add(o, key, json_object_new_boolean(v));
}

char *fv_reply_format(const struct fv_reply *r)
{
	json_object *o = json_object_new_object();
	const char *s;
	char *out = NULL;

	if (!o)
		return NULL;
	json_object_object_add(o, "status", json_object_new_string(words[r->status]));
	if (r->message && *r->message)
		json_object_object_add(o, "message", json_object_new_string(r->message));
	if (r->device)
		json_object_object_add(o, "device", json_object_new_string(r->device));
	if (r->has_attached)
		add_bool(o, "attached", r->attached);
	if (r->version)
		json_object_object_add(o, "version", json_object_new_string(r->version));
	if (r->caps) {
		json_object *c = json_object_new_object();

		if (!c)
			goto out;
		add_bool(c, "attach", r->caps->attach);
		add_bool(c, "selinuxRelabel", r->caps->selinux_relabel);
		add_bool(c, "supportsMetrics", r->caps->supports_metrics);
		add_bool(c, "fsGroup", r->caps->fsgroup);
		add_bool(c, "requiresFSResize", r->caps->requires_fs_resize);
		json_object_object_add(o, "capabilities", c);
	}
	s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (s && asprintf(&out, "%s\n", s) < 0)
		out = NULL;
out:
	json_object_put(o);
	return out;
}

int fv_reply_write(int fd, const struct fv_reply *r)
{
	static const char oom[] = "{\"status\":\"Failure\",\"message\":\"out of memory\"}\n";
	char *s = fv_reply_format(r);

	if (!s) {
		(void)!write(fd, oom, sizeof(oom) - 1);
		return 1;
	}
	(void)!write(fd, s, strlen(s));
	free(s);
	return r->status == FV_FAILURE ? 1 : 0;
}
