/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The build's version: `git describe` at build time, or the VERSION file of
 * a source tree without git (a release tarball).  The Makefile passes it in
 * FV_VERSION and rebuilds this file alone when it changes.
 */
#include "fv/version.h"

#ifndef FV_VERSION
#define FV_VERSION "unknown"
#endif

const char fv_version[] = FV_VERSION;
