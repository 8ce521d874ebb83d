/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The op layer's boundary, stubbed for the CSI service fuzz targets
 * (tests/fuzz/op-stub.c, tests/fuzz/README.md): what csi/'s service files
 * call below them (the op runner, the config load, the locks, the log,
 * lib/'s image, owner-directory and copy calls) answered from a script of
 * fuzz input bytes, deterministically: no mount, no file made, no helper.
 */
#ifndef FV_FUZZ_OP_STUB_H
#define FV_FUZZ_OP_STUB_H

#include <stddef.h>
#include <stdint.h>

struct fv_driver;

/* The drivers' tables as the profile reads them (their slots abort when called directly). */
extern const struct fv_driver stub_driver_loop, stub_driver_nfs, stub_driver_iscsi;

/* Once: the directory the stubbed descriptors name (made and removed at once: empty for good). */
void stub_init(void);

/* Before a call: the stubs answer from the @n bytes of @script, then success. */
void stub_begin(const uint8_t *script, size_t n);

/* After it: aborts when a lock taken is still held. */
void stub_end(void);

/* A finding: "<who>: <message>" on stderr, then abort() (libFuzzer keeps the input). */
_Noreturn void stub_die(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
