#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# install.sh - install the flexvol drivers into a FlexVolume plugin directory.
#
#   install.sh [--once] [--plugin-dir DIR] [--source DIR] [--drivers LIST]
#              [--config FILE --config-dest FILE]
#
# For every driver executable in the source directory (default: bin/ next to
# this script, or $FLEXVOL_SOURCE_DIR) the result is
#
#   <plugin dir>/flexvol~<driver>/<driver>        mode 0555
#
# which kubelet and kube-controller-manager load as the driver "flexvol/<driver>".
#
# How the copy is done, and why:
#   - kubelet watches the plugin directory and re-runs `init` of a driver on
#     any create/write/chmod/rename below its directory.  A half-written
#     executable must never be visible under its final name, so the new file
#     is written as .<driver>.tmp.<pid> in the driver's own directory (names
#     starting with '.' are ignored by kubelet's prober), made 0555, synced,
#     and then renamed over the final name (rename(2) is atomic).
#   - An installed file that is byte-identical to the new one is left alone,
#     so re-running (a DaemonSet pod restart) causes no filesystem event and
#     no re-probe.  A different one (an upgrade) is replaced by the rename:
#     processes still running the old binary keep their inode.
#   - Nothing else is ever written in the plugin directory: no logs, no
#     state, no marker files.
#
# Options (each also as an environment variable):
#   --plugin-dir DIR  FLEXVOL_PLUGIN_DIR   default /usr/libexec/kubernetes/kubelet-plugins/volume/exec
#   --source DIR      FLEXVOL_SOURCE_DIR   directory holding the driver executables
#   --drivers LIST    FLEXVOL_DRIVERS      comma-separated subset (default: every file in the source)
#   --config FILE     FLEXVOL_CONFIG_SRC   also install this node config file (atomically, 0644,
#   --config-dest F   FLEXVOL_CONFIG_DEST  to F, default /etc/flexvol/flexvol.conf; skipped when equal)
#   --once                                 exit after installing (default: keep running until TERM,
#                                          as a DaemonSet container must)
#
# Exit status: 0 on success (and on TERM/INT while waiting), 1 on any failure.
# Messages go to stdout, errors to stderr; the drivers themselves never print.
set -eu

PLUGIN_DIR=${FLEXVOL_PLUGIN_DIR:-/usr/libexec/kubernetes/kubelet-plugins/volume/exec}
SOURCE_DIR=${FLEXVOL_SOURCE_DIR:-}
DRIVERS=${FLEXVOL_DRIVERS:-}
CONFIG_SRC=${FLEXVOL_CONFIG_SRC:-}
CONFIG_DEST=${FLEXVOL_CONFIG_DEST:-/etc/flexvol/flexvol.conf}
VENDOR=flexvol
ONCE=0

say() { printf 'flexvol-install: %s\n' "$*"; }
die() { printf 'flexvol-install: error: %s\n' "$*" >&2; exit 1; }
need_arg() { [ $# -ge 2 ] || die "$1 needs an argument"; }

while [ $# -gt 0 ]; do
	case $1 in
	--once) ONCE=1 ;;
	--plugin-dir) need_arg "$@"; PLUGIN_DIR=$2; shift ;;
	--plugin-dir=*) PLUGIN_DIR=${1#*=} ;;
	--source) need_arg "$@"; SOURCE_DIR=$2; shift ;;
	--source=*) SOURCE_DIR=${1#*=} ;;
	--drivers) need_arg "$@"; DRIVERS=$2; shift ;;
	--drivers=*) DRIVERS=${1#*=} ;;
	--config) need_arg "$@"; CONFIG_SRC=$2; shift ;;
	--config=*) CONFIG_SRC=${1#*=} ;;
	--config-dest) need_arg "$@"; CONFIG_DEST=$2; shift ;;
	--config-dest=*) CONFIG_DEST=${1#*=} ;;
	-h | --help) sed -n '3,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done

if [ -z "$SOURCE_DIR" ]; then
	SOURCE_DIR=$(dirname "$0")/bin
