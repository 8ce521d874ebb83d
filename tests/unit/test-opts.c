/* SPDX-License-Identifier: Apache-2.0 */
/* fv_opts_parse() and fv_opt(): the kubelet options JSON (contract §2). */
#include "unit.h"

static struct fv_ctx cx;

/* Parse @json into @o with a clean message; returns fv_opts_parse()'s result. */
static int parse(const char *json, struct fv_opts *o)
{
	unit_ctx_reset(&cx);
	return fv_opts_parse(&cx, json, o);
}

/* @json must be refused with -FV_ERR_BADOPT, a message containing @msg, and no object kept. */
static bool refused(const char *json, const char *msg, int line)
{
	struct fv_opts o;
	int r = parse(json, &o);
	bool ok = true;

	if (r != -FV_ERR_BADOPT) {
		unit_fail(__FILE__, line, "'%s': got %d, want -FV_ERR_BADOPT", json, r);
		ok = false;
	}
	if (!cx.message[0] || (msg && !strstr(cx.message, msg))) {
		unit_fail(__FILE__, line, "'%s': message '%s' lacks '%s'", json, cx.message,
			  msg ? msg : "(anything)");
		ok = false;
	}
	if (o.json) {
		unit_fail(__FILE__, line, "'%s': object kept after a failure", json);
		ok = false;
	}
	fv_opts_done(&o);
	return ok;
}

#define REFUSED(json, msg) refused((json), (msg), __LINE__)

TEST(go_style_compact)
{
	/* kubelet's json.Marshal of a map[string]string: sorted, compact, escaped */
	const char *json = "{\"file\":\"a\\u0026b\\u003cc\\u003e.img\",\"kubernetes.io/fsType\":"
			   "\"ext4\",\"kubernetes.io/pod.uid\":"
			   "\"0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\","
			   "\"kubernetes.io/pvOrVolumeName\":\"pv1\",\"kubernetes.io/readwrite\":"
			   "\"rw\",\"sep\":\"x\\u2028y\",\"size\":\"64Mi\"}";
	struct fv_opts o;
	const char *v = NULL;

	REQUIRE_INT(parse(json, &o), 0);
	CHECK_STR(cx.message, "");
	CHECK_STR(o.fstype, "ext4");
	CHECK_STR(o.volume, "pv1");
	CHECK_STR(o.pod_uid, "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab");
	CHECK(!o.readonly);
	CHECK(!o.has_fsgroup);
	if (CHECK_INT(fv_opt(&cx, &o, "file", &v), 0))
		CHECK_STR(v, "a&b<c>.img");
	if (CHECK_INT(fv_opt(&cx, &o, "sep", &v), 0))
		CHECK_STR(v, "x\xe2\x80\xa8y"); /* U+2028 as UTF-8 */
	if (CHECK_INT(fv_opt(&cx, &o, "size", &v), 0))
		CHECK_STR(v, "64Mi");
	fv_opts_done(&o);
	CHECK(o.json == NULL);
}

TEST(unicode_values)
{
	const char *json = "{\"a\":\"gr\xc3\xbc\xc3\x9f \xe6\x97\xa5\xe6\x9c\xac\","
			   "\"b\":\"\\u00fc\\ud83d\\ude00\","
			   "\"c\":\"tab\\there\\\\ \\\"q\\\" \\/\"}";
	struct fv_opts o;
	const char *v = NULL;

	REQUIRE_INT(parse(json, &o), 0);
	if (CHECK_INT(fv_opt(&cx, &o, "a", &v), 0))
		CHECK_STR(v, "gr\xc3\xbc\xc3\x9f \xe6\x97\xa5\xe6\x9c\xac");
	if (CHECK_INT(fv_opt(&cx, &o, "b", &v), 0))
		CHECK_STR(v, "\xc3\xbc\xf0\x9f\x98\x80"); /* surrogate pair -> U+1F600 */
	if (CHECK_INT(fv_opt(&cx, &o, "c", &v), 0))
		CHECK_STR(v, "tab\there\\ \"q\" /");
	fv_opts_done(&o);
}

