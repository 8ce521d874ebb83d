/* SPDX-License-Identifier: Apache-2.0 */
/* fv_parse_u64() and fv_parse_quantity(): strict numbers from the options. */
#include "unit.h"
#include "fv/util.h"

#define SENTINEL 0xdeadbeefULL

static void want_q(const char *s, uint64_t v, int line)
{
	uint64_t got = SENTINEL;
	int r = fv_parse_quantity(s, &got);

	if (r != 0 || got != v)
		unit_fail(__FILE__, line, "quantity '%s': got %d/%" PRIu64 ", want 0/%" PRIu64,
			  s, r, got, v);
}

/* Refused with @err (or either -EINVAL/-ERANGE when @err is 0); *ret untouched. */
static void bad_q(const char *s, int err, int line)
{
	uint64_t got = SENTINEL;
	int r = fv_parse_quantity(s, &got);

	if (err ? r != err : (r != -EINVAL && r != -ERANGE))
		unit_fail(__FILE__, line, "quantity '%s': got %d (value %" PRIu64 "), want %d", s,
			  r, got, err ? err : -EINVAL);
	if (got != SENTINEL)
		unit_fail(__FILE__, line, "quantity '%s': result written on failure", s);
}

static void want_u(const char *s, uint64_t v, int line)
{
	uint64_t got = SENTINEL;
	int r = fv_parse_u64(s, &got);

	if (r != 0 || got != v)
		unit_fail(__FILE__, line, "u64 '%s': got %d/%" PRIu64 ", want 0/%" PRIu64, s, r,
			  got, v);
}

static void bad_u(const char *s, int err, int line)
{
	uint64_t got = SENTINEL;
	int r = fv_parse_u64(s, &got);

	if (r != err)
		unit_fail(__FILE__, line, "u64 '%s': got %d, want %d", s, r, err);
	if (got != SENTINEL)
		unit_fail(__FILE__, line, "u64 '%s': result written on failure", s);
}

#define WANT_Q(s, v) want_q((s), (v), __LINE__)
#define BAD_Q(s, e) bad_q((s), (e), __LINE__)
#define WANT_U(s, v) want_u((s), (v), __LINE__)
#define BAD_U(s, e) bad_u((s), (e), __LINE__)

TEST(quantity_binary_suffixes)
{
	WANT_Q("1Ki", 1024);
	WANT_Q("64Mi", 64ULL << 20);
	WANT_Q("1Gi", 1ULL << 30);
	WANT_Q("3Ti", 3ULL << 40);
	WANT_Q("2Pi", 2ULL << 50);
	WANT_Q("15Ei", 15ULL << 60);
	WANT_Q("1.5Gi", 1610612736ULL);
	WANT_Q("0.5Ki", 512);
	WANT_Q("0.25Mi", 262144);
}

TEST(quantity_decimal_suffixes)
{
	WANT_Q("1k", 1000);
	WANT_Q("500M", 500000000ULL);
	WANT_Q("3G", 3000000000ULL);
	WANT_Q("2T", 2000000000000ULL);
	WANT_Q("1P", 1000000000000000ULL);
	WANT_Q("18E", 18000000000000000000ULL);
	WANT_Q("1.5k", 1500);
	WANT_Q("0.001M", 1000);
}

TEST(quantity_plain_and_exponent)
{
	WANT_Q("0", 0);
	WANT_Q("1048576", 1048576);
	WANT_Q("2e9", 2000000000ULL);
	WANT_Q("2E9", 2000000000ULL);
	WANT_Q("1.5e3", 1500);
	WANT_Q("1e0", 1);
	WANT_Q("1e19", 10000000000000000000ULL);
	WANT_Q("18446744073709551615", UINT64_MAX);
}

TEST(quantity_refused)
{
	BAD_Q("", -EINVAL);
	BAD_Q("1.1", -EINVAL);	  /* not a whole number of bytes */
	BAD_Q("0.1Ki", -EINVAL);  /* 102.4 bytes */
	BAD_Q("1.0000001k", -EINVAL);
	BAD_Q("-1", -EINVAL);
	BAD_Q("+1", -EINVAL);
	BAD_Q("1 Gi", -EINVAL);
	BAD_Q(" 1Gi", -EINVAL);
	BAD_Q("1Gi ", -EINVAL);
	BAD_Q("1Gib", -EINVAL);
	BAD_Q("1GB", -EINVAL);
	BAD_Q("1G1", -EINVAL);
	BAD_Q("1gi", -EINVAL);
	BAD_Q("1K", -EINVAL);	  /* Kubernetes spells it "k" */
	BAD_Q("1m", -EINVAL);	  /* milli: never whole bytes here */
	BAD_Q("Gi", -EINVAL);
	BAD_Q(".", -EINVAL);
	BAD_Q("1.", -EINVAL);
	BAD_Q("1.Gi", -EINVAL);
	BAD_Q("1..5", -EINVAL);
	BAD_Q("1.5.5", -EINVAL);
	BAD_Q("1e", -EINVAL);
	BAD_Q("1e-3", -EINVAL);
	BAD_Q("1e3Ki", -EINVAL);
	BAD_Q("0x10", -EINVAL);
	BAD_Q("abc", -EINVAL);
}

TEST(quantity_overflow)
{
	BAD_Q("16Ei", -ERANGE);			/* 2^64 */
	BAD_Q("18446744073709551616", -ERANGE); /* UINT64_MAX + 1 */
	BAD_Q("19E", -ERANGE);
	BAD_Q("2e19", -ERANGE);
	BAD_Q("1e20", 0);
	BAD_Q("99999999999999999999999999999999", -ERANGE);
	BAD_Q("999999999999999999999999999999999999999999999999999999999999999", 0);
	BAD_Q("99999999999999999999999999999999999999999999999999999999999999999999Ki", 0);
	/*
	 * Products that do not fit even the 128-bit intermediate must not wrap
	 * around into a small, "valid" size: 2^68 Ei is 2^128 bytes.
	 */
	BAD_Q("295147905179352825856Ei", 0);	/* 2^68 * 2^60 = 2^128 -> 0 if it wraps */
	BAD_Q("295147905179352825857Ei", 0);	/* 2^128 + 2^60 -> 2^60 if it wraps */
	BAD_Q("1000000000000000000000e19", 0);
	/* the fraction's divisor must not wrap either (10^40 > 2^128) */
	BAD_Q("0.0000000000000000000000000000000000000001Ki", 0);
	BAD_Q("0.00000000000000000000000000000000000000000000000001", 0);
}

TEST(u64_accepted)
{
	WANT_U("0", 0);
	WANT_U("1", 1);
	WANT_U("42", 42);
	WANT_U("4294967296", 4294967296ULL);
	WANT_U("18446744073709551615", UINT64_MAX);
}

TEST(u64_refused)
{
	BAD_U("", -EINVAL);
	BAD_U(NULL, -EINVAL);
	BAD_U("00", -EINVAL);
	BAD_U("01", -EINVAL);
	BAD_U("007", -EINVAL);
	BAD_U("-1", -EINVAL);
	BAD_U("+1", -EINVAL);
	BAD_U(" 1", -EINVAL);
	BAD_U("1 ", -EINVAL);
	BAD_U("1e3", -EINVAL);
	BAD_U("1.0", -EINVAL);
	BAD_U("0x1", -EINVAL);
	BAD_U("abc", -EINVAL);
	BAD_U("18446744073709551616", -ERANGE);
	BAD_U("18446744073709551620", -ERANGE);
	BAD_U("99999999999999999999999", -ERANGE);
}