fi
[ -d "$SOURCE_DIR" ] || die "source directory $SOURCE_DIR does not exist"
case $PLUGIN_DIR in /*) ;; *) die "plugin dir must be an absolute path: $PLUGIN_DIR" ;; esac

# Temp files of this run, removed on any exit.
TMPS=""
cleanup() {
	for t in $TMPS; do rm -f "$t"; done
	TMPS=""
}
trap cleanup EXIT
trap 'cleanup; exit 1' HUP
trap 'cleanup; exit 0' INT TERM

valid_name() { # a driver name kubelet accepts: [a-z0-9]([-a-z0-9_.]*[a-z0-9])?, no '~'
	case $1 in
	'' | *[!a-z0-9._-]* | [!a-z0-9]* | *[!a-z0-9]) return 1 ;;
	esac
	[ ${#1} -le 63 ]
}

# install_file SRC DEST MODE: atomic, idempotent copy; sets RESULT to what it did.
# Called as a plain command (not in $(...)) so that the traps see TMPS.
install_file() {
	src=$1 dest=$2 mode=$3
	dir=$(dirname "$dest") base=$(basename "$dest")
	[ ! -d "$dest" ] || die "$dest is a directory"
	if [ -f "$dest" ] && [ ! -L "$dest" ] && cmp -s "$src" "$dest" &&
		[ "$(stat -c %a "$dest")" = "$mode" ]; then
		# Same bytes and mode: no write at all (even a chmod or a
		# touch would re-trigger kubelet's probe).
		RESULT=unchanged
		return 0
	fi
	[ -d "$dir" ] || mkdir -p "$dir" || die "cannot create $dir"
	# Leftovers of an installer that was killed mid-copy (dot-files: never probed).
	for old in "$dir/.$base.tmp."*; do
		[ ! -e "$old" ] || rm -f "$old" || die "cannot remove $old"
	done
	tmp=$dir/.$base.tmp.$$
	TMPS="$TMPS $tmp"
	rm -f "$tmp" || die "cannot remove $tmp"
	cp "$src" "$tmp" || die "cannot write $tmp"
	chmod "$mode" "$tmp" || die "cannot chmod $tmp"
	# The data must be on disk before the name points at it.
	sync "$tmp" 2> /dev/null || sync
	if [ -e "$dest" ] || [ -L "$dest" ]; then RESULT=upgraded; else RESULT=installed; fi
	mv -f "$tmp" "$dest" || die "cannot rename $tmp to $dest"
	TMPS=""
	sync "$dir" 2> /dev/null || true
}

# The drivers to install.
list=""
if [ -n "$DRIVERS" ]; then
	list=$(printf '%s' "$DRIVERS" | tr ',' ' ')
	for d in $list; do
		[ -f "$SOURCE_DIR/$d" ] || die "driver $d not found in $SOURCE_DIR"
	done
else
	for f in "$SOURCE_DIR"/*; do
		[ -f "$f" ] && [ -x "$f" ] || continue
		list="$list $(basename "$f")"
	done
fi
[ -n "$list" ] || die "no driver executables in $SOURCE_DIR"

[ -d "$PLUGIN_DIR" ] || mkdir -p "$PLUGIN_DIR"
for d in $list; do
	valid_name "$d" || die "'$d' is not a valid driver name"
	install_file "$SOURCE_DIR/$d" "$PLUGIN_DIR/$VENDOR~$d/$d" 555
	say "$VENDOR/$d: $RESULT ($PLUGIN_DIR/$VENDOR~$d/$d)"
done

if [ -n "$CONFIG_SRC" ]; then
	[ -f "$CONFIG_SRC" ] || die "config file $CONFIG_SRC does not exist"
	case $CONFIG_DEST in "$PLUGIN_DIR"/*) die "the config file must not live in the plugin dir" ;; esac
	install_file "$CONFIG_SRC" "$CONFIG_DEST" 644
	say "config: $RESULT ($CONFIG_DEST)"
fi

[ "$ONCE" = 1 ] && exit 0

# Stay up (a DaemonSet container that exits is restarted in a loop); leave
# promptly and cleanly on TERM.
say "done; waiting for TERM"
trap 'kill "$SLEEPER" 2>&-; exit 0' INT TERM
while :; do
	sleep 86400 &
	SLEEPER=$!
	wait "$SLEEPER" && continue
	# The background sleep failed (a shell opens /dev/null for it: a root
	# without /dev?).  Never spin: wait in the foreground instead.
	sleep 60
done
