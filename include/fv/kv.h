/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One reader for the "key = value" files of the node: the configuration
 * (config.c) and the iSCSI CHAP credentials file (drivers/iscsi).  Lines
 * are "key = value"; blank lines and lines whose first non-blank character
 * is '#' are skipped; blanks around key and value are trimmed.  What a key
 * means, and which are allowed, is the caller's business.
 */
#ifndef FV_KV_H
#define FV_KV_H

#include <stdbool.h>
#include <stddef.h>

struct fv_kv {
	char *next;	     /* the rest of the text */
	char *end;	     /* its end */
	size_t max_line;     /* longest line accepted (bytes, without the newline) */
	unsigned int line;   /* the number of the line last returned (1-based) */
};

/* Iterate over @len bytes of @text, modified in place; text[len] must be writable. */
void fv_kv_init(struct fv_kv *it, char *text, size_t len, size_t max_line);

/*
 * fv_kv_next() - the next key and value (pointers into the text).
 * Returns 1 with *ret_key and *ret_value set, 0 at the end of the text,
 * -EINVAL for a line without '=', -E2BIG for a line longer than max_line,
 * -EILSEQ for a NUL byte in a line; it->line is that line's number.
 */
int fv_kv_next(struct fv_kv *it, char **ret_key, char **ret_value);

#endif
