/* SPDX-License-Identifier: Apache-2.0 */
/* fv_kv_next() (config and credentials files) and fv_host_check() (nfs server, iSCSI portals). */
#include "unit.h"
#include "fv/kv.h"
#include "fv/util.h"

/* Parse @text; the keys and values joined as "k=v;" into @out.  Returns the final status. */
static int parse(const char *text, size_t max_line, char *out, size_t len, unsigned int *line)
{
	char buf[512], *k, *v;
	struct fv_kv it;
	size_t n = strlen(text);
	int r;

	memcpy(buf, text, n + 1);
	out[0] = '\0';
	fv_kv_init(&it, buf, n, max_line);
	while ((r = fv_kv_next(&it, &k, &v)) > 0) {
		size_t o = strlen(out);

		snprintf(out + o, len - o, "%s=%s;", k, v);
	}
	*line = it.line;
	return r;
}

TEST(kv_lines)
{
	char out[512];
	unsigned int line;

	CHECK_INT(parse("a = 1\n# c = 2\n\n  b=two words  \r\n\tc =\n", 100, out, sizeof(out), &line),
		  0);
	CHECK_STR(out, "a=1;b=two words;c=;");
	CHECK_INT(parse("last = no newline", 100, out, sizeof(out), &line), 0);
	CHECK_STR(out, "last=no newline;");
	CHECK_INT(parse("  # indented comment\nx = a=b\n", 100, out, sizeof(out), &line), 0);
	CHECK_STR(out, "x=a=b;");
	CHECK_INT(parse("", 100, out, sizeof(out), &line), 0);
	CHECK_STR(out, "");
}

TEST(kv_errors_name_the_line)
{
	char out[512];
	unsigned int line;

	CHECK_INT(parse("a = 1\n\nno equals sign\nb = 2\n", 100, out, sizeof(out), &line), -EINVAL);
	CHECK_INT(line, 3);
	CHECK_INT(parse("a = 1\nb = 0123456789\n", 8, out, sizeof(out), &line), -E2BIG);
	CHECK_INT(line, 2);
	{
		char buf[] = "a = 1\nb = x\0y\n";
		struct fv_kv it;
		char *k, *v;

		fv_kv_init(&it, buf, sizeof(buf) - 1, 100);
		CHECK_INT(fv_kv_next(&it, &k, &v), 1);
		CHECK_INT(fv_kv_next(&it, &k, &v), -EILSEQ);
		CHECK_INT(it.line, 2);
	}
}

TEST(host_check)
{
	CHECK_INT(fv_host_check("nfs.example.com"), FV_HOST_NAME);
	CHECK_INT(fv_host_check("a-b.c"), FV_HOST_NAME);
	CHECK_INT(fv_host_check("10.0.0.1"), FV_HOST_IPV4);
	CHECK_INT(fv_host_check("[fd00::1]"), FV_HOST_IPV6);
	CHECK_INT(fv_host_check("[::ffff:10.0.0.1]"), FV_HOST_IPV6);
	CHECK_INT(fv_host_check("fd00::1"), -EAFNOSUPPORT);
	CHECK_INT(fv_host_check("10.1"), -EINVAL);	    /* short forms are not addresses */
	CHECK_INT(fv_host_check("300.0.0.1"), -EINVAL);
	CHECK_INT(fv_host_check("[fd00::1%eth0]"), -EINVAL); /* no zones */
	CHECK_INT(fv_host_check("[fd00::1"), -EINVAL);
	CHECK_INT(fv_host_check(""), -EINVAL);
	CHECK_INT(fv_host_check("-a.b"), -EINVAL);
	CHECK_INT(fv_host_check("a-.b"), -EINVAL);
	CHECK_INT(fv_host_check("a..b"), -EINVAL);
	CHECK_INT(fv_host_check("a_b"), -EINVAL);
	CHECK_INT(fv_host_check("a b"), -EINVAL);
	CHECK_INT(fv_host_check("host,opt=1"), -EINVAL);
	{
		char label[70], name[300];

		memset(label, 'a', 64);
		label[64] = '\0';
		CHECK_INT(fv_host_check(label), -EINVAL);
		label[63] = '\0';
		CHECK_INT(fv_host_check(label), FV_HOST_NAME);
		memset(name, 'a', 254);
		for (int i = 50; i < 254; i += 50)
			name[i] = '.';
		name[254] = '\0';
		CHECK_INT(fv_host_check(name), -EINVAL);
		name[253] = '\0';
		CHECK_INT(fv_host_check(name), FV_HOST_NAME);
	}
}

