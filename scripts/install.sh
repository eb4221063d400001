#!/usr/bin/env bash
# Builds the C library (release) and installs it for C programs:
#   PREFIX/include/txmap.h
#   PREFIX/lib/libtxmap.so.X.Y.Z, libtxmap.so.X -> it (the SONAME), libtxmap.so -> libtxmap.so.X
#   PREFIX/lib/libtxmap.a
#   PREFIX/lib/pkgconfig/txmap.pc   (pkg-config --cflags --libs txmap)
# Usage: scripts/install.sh [PREFIX]   (default /usr/local)
# LIBDIR overrides PREFIX/lib; DESTDIR stages the files under another root
# (the paths in txmap.pc stay those without it).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -gt 1 ]; then
  echo "usage: $0 [PREFIX]" >&2
  exit 2
fi
prefix=${1:-/usr/local}
prefix=${prefix%/}
libdir=${LIBDIR:-$prefix/lib}
includedir=$prefix/include
destdir=${DESTDIR:-}

# "path+file:///.../crates/txmap-clib#0.1.0" (or "...#txmap-clib@0.1.0") -> 0.1.0
version=$(cargo pkgid -p txmap-clib)
version=${version##*[#@]}
major=${version%%.*}

cargo build --release -p txmap-clib
target=${CARGO_TARGET_DIR:-target}/release
so=libtxmap.so.$version
# build.rs sets this SONAME; refuse to install a library without it.
if ! readelf -d "$target/libtxmap.so" | grep -q "(SONAME).*\[libtxmap.so.$major\]"; then
  echo "install.sh: $target/libtxmap.so lacks SONAME libtxmap.so.$major" >&2
  exit 1
fi

install -d "$destdir$includedir" "$destdir$libdir/pkgconfig"
install -m 644 include/txmap.h "$destdir$includedir/txmap.h"
install -m 755 "$target/libtxmap.so" "$destdir$libdir/$so"
ln -sfn "$so" "$destdir$libdir/libtxmap.so.$major"
ln -sfn "libtxmap.so.$major" "$destdir$libdir/libtxmap.so"
install -m 644 "$target/libtxmap.a" "$destdir$libdir/libtxmap.a"

# Libs.private: what the static library needs besides itself (Rust's standard
# library on glibc; `rustc --print native-static-libs` lists it).
pc=$(mktemp "${TMPDIR:-/tmp}/txmap-pc.XXXXXX")
trap 'rm -f "$pc"' EXIT
cat >"$pc" <<EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: txmap
Description: ACID transactions over memory-mapped files
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltxmap
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
EOF
install -m 644 "$pc" "$destdir$libdir/pkgconfig/txmap.pc"
echo "install.sh: installed txmap $version in $destdir$prefix"