TEST(keys_any_order)
{
	const char *a = "{\"kubernetes.io/readwrite\":\"ro\",\"size\":\"1Gi\","
			"\"kubernetes.io/fsType\":\"xfs\",\"file\":\"x.img\","
			"\"kubernetes.io/pvOrVolumeName\":\"pv9\"}";
	const char *b = "{\"kubernetes.io/pvOrVolumeName\":\"pv9\",\"file\":\"x.img\","
			"\"kubernetes.io/fsType\":\"xfs\",\"size\":\"1Gi\","
			"\"kubernetes.io/readwrite\":\"ro\"}";
	const char *docs[] = { a, b };

	for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
		struct fv_opts o;
		const char *v = NULL;

		REQUIRE_INT(parse(docs[i], &o), 0);
		CHECK_STR(o.fstype, "xfs");
		CHECK_STR(o.volume, "pv9");
		CHECK(o.readonly);
		CHECK(o.pod_uid == NULL);
		if (CHECK_INT(fv_opt(&cx, &o, "file", &v), 0))
			CHECK_STR(v, "x.img");
		fv_opts_done(&o);
	}
}

TEST(unknown_keys_ignored)
{
	const char *json = "{\"n\":1,\"f\":1.5,\"t\":true,\"z\":null,\"arr\":[1,\"x\",{}],"
			   "\"obj\":{\"deep\":{\"er\":[null]}},"
			   "\"kubernetes.io/secret/key\":\"c2Vj\","
			   "\"kubernetes.io/fsType\":\"ext4\"}";
	struct fv_opts o;
	const char *v = "unchanged";

	REQUIRE_INT(parse(json, &o), 0);
	CHECK_STR(cx.message, "");
	CHECK_STR(o.fstype, "ext4");
	/* ... but reading one of them as a driver option is refused */
	CHECK_INT(fv_opt(&cx, &o, "n", &v), -FV_ERR_BADOPT);
	CHECK_CONTAINS(cx.message, "'n'");
	CHECK_STR(v, "unchanged");
	fv_opts_done(&o);
}

TEST(readwrite)
{
	struct fv_opts o;

	REQUIRE_INT(parse("{\"kubernetes.io/readwrite\":\"ro\"}", &o), 0);
	CHECK(o.readonly);
	fv_opts_done(&o);
	REQUIRE_INT(parse("{\"kubernetes.io/readwrite\":\"rw\"}", &o), 0);
	CHECK(!o.readonly);
	fv_opts_done(&o);
	REQUIRE_INT(parse("{}", &o), 0);
	CHECK(!o.readonly);
	CHECK(o.fstype == NULL && o.volume == NULL && o.pod_uid == NULL);
	fv_opts_done(&o);
	/* "" counts as absent */
	REQUIRE_INT(parse("{\"kubernetes.io/readwrite\":\"\"}", &o), 0);
	CHECK(!o.readonly);
	fv_opts_done(&o);
	REFUSED("{\"kubernetes.io/readwrite\":\"bogus\"}", "'bogus'");
	REFUSED("{\"kubernetes.io/readwrite\":\"RO\"}", "kubernetes.io/readwrite");
	REFUSED("{\"kubernetes.io/readwrite\":\"ro \"}", "kubernetes.io/readwrite");
}

TEST(fstype_empty_is_null)
{
	struct fv_opts o;

	REQUIRE_INT(parse("{\"kubernetes.io/fsType\":\"\"}", &o), 0);
	CHECK(o.fstype == NULL);
	fv_opts_done(&o);
	REQUIRE_INT(parse("{\"kubernetes.io/fsType\":\"ext4\"}", &o), 0);
	CHECK_STR(o.fstype, "ext4");
	fv_opts_done(&o);
}

