#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# gc.sh - run the block drivers' garbage collector (the op `gc`) now and then.
#
#   gc.sh [--once] [--every SECONDS] [--source DIR] [--host-ns] [--ready-file FILE]
#
# Every SECONDS (default 300) each driver executable in the source directory
# is run as `<driver> gc`: it releases loop bindings, iSCSI sessions and
# node-mode device mounts that no volume uses any more (docs/design.md,
# "Garbage collection").  Drivers without the op (nfs) answer Not supported
# and are skipped from then on.  A Failure is printed with its message and
# the loop goes on; kubelet's own calls never wait for it (the collector
# only try-locks).
#
# --host-ns: run each driver in the mount namespace of PID 1 (the host's,
# with the pod's hostPID), as kubelet runs them: the collector must see the
# host's mounts, devices, /run and /etc/flexvol.  The executable is reached
# through /proc/<our pid>/root, so the drivers of this image run, whatever
# the host's plugin directory is called.  Needs privileges to enter the
# namespace (the DaemonSet's gc container).
#
# Options (each also as an environment variable):
#   --every SECONDS   FLEXVOL_GC_EVERY     default 300
#   --source DIR      FLEXVOL_SOURCE_DIR   directory holding the driver executables
#   --host-ns         FLEXVOL_GC_HOST_NS=1
#   --ready-file F    FLEXVOL_READY_FILE   written after the first pass (readinessProbe)
#   --once                                 one pass, then exit (status 1 if a driver failed)
set -eu

EVERY=${FLEXVOL_GC_EVERY:-300}
SOURCE_DIR=${FLEXVOL_SOURCE_DIR:-}
HOST_NS=${FLEXVOL_GC_HOST_NS:-0}
READY_FILE=${FLEXVOL_READY_FILE:-}
ONCE=0

say() { printf 'flexvol-gc: %s\n' "$*"; }
die() { printf 'flexvol-gc: %s\n' "$*" >&2; exit 1; }
need_arg() { [ $# -ge 2 ] || die "$1 needs a value"; }

while [ $# -gt 0 ]; do
	case $1 in
	--every) need_arg "$@"; EVERY=$2; shift ;;
	--every=*) EVERY=${1#*=} ;;
	--source) need_arg "$@"; SOURCE_DIR=$2; shift ;;
	--source=*) SOURCE_DIR=${1#*=} ;;
	--host-ns) HOST_NS=1 ;;
	--ready-file) need_arg "$@"; READY_FILE=$2; shift ;;
	--ready-file=*) READY_FILE=${1#*=} ;;
	--once) ONCE=1 ;;
	*) die "unknown argument: $1" ;;
	esac
	shift
done
case $EVERY in '' | *[!0-9]* | 0) die "--every must be a number of seconds > 0: '$EVERY'" ;; esac
[ -n "$SOURCE_DIR" ] || SOURCE_DIR=$(dirname "$0")/bin
[ -d "$SOURCE_DIR" ] || die "no driver directory $SOURCE_DIR"
[ -z "$READY_FILE" ] || rm -f "$READY_FILE" || die "cannot remove the ready file $READY_FILE"

SKIP=" "
# pass: one `gc` of every driver; returns 1 if one failed
pass() {
	failed=0
	for exe in "$SOURCE_DIR"/*; do
		d=${exe##*/}
		[ -f "$exe" ] && [ -x "$exe" ] || continue
		case $SKIP in *" $d "*) continue ;; esac
		if [ "$HOST_NS" = 1 ]; then
			reply=$(nsenter -t 1 -m -- "/proc/$$/root$exe" gc 2>&1) || true
		else
			reply=$("$exe" gc 2>&1) || true
		fi
		case $reply in
		*'"status":"Success"'*) ;;
		*'"status":"Not supported"'*) SKIP="$SKIP$d " ;;
		*) say "$d: gc failed: $reply"; failed=1 ;;
		esac
	done
	return $failed
}

if [ "$ONCE" = 1 ]; then
	pass
	exit $?
fi
trap 'kill "$SLEEPER" 2>&-; [ -z "$READY_FILE" ] || rm -f "$READY_FILE"; exit 0' INT TERM
first=1
while :; do
	pass || true
	if [ "$first" = 1 ] && [ -n "$READY_FILE" ]; then
		printf 'gc\n' > "$READY_FILE.tmp" && mv -f "$READY_FILE.tmp" "$READY_FILE" ||
			die "cannot write the ready file $READY_FILE"
		first=0
		say "running every $EVERY s"
	fi
	sleep "$EVERY" &
	SLEEPER=$!
	wait "$SLEEPER" || sleep "$EVERY"
done
