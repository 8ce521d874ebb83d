#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# deploy/licenses.sh OUT STATIC_O PREFIX [CC]  (called by `make image-context`)
#
# Writes OUT/ (the image's /flexvol/LICENSES/): flexvol's own licence, the
# licence texts and copyright files of everything the static drivers link
# (util-linux's libmount and libblkid, systemd's libudev, glibc: LGPL-2.1 or
# later; json-c: MIT), and what the LGPL asks of a statically linked program
# (section 6): a written offer of the exact library sources, and the means to
# relink the drivers against modified libraries: the drivers' object files
# (relink/flexvol-objects.tar.gz) and the link command (relink/relink.sh,
# with the linker script of the start-up code's layout, relink/static-hot.ld).
# busybox (GPL-2.0) is added by the Containerfile's busybox stage, which is
# where its exact Debian version is known.
set -eu
OUT=$1 SO=$2 PREFIX=$3 CC=${4:-cc}
[ -d "$SO/obj" ] || { echo "licenses.sh: no objects in $SO/obj (make static)" >&2; exit 1; }
[ -f "$PREFIX/BUILDINFO" ] || { echo "licenses.sh: no $PREFIX/BUILDINFO (ci/build-static-deps)" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$OUT"
mkdir -p "$OUT/relink"

copy() { # copy SRC DEST: a file the build machine must have (Debian's docs and licence texts)
	[ -f "$1" ] || { echo "licenses.sh: $1 is missing on this build machine" >&2; exit 1; }
	cp "$1" "$2"
}
copy "$ROOT/LICENSE" "$OUT/flexvol.LICENSE"
copy /usr/share/common-licenses/LGPL-2.1 "$OUT/LGPL-2.1"
copy /usr/share/common-licenses/GPL-2 "$OUT/GPL-2"
copy /usr/share/doc/libmount1/copyright "$OUT/util-linux.copyright"
copy /usr/share/doc/libudev1/copyright "$OUT/systemd-libudev.copyright"
copy /usr/share/doc/libc6/copyright "$OUT/glibc.copyright"
copy /usr/share/doc/libjson-c5/copyright "$OUT/json-c.copyright"
copy "$PREFIX/BUILDINFO" "$OUT/BUILDINFO.static-deps"

ver() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$PREFIX/BUILDINFO" | head -1; }
UL=$(ver util-linux) SD=$(ver systemd) JC=$(ver json-c) GL=$(ver glibc)
VERSION=$(cat "$SO/version.txt" 2> /dev/null || echo unknown)

# The drivers' objects and the exact link line, so that anyone can relink.
# Exactly the objects of today's sources: a build directory can hold stale
# ones (a driver moved into its own directory) that would clash at relink.
objs=$(cd "$ROOT" && ls src/*.c drivers/registry.c drivers/*/*.c | sed 's|^\(.*\)\.c$|obj/\1.o|')
for o in $objs; do
	[ -f "$SO/$o" ] || { echo "licenses.sh: $SO/$o is missing (make static)" >&2; exit 1; }
done
# shellcheck disable=SC2086 # one word per object
(cd "$SO" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf - $objs) \
	> "$OUT/relink/flexvol-objects.tar.gz"
# the layout of the start-up code (deploy/static-hot.ld; any layout links the same program)
cp "$ROOT/deploy/static-hot.ld" "$OUT/relink/static-hot.ld"
libs=$(PKG_CONFIG_LIBDIR=$PREFIX/lib/pkgconfig PKG_CONFIG_PATH= pkg-config --static --libs json-c mount blkid libudev |
	sed "s|$PREFIX|\$PREFIX|g")
cat > "$OUT/relink/relink.sh" << EOS
#!/bin/sh
# Relink the flexvol drivers $VERSION against your own builds of the
# libraries (LGPL-2.1 section 6).  PREFIX holds include/, lib/ and
# lib/pkgconfig/ of json-c, libmount, libblkid and libudev built as static
# libraries (ci/build-static-deps in the flexvol source shows how; put your
# modified sources in its place).  glibc comes from the C compiler's own
# static libc.
#   PREFIX=/path/to/prefix sh relink.sh        ->  ./flexvol (copy it to loop, nfs, iscsi)
set -eu
: "\${PREFIX:?set PREFIX to the prefix with your static libraries}"
tar -xzf "\$(dirname "\$0")/flexvol-objects.tar.gz"
\${CC:-$CC} -static -Wl,--gc-sections -Wl,-T,"\$(dirname "\$0")/static-hot.ld" -o flexvol \$(find obj -name '*.o' | sort) $libs
EOS
chmod 755 "$OUT/relink/relink.sh"

cat > "$OUT/README" << EOS
Licences of the flexvol installer image (flexvol $VERSION)

flexvol itself                Apache-2.0           flexvol.LICENSE
  /flexvol/bin/<driver>: statically linked with the libraries below.
util-linux $UL  (libmount, libblkid)   LGPL-2.1-or-later    util-linux.copyright, LGPL-2.1
systemd $SD  (libudev)                 LGPL-2.1-or-later    systemd-libudev.copyright, LGPL-2.1
glibc $GL                              LGPL-2.1-or-later    glibc.copyright, LGPL-2.1
json-c $JC                             MIT                  json-c.copyright (holds the MIT text)
busybox (/bin/busybox, run-time shell of the installer)
                                       GPL-2.0-only         busybox/ (copyright, version), GPL-2

Static linking and the LGPL (section 6 of LGPL-2.1):
- Relinking: relink/flexvol-objects.tar.gz holds every object file of the
  drivers, relink/relink.sh the exact link command; with your own build of
  any of the LGPL libraries you get drivers that use it.  The full source
  of flexvol is available too (Apache-2.0), and its "make static" rebuilds
  the drivers from source against a prefix of your choice
  (FLEXVOL_STATIC_CACHE).
- Sources: the libraries are Debian 12 ("bookworm") source packages, built
  unmodified apart from Debian's own patches: util-linux $UL,
  systemd $SD, glibc $GL, json-c $JC (BUILDINFO.static-deps
  records them).  Debian keeps every version at https://snapshot.debian.org/
  and "apt-get source util-linux=$UL" fetches it.
- Written offer: for at least three years from the date you received this
  image, the distributor of this image will give anyone who asks a copy of
  the complete corresponding source code of util-linux $UL, systemd $SD,
  glibc $GL and busybox (the version in busybox/version), for no more
  than the cost of physically performing the distribution.  Ask whoever
  gave you this image (the registry's owner); a distributor who rebuilds
  and ships the image makes this offer for the image they ship.
EOS
echo "  LICENSES $OUT: $(ls "$OUT" | tr '\n' ' ')"
