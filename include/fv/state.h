/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small state records under <state_dir>/<driver>/<key>.json.  They are a
 * cache: the kernel is the truth, and every op must still work when the
 * state directory has been wiped.  Writes are atomic (temp file in the same
 * directory, fsync, rename, fsync of the directory), so a reader sees the
 * old record or the new one, never a torn one.
 */
#ifndef FV_STATE_H
#define FV_STATE_H

struct fv_ctx;
struct json_object;

/* Write @obj as the record @key (any string; encoded into a safe name). */
int fv_state_write(struct fv_ctx *cx, const char *key, struct json_object *obj);
/* Read the record @key.  Returns 0 and *ret (caller puts it), 1 if absent, or -errno. */
int fv_state_read(struct fv_ctx *cx, const char *key, struct json_object **ret);
/* Remove the record @key.  Absent is success. */
int fv_state_remove(struct fv_ctx *cx, const char *key);

/* The atomic write primitive, for any path: temp + fsync + rename + dir fsync. */
int fv_write_file_atomic(const char *path, const char *data, size_t len, unsigned int mode);

#endif
