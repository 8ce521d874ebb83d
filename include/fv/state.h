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
/*
 * The same for a record of this boot's kernel state only (a device bound, a
 * filesystem mounted): atomic, but not synced to disk.  A power cut ends
 * what it describes, and the record it may lose or leave empty reads as none,
 * as after a wiped state directory.  Two fsyncs less per write: 0.3 ms and
 * more on a disk (docs/benchmarks.md).
 */
int fv_state_write_boot(struct fv_ctx *cx, const char *key, struct json_object *obj);
/* Read the record @key.  Returns 0 and *ret (caller puts it), 1 if absent, or -errno. */
int fv_state_read(struct fv_ctx *cx, const char *key, struct json_object **ret);
/* Remove the record @key.  Absent is success. */
int fv_state_remove(struct fv_ctx *cx, const char *key);

/* Seconds since the record @key was last written: 0 and *ret, 1 if absent, or -errno. */
int fv_state_age(struct fv_ctx *cx, const char *key, unsigned int *ret);

/*
 * fv_state_each() - call @fn with the key of each record of this driver
 * (the record's "key" field, else its file name decoded; a long key hashed
 * into its file name and not in the record is skipped).  @max > 0 looks at
 * no more than @max records, starting at a random one.  Stops at the first
 * @fn returning < 0 and returns that; 0 otherwise.
 */
int fv_state_each(struct fv_ctx *cx, unsigned int max,
		  int (*fn)(struct fv_ctx *cx, const char *key, void *arg), void *arg);

/* The atomic write primitive, for any path: temp + fsync + rename + dir fsync. */
int fv_write_file_atomic(const char *path, const char *data, size_t len, unsigned int mode);

#endif
