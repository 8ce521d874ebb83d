#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# install.sh - install the flexvol drivers into a FlexVolume plugin directory.
#
#   install.sh [--once] [--uninstall] [--plugin-dir DIR] [--source DIR] [--drivers LIST]
#              [--config FILE --config-dest FILE] [--config-only] [--ready-file FILE]
#
# For every driver in the source directory (default: bin/ next to this
# script, or $FLEXVOL_SOURCE_DIR) the result is
#
#   <plugin dir>/flexvol~<driver>/<driver>        mode 0555
#
# which kubelet and kube-controller-manager load as the driver "flexvol/<driver>".
# A driver is an executable whose `init` answers Success with capabilities,
# exactly as kubelet will probe it: anything else in the source directory
# (the multi-call build/flexvol, other programs) is skipped, so kubelet never
# sees a "driver" it cannot load.
#
# Before anything on the node is touched: the drivers are probed, and the
# node config (--config) is checked by the new driver's own parser
# (`<driver> check-config FILE`).  A config the drivers would refuse (a typo
# in a key, a bad value) stops the install with exit 1 and the driver's
# message, which names the file, line and key; nothing is changed.
#
# --uninstall removes what an install with the same options puts there.
# Each flexvol~<driver>/ is first renamed to .flexvol~<driver>.uninstalled
# (kubelet's prober ignores dot-names; a driver directory without its
# executable would make every probe fail), then <driver> and leftover temp
# files of this installer go, then the directory if it is empty (files that
# are not ours stay in it, under the dot-name, and are reported).  An
# uninstall killed half-way leaves either the whole driver or the dot-name;
# a rerun finishes it.  The node config goes only if it still has the
# content --config names.  Nothing outside our directories is touched
# (other vendors' drivers stay).
#
# --config-only checks and installs (or uninstalls) the node config alone
# and touches no plugin directory: the CSI node DaemonSets (deploy/csi) run
# it as their init container, so that flexvol-csi reads a config the
# drivers' parser accepted, with no FlexVolume driver written on the node.
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
#   --ready-file F    FLEXVOL_READY_FILE   removed at start, written (with the version) only
#                                          once the install or uninstall is complete: the
#                                          DaemonSet's readinessProbe checks it
#   --config-only     FLEXVOL_CONFIG_ONLY=1  the node config only (needs --config), no plugin dir
#   --uninstall       FLEXVOL_UNINSTALL=1  remove instead of install (above)
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
READY_FILE=${FLEXVOL_READY_FILE:-}
UNINSTALL=${FLEXVOL_UNINSTALL:-0}
CONFIG_ONLY=${FLEXVOL_CONFIG_ONLY:-0}
VENDOR=flexvol
ONCE=0

say() { printf 'flexvol-install: %s\n' "$*"; }
die() { printf 'flexvol-install: error: %s\n' "$*" >&2; exit 1; }
need_arg() { [ $# -ge 2 ] || die "$1 needs an argument"; }

while [ $# -gt 0 ]; do
	case $1 in
	--once) ONCE=1 ;;
	--uninstall) UNINSTALL=1 ;;
	--config-only) CONFIG_ONLY=1 ;;
	--ready-file) need_arg "$@"; READY_FILE=$2; shift ;;
	--ready-file=*) READY_FILE=${1#*=} ;;
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
	-h | --help) sed -n '3,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done

if [ -z "$SOURCE_DIR" ]; then
	SOURCE_DIR=$(dirname "$0")/bin