TEST(fsgroup)
{
	static const char *const bad[] = { "-1",	  "1e3", "abc", "4294967296", "4294967295",
					   "18446744073709551616", "042", " 42", "42 ", "+42",
					   "0x10" };
	struct fv_opts o;

	REQUIRE_INT(parse("{\"kubernetes.io/mounterArgs.FsGroup\":\"42\"}", &o), 0);
	CHECK(o.has_fsgroup);
	CHECK_U64(o.fsgroup, 42);
	fv_opts_done(&o);
	REQUIRE_INT(parse("{\"kubernetes.io/mounterArgs.FsGroup\":\"0\"}", &o), 0);
	CHECK(o.has_fsgroup);
	CHECK_U64(o.fsgroup, 0);
	fv_opts_done(&o);
	REQUIRE_INT(parse("{\"kubernetes.io/mounterArgs.FsGroup\":\"4294967294\"}", &o), 0);
	CHECK_U64(o.fsgroup, 4294967294U);
	fv_opts_done(&o);
	REQUIRE_INT(parse("{\"kubernetes.io/mounterArgs.FsGroup\":\"\"}", &o), 0);
	CHECK(!o.has_fsgroup);
	fv_opts_done(&o);

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char json[128];

		snprintf(json, sizeof(json), "{\"kubernetes.io/mounterArgs.FsGroup\":\"%s\"}",
			 bad[i]);
		REFUSED(json, "FsGroup");
	}
}

TEST(known_keys_must_be_strings)
{
	static const char *const keys[] = { "kubernetes.io/fsType", "kubernetes.io/pvOrVolumeName",
					    "kubernetes.io/pod.uid", "kubernetes.io/readwrite",
					    "kubernetes.io/mounterArgs.FsGroup" };
	static const char *const vals[] = { "1", "true", "false", "[]", "[\"ro\"]", "{}", "1.5" };

	for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
		for (size_t v = 0; v < ARRAY_SIZE(vals); v++) {
			char json[256], want[128];

			snprintf(json, sizeof(json), "{\"%s\":%s}", keys[k], vals[v]);
			snprintf(want, sizeof(want), "'%s' must be a string", keys[k]);
			REFUSED(json, want);
		}
	}
}

TEST(malformed)
{
	REFUSED("{\"kubernetes.io/fsType\":\"ext4\"", NULL); /* truncated */
	REFUSED("{\"a\":", NULL);
	REFUSED("{\"a\":\"b", NULL);
	REFUSED("{", NULL);
	REFUSED("{}x", "options"); /* trailing garbage */
	REFUSED("{} x", "options");
	REFUSED("{}{}", "options"); /* two documents */
	REFUSED("{\"a\":\"b\"}{\"c\":\"d\"}", "options");
	REFUSED("[]", "must be a JSON object");
	REFUSED("[{\"a\":\"b\"}]", "must be a JSON object");
	REFUSED("\"string\"", "must be a JSON object");
	REFUSED("42", NULL);
	REFUSED("null", NULL);
	REFUSED("", NULL);
	REFUSED("   ", NULL);
	REFUSED("{\"a\":\"\xff\xfe\"}", NULL);		/* invalid UTF-8 */
	REFUSED("{\"a\":\"\xc3\"}", NULL);		/* truncated UTF-8 sequence */
	REFUSED("{\"a\":'b'}", NULL);			/* not JSON quotes */
	REFUSED("{\"a\":\"b\",}", NULL);		/* trailing comma */
	REFUSED("{a:\"b\"}", NULL);			/* unquoted key */
	REFUSED("{\"a\":\"b\\x\"}", NULL);		/* bad escape */
}

TEST(whitespace_around_object_is_fine)
{
	struct fv_opts o;

	/* not what kubelet sends, but valid JSON: one object, nothing after it */
	REQUIRE_INT(parse(" {\"kubernetes.io/fsType\" : \"ext4\"} ", &o), 0);
	CHECK_STR(o.fstype, "ext4");
	fv_opts_done(&o);
}

