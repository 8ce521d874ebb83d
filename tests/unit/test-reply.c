/* SPDX-License-Identifier: Apache-2.0 */
/* fv_reply_format() / fv_reply_write(): the one document kubelet reads (contract §1.4). */
#include <json-c/json.h>

#include "unit.h"

/* Format @r and compare with @want exactly; frees the result. */
static void want_reply(const struct fv_reply *r, const char *want, int line)
{
	char *s = fv_reply_format(r);

	if (!s || strcmp(s, want) != 0)
		unit_fail(__FILE__, line, "reply: got '%s', want '%s'", s ? s : "(null)", want);
	free(s);
}

#define WANT(r, want) want_reply((r), (want), __LINE__)

TEST(status_words)
{
	CHECK_STR(fv_status_word(FV_SUCCESS), "Success");
	CHECK_STR(fv_status_word(FV_FAILURE), "Failure");
	CHECK_STR(fv_status_word(FV_NOT_SUPPORTED), "Not supported");
}

TEST(plain_statuses)
{
	WANT(&((struct fv_reply){ .status = FV_SUCCESS }), "{\"status\":\"Success\"}\n");
	WANT(&((struct fv_reply){ .status = FV_NOT_SUPPORTED }),
	     "{\"status\":\"Not supported\"}\n");
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "boom" }),
	     "{\"status\":\"Failure\",\"message\":\"boom\"}\n");
	/* an empty message is left out, not printed as "" */
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "" }),
	     "{\"status\":\"Failure\"}\n");
}

TEST(device_and_attached)
{
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .device = "/dev/loop3" }),
	     "{\"status\":\"Success\",\"device\":\"/dev/loop3\"}\n");
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .has_attached = true, .attached = true }),
	     "{\"status\":\"Success\",\"attached\":true}\n");
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .has_attached = true, .attached = false }),
	     "{\"status\":\"Success\",\"attached\":false}\n");
	/* without has_attached nothing is said, even when attached is set */
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .attached = true }),
	     "{\"status\":\"Success\"}\n");
}

TEST(capabilities)
{
	struct fv_caps all = { true, true, true, true, true };
	struct fv_caps loop = { .attach = true, .fsgroup = true, .requires_fs_resize = true };
	struct fv_caps none = { 0 };

	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .caps = &loop }),
	     "{\"status\":\"Success\",\"capabilities\":{\"attach\":true,\"selinuxRelabel\":false,"
	     "\"supportsMetrics\":false,\"fsGroup\":true,\"requiresFSResize\":true}}\n");
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .caps = &all }),
	     "{\"status\":\"Success\",\"capabilities\":{\"attach\":true,\"selinuxRelabel\":true,"
	     "\"supportsMetrics\":true,\"fsGroup\":true,\"requiresFSResize\":true}}\n");
	/* all false is still all five keys: kubelet's defaults are true */
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .caps = &none }),
	     "{\"status\":\"Success\",\"capabilities\":{\"attach\":false,\"selinuxRelabel\":false,"
	     "\"supportsMetrics\":false,\"fsGroup\":false,\"requiresFSResize\":false}}\n");
}

static void roundtrip(const char *msg, int line)
{
	struct fv_reply r = { .status = FV_FAILURE, .message = msg, .device = "/dev/loop0" };
	char *s = fv_reply_format(&r);
	json_object *o = NULL, *v;
	struct json_tokener *tok;
	size_t len;

	if (!s) {
		unit_fail(__FILE__, line, "format failed");
		return;
	}
	len = strlen(s);
	/* exactly one trailing newline, none inside (compact) */
	if (len < 2 || s[len - 1] != '\n' || memchr(s, '\n', len - 1))
		unit_fail(__FILE__, line, "not one line ending in one newline: '%s'", s);
	if (strstr(s, "\\/"))
		unit_fail(__FILE__, line, "'/' escaped as '\\/': '%s'", s);
	tok = json_tokener_new();
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, s, (int)len - 1);
	if (!o || json_tokener_get_parse_end(tok) != len - 1) {
		unit_fail(__FILE__, line, "not one strict JSON document: '%s'", s);
	} else {
		if (!json_object_object_get_ex(o, "message", &v) ||
		    strcmp(json_object_get_string(v), msg) != 0)
			unit_fail(__FILE__, line, "message did not round-trip: '%s'", s);
		if (!json_object_object_get_ex(o, "status", &v) ||
		    strcmp(json_object_get_string(v), "Failure") != 0)
			unit_fail(__FILE__, line, "status did not round-trip: '%s'", s);
		if (!json_object_object_get_ex(o, "device", &v) ||
		    strcmp(json_object_get_string(v), "/dev/loop0") != 0)
			unit_fail(__FILE__, line, "device did not round-trip: '%s'", s);
	}
	json_object_put(o);
	json_tokener_free(tok);
	free(s);
}

