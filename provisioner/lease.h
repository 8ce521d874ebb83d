/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go's
 * leaderelection package does it (which sig-storage-lib-external-provisioner
 * turns on by default):
 *
 * - a candidate reads the Lease every retry period; it takes it when there
 *   is none (create), when it is released (empty holderIdentity), or when
 *   the record has not changed for leaseDurationSeconds *as seen by this
 *   process's own monotonic clock* (never by comparing the holder's
 *   renewTime with our wall clock: clocks differ between nodes);
 * - every write is an update carrying the resourceVersion read, so of two
 *   candidates exactly one wins (the other gets 409 Conflict);
 * - the leader renews every retry period; when it has not managed to for
 *   the renew deadline (shorter than the lease duration), it stops at once
 *   (the process exits), before any other candidate can take over;
 * - on a clean shutdown the leader releases the Lease (empty holder, a
 *   duration of 1 s: client-go's ReleaseOnCancel) so the next one starts
 *   without waiting out the lease.
 */
#ifndef FVP_LEASE_H
#define FVP_LEASE_H

#include <stdbool.h>

struct fv_kube;

struct fvp_lease_config {
	const char *ns, *name, *identity;
	unsigned int duration_s;       /* leaseDurationSeconds (15) */
	unsigned int renew_deadline_s; /* the leader gives up after this without a renewal (10) */
	unsigned int retry_s;	       /* between tries (2) */
	volatile int *heartbeat;       /* set to the monotonic second at every try (/healthz) */
};

struct fvp_lease;

/*
 * Block until this process holds the Lease (returns 0 and starts a thread
 * that renews it) or *@stop becomes true (returns -ECANCELED).  When the
 * renewals fail for the renew deadline, @lost(@ud) is called from the
 * renewing thread (it should end the process).
 */
int fvp_lease_acquire(struct fv_kube *k, const struct fvp_lease_config *cfg, volatile int *stop,
		      void (*lost)(void *ud), void *ud, struct fvp_lease **ret);

/* Stop renewing and release the Lease (best effort); frees @l. */
void fvp_lease_release(struct fvp_lease *l);

/* Is this process the leader now (metrics)? */
bool fvp_lease_held(void);

#endif
