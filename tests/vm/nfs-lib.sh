# tests/vm/nfs-lib.sh: sourced by the tests/vm/t-nfs-* cases after lib.sh.
#
# Gives a case the nfs driver with a private config/log/run dir, kubelet's
# pod dir shape, Go-style option JSON, and nfs_call, which runs one driver
# call the way kubelet does and checks the contract on it: nothing on
# stderr, exactly one JSON object on stdout, exit code matching the status.
# shellcheck shell=bash

drv=$FV_BUILD/nfs
[ -x "$drv" ] || fail "$drv is missing: build first (make)"

export FLEXVOL_CONFIG=$FV_SCRATCH/flexvol.conf
export FLEXVOL_STATE_DIR=$FV_SCRATCH/state
export FLEXVOL_RUN_DIR=$FV_SCRATCH/run
export FLEXVOL_LOG_FILE=$FV_SCRATCH/nfs.log
: >"$FLEXVOL_CONFIG"
kroot=$FV_SCRATCH/kubelet

# poddir UID [VOLUME]: <root>/pods/<uid>/volumes/flexvol~nfs/<volume> (contract §2)
poddir() { echo "$kroot/pods/$1/volumes/flexvol~nfs/${2:-vol}"; }

# opts KEY VALUE ...: the options JSON as kubelet sends it (compact, keys sorted)
opts() {
    jq -ncS '[$ARGS.positional | _nwise(2) | {(.[0]): .[1]}] | add' \
        --args kubernetes.io/fsType "" kubernetes.io/pvOrVolumeName vol \
        kubernetes.io/readwrite rw "$@"
}

# nfs_call WANT OP ARGS...: one call; the reply document ends up in $REPLY_DOC
# and its duration (seconds) in $REPLY_S.  Safe to run in parallel (&).
nfs_call() {
    local want=$1 op=$2 out err rc st n t0
    out=$FV_SCRATCH/reply.$BASHPID err=$FV_SCRATCH/stderr.$BASHPID
    shift
    t0=$EPOCHREALTIME
    rc=0
    "$drv" "$@" >"$out" 2>"$err" </dev/null || rc=$?
    REPLY_S=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
    [ ! -s "$err" ] || fail "$op wrote to stderr: $(head -c 300 "$err")"
    n=$(jq -s 'map(select(type == "object")) | length' <"$out" 2>/dev/null) || n=x
    [ "$n" = 1 ] && [ "$(jq -s length <"$out")" = 1 ] ||
        fail "$op: output is not one JSON object: $(head -c 300 "$out")"
    st=$(jq -r .status <"$out")
    case "$st" in
        Success | "Not supported") [ "$rc" = 0 ] || fail "$op: exit $rc with status $st" ;;
        Failure) [ "$rc" = 1 ] || fail "$op: exit $rc with status Failure" ;;
        *) fail "$op: bad status '$st'" ;;
    esac
    REPLY_DOC=$(cat "$out")
    rm -f "$out" "$err"
    [ "$st" = "$want" ] || fail "$op ${2:-}: want $want, got: $REPLY_DOC"
}

# reply_message: the message of the last reply
reply_message() { jq -r '.message // ""' <<<"$REPLY_DOC"; }

# mount_pod WANT UID JSON / unmount_pod WANT UID: kubelet's mkdir -p, then the
# call (a mkdir on a stale mount fails with ESTALE: the driver repairs that)
mount_pod() {
    mkdir -p "$(poddir "$2")" 2>/dev/null || true
    nfs_call "$1" mount "$(poddir "$2")" "$3"
}
unmount_pod() { nfs_call "$1" unmount "$(poddir "$2")"; }

# mounted_source DIR: the source mounted exactly at DIR (mountinfo; never stats DIR)
mounted_source() { findmnt -n -o SOURCE --mountpoint "$1" 2>/dev/null | tail -n 1 || true; }
mounted_opts() { findmnt -n -o OPTIONS --mountpoint "$1" 2>/dev/null | tail -n 1 || true; }
mount_count() { awk -v d="$1" '$5 == d' /proc/self/mountinfo | wc -l; }

# assert_unmounted_empty DIR
assert_unmounted_empty() {
    [ "$(mount_count "$1")" = 0 ] || fail "$1 is still mounted"
    [ ! -d "$1" ] || [ -z "$(ls -A "$1")" ] || fail "$1 is not empty"
}

# on failure: the driver's log
nfs_dump_log() {
    if [ "$FV_RC" != 0 ] && [ -s "$FLEXVOL_LOG_FILE" ]; then
        echo "--- last lines of $FLEXVOL_LOG_FILE"
        tail -n 40 "$FLEXVOL_LOG_FILE"
    fi
}
on_exit nfs_dump_log

# cleanup: lazily unmount whatever is left under the kubelet root
nfs_release_all() {
    local m
    for m in $(awk -v p="$kroot/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
}
on_exit nfs_release_all

# --- the server ---------------------------------------------------------------
# nfsd_stop / nfsd_start: stop and start the kernel server's threads.  A
# restarted server has clients to reclaim and would hold every OPEN for the
# 90 s NFSv4 grace period; the grace and lease times (10 s is the floor) can
# only be set while no nfsd thread runs.
nfsd_stop() { rpc.nfsd 0; }
nfsd_start() {
    echo 10 >/proc/fs/nfsd/nfsv4leasetime 2>/dev/null || true
    echo 10 >/proc/fs/nfsd/nfsv4gracetime 2>/dev/null || true
    rpc.nfsd 8
    wait_until 30 bash -c 'rpcinfo -p 127.0.0.1 | grep -qw nfs' || fail "nfsd did not come back"
}
nfsd_running() { [ "$(cat /proc/fs/nfsd/threads 2>/dev/null || echo 0)" -gt 0 ]; }