TEST(message_escaping)
{
	roundtrip("mount of 'srv:/exp' on '/var/lib/kubelet/pods/x' failed: \"quoted\" \\ back",
		  __LINE__);
	roundtrip("line one\nline two\r\n\ttabbed", __LINE__);
	roundtrip("control \x01\x1f and del \x7f", __LINE__);
	roundtrip("unicode gr\xc3\xbc\xc3\x9f \xe2\x80\xa8 \xf0\x9f\x98\x80", __LINE__);
	roundtrip("</script> & <b>", __LINE__);
	roundtrip("/", __LINE__);

	/* the slash is written as it is */
	struct fv_reply r = { .status = FV_FAILURE, .message = "a/b \"c\"\n" };
	char *s = fv_reply_format(&r);

	CHECK_STR(s, "{\"status\":\"Failure\",\"message\":\"a/b \\\"c\\\"\\n\"}\n");
	free(s);
}

TEST(long_message)
{
	char msg[FV_MESSAGE_MAX * 2];

	memset(msg, 'm', sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	roundtrip(msg, __LINE__);
}

/* fv_reply_write() writes the same bytes and maps the status to the exit code. */
static void want_write(const struct fv_reply *r, int code, int line)
{
	char buf[4096], *want = fv_reply_format(r);
	int p[2], rc;
	ssize_t n;

	if (!want || pipe(p) < 0) {
		unit_fail(__FILE__, line, "setup failed");
		free(want);
		return;
	}
	rc = fv_reply_write(p[1], r);
	close(p[1]);
	n = read(p[0], buf, sizeof(buf) - 1);
	close(p[0]);
	buf[n > 0 ? n : 0] = '\0';
	if (rc != code)
		unit_fail(__FILE__, line, "exit code %d, want %d", rc, code);
	if (strcmp(buf, want) != 0)
		unit_fail(__FILE__, line, "wrote '%s', want '%s'", buf, want);
	free(want);
}

TEST(write_and_exit_code)
{
	struct fv_caps caps = { .attach = true };

	want_write(&((struct fv_reply){ .status = FV_SUCCESS, .caps = &caps }), 0, __LINE__);
	want_write(&((struct fv_reply){ .status = FV_NOT_SUPPORTED }), 0, __LINE__);
	want_write(&((struct fv_reply){ .status = FV_FAILURE, .message = "x" }), 1, __LINE__);
	want_write(&((struct fv_reply){ .status = FV_FAILURE }), 1, __LINE__);
}

/* Replies are valid UTF-8 whatever a message quotes (issue 9 item 5): invalid bytes become U+FFFD. */
TEST(invalid_utf8_replaced)
{
	/* a lone continuation byte, a truncated sequence, an overlong '/', a surrogate, > U+10FFFF */
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "dir '/a\x80z'" }),
	     "{\"status\":\"Failure\",\"message\":\"dir '/a\xef\xbf\xbdz'\"}\n");
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "x\xe2\x82" }),
	     "{\"status\":\"Failure\",\"message\":\"x\xef\xbf\xbd\"}\n");
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "\xc0\xaf" }),
	     "{\"status\":\"Failure\",\"message\":\"\xef\xbf\xbd\xef\xbf\xbd\"}\n");
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "\xed\xa0\x80!" }),
	     "{\"status\":\"Failure\",\"message\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!\"}\n");
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "\xf4\x90\x80\x80" }),
	     "{\"status\":\"Failure\",\"message\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"}\n");
	WANT(&((struct fv_reply){ .status = FV_SUCCESS, .device = "/dev/\xff" }),
	     "{\"status\":\"Success\",\"device\":\"/dev/\xef\xbf\xbd\"}\n");
	/* valid text passes unchanged: 2, 3 and 4 byte sequences, control characters escaped */
	WANT(&((struct fv_reply){ .status = FV_FAILURE, .message = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x92\xbe\t" }),
	     "{\"status\":\"Failure\",\"message\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x92\xbe\\t\"}\n");
}

TEST(utf8_fix_bounds)
{
	char out[8];

	/* truncation never splits a character, the result is always terminated */
	CHECK_INT((int)fv_utf8_fix("\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac", 9, out, sizeof(out)), 6);
	CHECK_STR(out, "\xe2\x82\xac\xe2\x82\xac");
	CHECK_INT((int)fv_utf8_fix("ab\xff", 3, out, 5), 2);
	CHECK_STR(out, "ab");
	CHECK_INT((int)fv_utf8_fix("ab\xff", 3, out, 6), 5);
	CHECK_STR(out, "ab\xef\xbf\xbd");
}