fi
[ -d "$SOURCE_DIR" ] || die "source directory $SOURCE_DIR does not exist"
case $PLUGIN_DIR in /*) ;; *) die "plugin dir must be an absolute path: $PLUGIN_DIR" ;; esac
case $UNINSTALL in 0 | '') UNINSTALL=0 ;; *) UNINSTALL=1 ;; esac
case $CONFIG_ONLY in 0 | '') CONFIG_ONLY=0 ;; *) CONFIG_ONLY=1 ;; esac
[ "$CONFIG_ONLY" = 0 ] || [ -n "$CONFIG_SRC" ] || die "--config-only needs --config FILE"
# Not ready until this run has finished (a restarted pod must not look ready early).
[ -z "$READY_FILE" ] || rm -f "$READY_FILE" || die "cannot remove the ready file $READY_FILE"

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

# is_driver FILE: FILE answers `init` with Success and capabilities, as kubelet needs.
is_driver() {
	[ -f "$1" ] && [ -x "$1" ] || return 1
	probe=$("$1" init < /dev/null 2>&1) || return 1
	case $probe in *'"status":"Success"'*'"capabilities":{'*) return 0 ;; esac
	return 1
}

# reply_message JSON: the "message" of a driver reply (the raw reply when there is none).
reply_message() {
	m=$(printf '%s\n' "$1" | sed -n 's/.*"message":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
	printf '%s\n' "${m:-$1}"
}

# The drivers: --drivers (each must be one), or every driver in the source.
list=""
if [ -n "$DRIVERS" ]; then
	for d in $(printf '%s' "$DRIVERS" | tr ',' ' '); do
		[ -f "$SOURCE_DIR/$d" ] || die "driver $d not found in $SOURCE_DIR"
		is_driver "$SOURCE_DIR/$d" || die "$SOURCE_DIR/$d is not a driver: its init answered: $probe"
		list="$list $d"
	done
else
	for f in "$SOURCE_DIR"/*; do
		[ -f "$f" ] && [ -x "$f" ] || continue
		if is_driver "$f"; then
			list="$list $(basename "$f")"
		else
			say "skipped $(basename "$f"): not a driver (init answered: $probe)"
		fi
	done
fi
[ -n "$list" ] || die "no driver executables in $SOURCE_DIR"
for d in $list; do
	valid_name "$d" || die "'$d' is not a valid driver name"
done
set -- $list
FIRST=$SOURCE_DIR/$1
VERSION=$("$FIRST" version 2>&1 | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')
say "flexvol ${VERSION:-(unknown version)}: drivers$list"

# The node config, checked by the driver's own parser before anything changes.
if [ -n "$CONFIG_SRC" ]; then
	[ -f "$CONFIG_SRC" ] || die "config file $CONFIG_SRC does not exist"
	case $CONFIG_DEST in "$PLUGIN_DIR"/*) die "the config file must not live in the plugin dir" ;; esac
	if [ "$UNINSTALL" = 0 ]; then
		reply=$("$FIRST" check-config "$CONFIG_SRC" 2>&1) || true
		case $reply in
		*'"status":"Success"'*) say "config: $CONFIG_SRC checked" ;;
		*) die "node config refused, nothing installed: $(reply_message "$reply")" ;;
		esac
	fi
fi

# ready: the readiness file, written atomically once everything is done.
ready() {
	[ -n "$READY_FILE" ] || return 0
	printf '%s\n' "${VERSION:-unknown}" > "$READY_FILE.tmp" && mv -f "$READY_FILE.tmp" "$READY_FILE" ||
		die "cannot write the ready file $READY_FILE"
}

if [ "$CONFIG_ONLY" = 1 ]; then
	set --                      # no driver goes to (or leaves) a plugin dir
else
	set -- $list
fi
if [ "$UNINSTALL" = 1 ]; then
	for d in "$@"; do
		dir=$PLUGIN_DIR/$VENDOR~$d
		# kubelet's prober fails on a flexvol~<drv>/ without its executable
		# (forever, if we were killed half-way): the directory first goes
		# under a dot-name, which the prober ignores, and only then is
		# anything in it removed.  A rerun finds the dot-name and finishes.
		gone=$PLUGIN_DIR/.$VENDOR~$d.uninstalled
		RESULT="not installed"
		if [ -d "$dir" ] && [ ! -L "$dir" ]; then
			if [ -e "$gone" ] || [ -L "$gone" ]; then
				# an earlier, interrupted uninstall's: ours goes first, foreign files stay
				rm -f "$gone/$d" "$gone/.$d.tmp."* || die "cannot clean $gone"
				rmdir "$gone" 2> /dev/null ||
					die "$gone (an earlier uninstall's) holds files that are not ours; move them away, then rerun"
			fi
			mv "$dir" "$gone" || die "cannot rename $dir to $gone"
			sync "$PLUGIN_DIR" 2> /dev/null || true
		fi
		if [ -d "$gone" ] && [ ! -L "$gone" ]; then
			for old in "$gone/.$d.tmp."*; do
				[ ! -e "$old" ] || rm -f "$old" || die "cannot remove $old"
			done
			if [ -e "$gone/$d" ] || [ -L "$gone/$d" ]; then
				[ ! -d "$gone/$d" ] || die "$gone/$d is a directory"
				rm -f "$gone/$d" || die "cannot remove $gone/$d"
				RESULT=removed
			fi
			if ! rmdir "$gone" 2> /dev/null; then
				RESULT="$RESULT; $gone kept: it holds files that are not ours"
			fi
		fi
		say "$VENDOR/$d: $RESULT"
	done
	if [ -n "$CONFIG_SRC" ]; then
		if [ ! -e "$CONFIG_DEST" ]; then
			say "config: not installed ($CONFIG_DEST)"
		elif cmp -s "$CONFIG_SRC" "$CONFIG_DEST"; then
			rm -f "$CONFIG_DEST" || die "cannot remove $CONFIG_DEST"
			say "config: removed ($CONFIG_DEST)"
		else
			say "config: $CONFIG_DEST kept: it differs from $CONFIG_SRC (edited on the node?)"
		fi
	fi
	say "uninstalled"
else
	# The config first: the kubelet may run a driver's init the moment its
	# file appears (it processes plugin-dir events on its next volume lookup)
	# and keeps that answer; init's attach capability comes from the config.
	if [ -n "$CONFIG_SRC" ]; then
		install_file "$CONFIG_SRC" "$CONFIG_DEST" 644
		say "config: $RESULT ($CONFIG_DEST)"
	fi
	[ "$CONFIG_ONLY" = 1 ] || [ -d "$PLUGIN_DIR" ] || mkdir -p "$PLUGIN_DIR" ||
		die "cannot create $PLUGIN_DIR"
	for d in "$@"; do
		install_file "$SOURCE_DIR/$d" "$PLUGIN_DIR/$VENDOR~$d/$d" 555
		say "$VENDOR/$d: $RESULT ($PLUGIN_DIR/$VENDOR~$d/$d)"
	done
fi
ready

[ "$ONCE" = 1 ] && exit 0

# Stay up (a DaemonSet container that exits is restarted in a loop); leave
# promptly and cleanly on TERM.
say "done; waiting for TERM"
trap 'kill "$SLEEPER" 2>&-; [ -z "$READY_FILE" ] || rm -f "$READY_FILE"; exit 0' INT TERM
while :; do
	sleep 86400 &
	SLEEPER=$!
	wait "$SLEEPER" && continue
	# The background sleep failed (a shell opens /dev/null for it: a root
	# without /dev?).  Never spin: wait in the foreground instead.
	sleep 60
done
