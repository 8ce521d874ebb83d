/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tiny unit-test harness.  Each tests/unit/test-*.c includes this file
 * once and defines its tests with TEST():
 *
 *	TEST(parse_simple)
 *	{
 *		uint64_t v;
 *
 *		CHECK_INT(fv_parse_u64("42", &v), 0);
 *		CHECK(v == 42);
 *	}
 *
 * Tests run in definition order.  A failed CHECK*() records file:line and
 * the test goes on; REQUIRE*() also ends the test at once.  SKIP("why")
 * ends a test as skipped.  The binary prints "N passed, N failed" (plus
 * ", N skipped") and exits 0 when nothing failed, 1 otherwise, and 77
 * (automake's "skipped") when every test skipped.  With CI=true a skip
 * counts as a failure (docs/test-lanes.md, "Skips"), except for the tests named in
 * UNIT_SKIP_OK (comma-separated): a known limit of where they run, such as
 * qemu-user without openat2() for the arm64 tests (deploy/static.mk), which
 * the caller names explicitly; those still print SKIP.
 *
 * Argument: a test name (or several) runs only those.
 */
#ifndef FV_UNIT_H
#define FV_UNIT_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/internal.h"

struct unit_test {
	const char *name;
	void (*fn)(void);
};

#define UNIT_MAX_TESTS 256

static struct unit_test unit_tests[UNIT_MAX_TESTS];
static unsigned int unit_ntests;
static unsigned int unit_cur_failed; /* failed checks in the running test */
static bool unit_cur_skipped;

static inline void unit_register(const char *name, void (*fn)(void))
{
	if (unit_ntests < UNIT_MAX_TESTS)
		unit_tests[unit_ntests++] = (struct unit_test){ name, fn };
}

#define TEST(name)                                                                                 \
	static void test_##name(void);                                                             \
	__attribute__((constructor)) static void unit_reg_##name(void)                             \
	{                                                                                          \
		unit_register(#name, test_##name);                                                 \
	}                                                                                          \
	static void test_##name(void)

static inline _printf_(3, 4) void unit_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	unit_cur_failed++;
	fprintf(stderr, "  FAIL %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Every CHECK evaluates to true when it passed, so it can guard follow-up checks. */
#define CHECK(cond)                                                                                \
	({                                                                                         \
		bool _ok = !!(cond);                                                               \
		if (!_ok)                                                                          \
			unit_fail(__FILE__, __LINE__, "%s", #cond);                                \
		_ok;                                                                               \
	})

#define CHECK_INT(a, b)                                                                            \
	({                                                                                         \
		long long _a = (long long)(a), _b = (long long)(b);                                \
		bool _ok = _a == _b;                                                               \
		if (!_ok)                                                                          \
			unit_fail(__FILE__, __LINE__, "%s == %s: got %lld, want %lld", #a, #b, _a, \
				  _b);                                                             \
		_ok;                                                                               \
	})

#define CHECK_U64(a, b)                                                                            \
	({                                                                                         \
		uint64_t _a = (uint64_t)(a), _b = (uint64_t)(b);                                   \
		bool _ok = _a == _b;                                                               \
		if (!_ok)                                                                          \
			unit_fail(__FILE__, __LINE__, "%s == %s: got %" PRIu64 ", want %" PRIu64,  \
				  #a, #b, _a, _b);                                                 \
		_ok;                                                                               \
	})

#define CHECK_STR(a, b)                                                                            \
	({                                                                                         \
		const char *_a = (a), *_b = (b);                                                   \
		bool _ok = _a && _b && strcmp(_a, _b) == 0;                                        \
		if (!_ok)                                                                          \
			unit_fail(__FILE__, __LINE__, "%s == %s: got '%s', want '%s'", #a, #b,     \
				  _a ? _a : "(null)", _b ? _b : "(null)");                         \
		_ok;                                                                               \
	})

/* @a contains @b */
#define CHECK_CONTAINS(a, b)                                                                       \
	({                                                                                         \
		const char *_a = (a), *_b = (b);                                                   \
		bool _ok = _a && _b && strstr(_a, _b);                                             \
		if (!_ok)                                                                          \
			unit_fail(__FILE__, __LINE__, "%s contains %s: got '%s', want '%s' in it", \
				  #a, #b, _a ? _a : "(null)", _b ? _b : "(null)");                 \
		_ok;                                                                               \
	})

#define REQUIRE(cond)                                                                              \
	do {                                                                                       \
		if (!CHECK(cond))                                                                  \
			return;                                                                    \
	} while (0)

#define REQUIRE_INT(a, b)                                                                          \
	do {                                                                                       \
		if (!CHECK_INT(a, b))                                                              \
			return;                                                                    \
	} while (0)

#define SKIP(why)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "  SKIP %s:%d: %s\n", __FILE__, __LINE__, (why));                  \
		unit_cur_skipped = true;                                                           \
		return;                                                                            \
	} while (0)

/* A fresh context with the message cleared, for the functions that report through fv_fail(). */
static inline void unit_ctx_reset(struct fv_ctx *cx)
{
	cx->message[0] = '\0';
	cx->detail[0] = '\0';
}


/* @name is listed in UNIT_SKIP_OK (comma-separated names) */
static bool unit_skip_ok(const char *name)
{
	const char *l = getenv("UNIT_SKIP_OK");
	size_t n = strlen(name);

	while (l && *l) {
		const char *e = strchr(l, ',');
		size_t len = e ? (size_t)(e - l) : strlen(l);

		if (len == n && strncmp(l, name, n) == 0)
			return true;
		l = e ? e + 1 : NULL;
	}
	return false;
}

int main(int argc, char **argv)
{
	unsigned int passed = 0, failed = 0, skipped = 0;
	const char *ci_env = getenv("CI");
	bool ci = ci_env && strcmp(ci_env, "true") == 0; /* docs/test-lanes.md, "Skips" */

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (unsigned int i = 0; i < unit_ntests; i++) {
		bool run = argc < 2;

		for (int a = 1; a < argc; a++)
			if (strcmp(argv[a], unit_tests[i].name) == 0)
				run = true;
		if (!run)
			continue;
		unit_cur_failed = 0;
		unit_cur_skipped = false;
		unit_tests[i].fn();
		fflush(stderr);
		if (unit_cur_failed) {
			failed++;
			printf("FAIL %s (%u check%s failed)\n", unit_tests[i].name, unit_cur_failed,
			       unit_cur_failed == 1 ? "" : "s");
		} else if (unit_cur_skipped && ci && !unit_skip_ok(unit_tests[i].name)) {
			failed++;
			printf("FAIL %s (skipped, and CI=true makes a skip a failure)\n",
			       unit_tests[i].name);
		} else if (unit_cur_skipped) {
			skipped++;
			printf("SKIP %s\n", unit_tests[i].name);
		} else {
			passed++;
			printf("ok   %s\n", unit_tests[i].name);
		}
	}
	if (skipped)
		printf("%u passed, %u failed, %u skipped\n", passed, failed, skipped);
	else
		printf("%u passed, %u failed\n", passed, failed);
	if (failed)
		return 1;
	return passed == 0 && skipped > 0 ? 77 : 0;
}

#endif
