/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-provisioner migrate: a bound FlexVolume PV of a flexvol driver to the CSI driver of the
 * same backing and back, keeping the claim and the data (docs/migration.md).
 */
#ifndef FVP_MIGRATE_H
#define FVP_MIGRATE_H

/*
 * fvp_migrate_main() - the `migrate` command (@argv[0] is "migrate"). Prints its steps on stdout
 * and one error line on stderr. Returns the exit code: 0 done (or nothing to do), 3 refused
 * because the volume is in use (run it again once it is not), 2 bad usage, 1 any other failure.
 */
int fvp_migrate_main(int argc, char **argv);

#endif
