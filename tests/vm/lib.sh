# tests/vm/lib.sh: sourced by every tests/vm/t-* case (bash).
#
# Gives a case: strict mode with a report of the failing line, the fixture
# facts (tests/vm/fixtures, README.md), a scratch directory, cleanup hooks
# run in reverse order on any exit, and small wait/assert helpers.
# shellcheck shell=bash

set -Eeuo pipefail

if [ "${FLEXVOL_VM:-}" != 1 ]; then
    echo "${0##*/}: run inside the VM: tests/vm/run . -- tests/vm/suite ${0##*/}" >&2
    exit 2
fi

FV_CASE=${0##*/}
FV_VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FV_WS=$(cd "$FV_VM_DIR/../.." && pwd)
# build directory, as `make O=...` (tests/vm/vm.mk passes it)
FV_BUILD=${FV_BUILD:-$FV_WS/build}
case "$FV_BUILD" in /*) ;; *) FV_BUILD=$FV_WS/$FV_BUILD ;; esac

fv_facts=/run/flexvol-vm/fixtures.env
if [ ! -s "$fv_facts" ]; then
    echo "$FV_CASE: fixtures are not up (tests/vm/suite starts them)" >&2
    exit 1
fi
# shellcheck source=/dev/null
. "$fv_facts"

fv_t0=$EPOCHREALTIME
# elapsed seconds since the case started, 2 decimals (no fork)
fv_elapsed() {
    local d=$(( ${EPOCHREALTIME/./} - ${fv_t0/./} ))
    printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000))
}
log() { echo "[$(fv_elapsed)] $*"; }
fail() {
    echo "$FV_CASE: FAIL: $*" >&2
    exit 1
}

# --- cleanup hooks -----------------------------------------------------------
fv_cleanups=()
# on_exit CMD...: run CMD at exit (latest first); its failure is reported only
on_exit() {
    local q
    printf -v q ' %q' "$@"
    fv_cleanups+=("${q# }")
}
FV_RC=0
fv_run_cleanups() {
    local rc=$? i
    export FV_RC=$rc   # a cleanup can look at the case's exit status
    trap - ERR
    set +e
    for ((i = ${#fv_cleanups[@]} - 1; i >= 0; i--)); do
        eval "${fv_cleanups[i]}" || echo "$FV_CASE: cleanup failed: ${fv_cleanups[i]}" >&2
    done
    exit "$rc"
}
trap fv_run_cleanups EXIT
trap 'echo "$FV_CASE: line $LINENO: \`$BASH_COMMAND\` failed (exit $?)" >&2' ERR

# scratch directory on the guest's tmpfs, removed at exit
FV_SCRATCH=$(mktemp -d "/tmp/$FV_CASE.XXXXXX")
on_exit rm -rf "$FV_SCRATCH"

# --- helpers -------------------------------------------------------------------
# wait_until SECONDS CMD...: true once CMD succeeds, false after SECONDS
wait_until() {
    local limit=$1 i
    shift
    for ((i = 0; i < limit * 20; i++)); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}

# unmount_if_mounted DIR: lazy unmount, for cleanups
unmount_if_mounted() {
    if mountpoint -q "$1" 2>/dev/null; then umount -l "$1"; fi
}

# assert_eq GOT WANT WHAT
assert_eq() {
    [ "$1" = "$2" ] || fail "$3: got '$1', want '$2'"
}

# fstype_of DIR: the fs type mounted exactly at DIR, empty when none
fstype_of() {
    findmnt -n -o FSTYPE --mountpoint "$1" 2>/dev/null | head -n 1 || true
}
