/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The version of this build (src/version.c): the same string in the
 * `version` op's reply, in every log line and in the installer image's
 * org.opencontainers.image.version label.
 */
#ifndef FV_VERSION_H
#define FV_VERSION_H

extern const char fv_version[];

#endif