TEST(large_document_refused)
{
	size_t n = 1024 * 1024 + 64;
	char *big = malloc(n + 1);
	struct fv_opts o;

	REQUIRE(big != NULL);
	memset(big, ' ', n);
	memcpy(big, "{}", 2);
	big[n] = '\0';
	unit_ctx_reset(&cx);
	CHECK_INT(fv_opts_parse(&cx, big, &o), -FV_ERR_BADOPT);
	CHECK_CONTAINS(cx.message, "larger than");
	CHECK(o.json == NULL);
	free(big);
}

TEST(fv_opt_semantics)
{
	const char *json = "{\"s\":\"val\",\"e\":\"\",\"n\":7,\"b\":false,\"o\":{},\"a\":[]}";
	struct fv_opts o;
	const char *v;

	REQUIRE_INT(parse(json, &o), 0);
	v = NULL;
	CHECK_INT(fv_opt(&cx, &o, "s", &v), 0);
	CHECK_STR(v, "val");

	v = "untouched";
	CHECK_INT(fv_opt(&cx, &o, "e", &v), 1); /* "" is absent */
	CHECK_STR(v, "untouched");
	CHECK_INT(fv_opt(&cx, &o, "missing", &v), 1);
	CHECK_STR(v, "untouched");
	CHECK_STR(cx.message, "");

	static const char *const nonstr[] = { "n", "b", "o", "a" };

	for (size_t i = 0; i < ARRAY_SIZE(nonstr); i++) {
		char want[32];

		unit_ctx_reset(&cx);
		CHECK(fv_opt(&cx, &o, nonstr[i], &v) < 0);
		snprintf(want, sizeof(want), "'%s'", nonstr[i]);
		CHECK_CONTAINS(cx.message, want);
		CHECK_STR(v, "untouched");
	}
	fv_opts_done(&o);
}

TEST(done_is_idempotent)
{
	struct fv_opts o;

	REQUIRE_INT(parse("{}", &o), 0);
	fv_opts_done(&o);
	fv_opts_done(&o); /* second call on a cleared struct: no double put */
	CHECK(o.json == NULL);
}

/* A NUL (\u0000) anywhere is refused, naming the key (issue 9 item 5). */
TEST(nul_refused_everywhere)
{
	CHECK(REFUSED("{\"kubernetes.io/fsType\":\"ext4\\u0000x\"}", "'kubernetes.io/fsType'"));
	CHECK(REFUSED("{\"image\":\"ok.img\\u0000../../etc/passwd\"}", "'image'"));
	CHECK(REFUSED("{\"iqn\":\"iqn.2024-01.io.x:y\\u0000\"}", "NUL"));
	CHECK(REFUSED("{\"kubernetes.io/readwrite\":\"\\u0000\"}", "'kubernetes.io/readwrite'"));
	/* keys we do not read, nested values, and keys themselves */
	CHECK(REFUSED("{\"other\":[\"a\\u0000\"]}", "'other'"));
	CHECK(REFUSED("{\"other\":{\"x\":\"\\u0000\"}}", "'other'"));
	CHECK(REFUSED("{\"ima\\u0000ge\":\"x\"}", "key"));
	CHECK(REFUSED("{\"a\":\"1\",\"\\u0000\":\"x\"}", "key"));
	/* the message quotes no raw control character, and the escape is not mistaken */
	CHECK(REFUSED("{\"a\\nb\":\"\\u0000\"}", "NUL"));
	CHECK(strchr(cx.message, '\n') == NULL);
}

TEST(escaped_backslash_is_not_nul)
{
	struct fv_opts o;
	const char *v = NULL;

	CHECK_INT(parse("{\"image\":\"a\\\\u0000b\"}", &o), 0);
	CHECK_INT(fv_opt(&cx, &o, "image", &v), 0);
	CHECK_STR(v, "a\\u0000b");
	fv_opts_done(&o);
}
