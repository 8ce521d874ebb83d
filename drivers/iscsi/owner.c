/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What of open-iscsi's is ours: the sessions and node records this driver
 * created, and the discovery records it made for discovery CHAP.  Only
 * those are ever logged out or deleted; an administrator's session, node
 * record or discovery record on the same node is used as it is or left
 * alone, never changed.
 *
 * Records in the state dir, written BEFORE the thing they describe is
 * created (an intent), so that a SIGKILL at any point leaves a record of
 * whatever may exist, and a retry (or the garbage collector) finishes:
 *
 *   "@iscsi-session:<iqn>"     {iqn, portal, iface, sid, boot_id}: the node
 *                              record (iqn, portal, iface) and the session
 *                              we logged in with it (sid -1: not known yet)
 *   "@iscsi-discovery:<portal>"  {portal}: a discovery record we created
 *
 * A session is ours when its sid, iface and portal match the record and
 * the record was written in this boot (sids are reused after a reboot).
 * The '@' keeps these keys apart from volume names (DNS names) and the
 * class's "?<hint>" records.
 */
#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>

#include "fv/state.h"
#include "iscsi.h"

static void session_key(const char *iqn, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "@iscsi-session:");

	for (; *iqn && k + 1 < len; iqn++)
		buf[k++] = (char)tolower((unsigned char)*iqn);
	buf[k] = '\0';
}

static void boot_id(char *buf, size_t len)
{
	if (fv_read_line("/proc/sys/kernel/random/boot_id", buf, len) <= 0)
		buf[0] = '\0';
}

static const char *get_str(json_object *o, const char *k)
{
	json_object *x;

	return json_object_object_get_ex(o, k, &x) && json_object_is_type(x, json_type_string)
		       ? json_object_get_string(x)
		       : "";
}

int iscsi_own_read(struct fv_ctx *cx, const char *iqn, struct iscsi_own *o)
{
	char key[IQN_MAX + 32];
	json_object *rec = NULL, *x;
	int r;

	memset(o, 0, sizeof(*o));
	o->sid = -1;
	session_key(iqn, key, sizeof(key));
	r = fv_state_read(cx, key, &rec);
	if (r != 0)
		return r < 0 ? r : 1;
	snprintf(o->iqn, sizeof(o->iqn), "%s", get_str(rec, "iqn"));
	snprintf(o->portal, sizeof(o->portal), "%s", get_str(rec, "portal"));
	snprintf(o->iface, sizeof(o->iface), "%s", get_str(rec, "iface"));
	snprintf(o->boot_id, sizeof(o->boot_id), "%s", get_str(rec, "boot_id"));
	if (json_object_object_get_ex(rec, "sid", &x) && json_object_is_type(x, json_type_int))
		o->sid = json_object_get_int(x);
	json_object_put(rec);
	if (!o->iqn[0] || !o->portal[0] || !o->iface[0])
		return 1; /* not a record of ours that we can act on */
	return 0;
}

int iscsi_own_write(struct fv_ctx *cx, const struct iscsi_own *o)
{
	char key[IQN_MAX + 32], boot[64];
	json_object *rec = json_object_new_object();
	int r;

	if (!rec)
		return -ENOMEM;
	boot_id(boot, sizeof(boot));
	session_key(o->iqn, key, sizeof(key));
	json_object_object_add(rec, "iqn", json_object_new_string(o->iqn));
	json_object_object_add(rec, "portal", json_object_new_string(o->portal));
	json_object_object_add(rec, "iface", json_object_new_string(o->iface));
	json_object_object_add(rec, "sid", json_object_new_int(o->sid));
	json_object_object_add(rec, "boot_id", json_object_new_string(boot));
	r = fv_state_write(cx, key, rec);
	json_object_put(rec);
	return r;
}

int iscsi_own_remove(struct fv_ctx *cx, const char *iqn)
{
	char key[IQN_MAX + 32];

	session_key(iqn, key, sizeof(key));
	return fv_state_remove(cx, key);
}

bool iscsi_own_session(const struct iscsi_own *o, const struct iscsi_session *s)
{
	char boot[64];

	if (!o->iqn[0] || strcasecmp(o->iqn, s->target) || !streq(o->iface, s->iface))
		return false;
	if (s->addr[0] && !streq(o->portal, s->addr))
		return false;
	boot_id(boot, sizeof(boot));
	if (o->sid >= 0)
		return o->sid == s->sid && streq(o->boot_id, boot);
	/* killed before the sid was recorded: the login of this boot with our record */
	return streq(o->boot_id, boot);
}

static void discovery_key(const char *portal, char *buf, size_t len)
{
	snprintf(buf, len, "@iscsi-discovery:%s", portal);
}

int iscsi_own_discovery(struct fv_ctx *cx, const char *portal, int op)
{
	char key[PORTAL_MAX + 32];
	json_object *rec;
	int r;

	discovery_key(portal, key, sizeof(key));
	if (op < 0)
		return fv_state_remove(cx, key);
	if (op == 0) {
		r = fv_state_read(cx, key, &rec);
		if (r == 0)
			json_object_put(rec);
		return r == 0 ? 1 : r < 0 ? r : 0;
	}
	rec = json_object_new_object();
	if (!rec)
		return -ENOMEM;
	json_object_object_add(rec, "portal", json_object_new_string(portal));
	r = fv_state_write(cx, key, rec);
	json_object_put(rec);
	return r;
}
