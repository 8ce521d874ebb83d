/* SPDX-License-Identifier: Apache-2.0 */
/* The "key = value" line reader (fv/kv.h). */
#include <errno.h>
#include <string.h>

#include "fv/kv.h"

void fv_kv_init(struct fv_kv *it, char *text, size_t len, size_t max_line)
{
	it->next = text;
	it->end = text + len;
	it->max_line = max_line;
	it->line = 0;
}

static char *trim(char *s, char *e)
{
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		e--;
	*e = '\0';
	return s;
}

int fv_kv_next(struct fv_kv *it, char **ret_key, char **ret_value)
{
	while (it->next < it->end) {
		char *s = it->next, *nl = memchr(s, '\n', (size_t)(it->end - s));
		char *e = nl ? nl : it->end, *eq, *t;

		it->line++;
		it->next = nl ? nl + 1 : it->end;
		if ((size_t)(e - s) > it->max_line)
			return -E2BIG;
		if (memchr(s, '\0', (size_t)(e - s)))
			return -EILSEQ;
		t = trim(s, e);
		if (!*t || *t == '#')
			continue;
		eq = strchr(t, '=');
		if (!eq)
			return -EINVAL;
		*ret_value = trim(eq + 1, t + strlen(t));
		*ret_key = trim(t, eq);
		return 1;
	}
	return 0;
}
