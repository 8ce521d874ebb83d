/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Flags and timestamps one thread sets and others read (stop, quit, the
 * health heartbeat, leadership): whole ints, read and written atomically, so
 * the threads need no lock for them and ThreadSanitizer sees no race.
 */
#ifndef FVP_FLAG_H
#define FVP_FLAG_H

static inline int fvp_flag_get(const volatile int *f)
{
	return __atomic_load_n(f, __ATOMIC_ACQUIRE);
}

static inline void fvp_flag_set(volatile int *f, int v)
{
	__atomic_store_n(f, v, __ATOMIC_RELEASE);
}

#endif
