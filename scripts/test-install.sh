#!/usr/bin/env bash
# Tests scripts/install.sh as a C user would use it: installs into a temporary
# prefix, builds crates/txmap-ctest/c/smoke.c with `pkg-config --cflags --libs
# txmap` (shared) and with `pkg-config --static` (static), runs both, and
# checks the shared library's SONAME and the files and links installed.
# Run by scripts/test.sh (not by cargo test: install.sh runs cargo itself).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "test-install.sh: FAILED: $*" >&2
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/txmap-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
bash scripts/install.sh "$prefix" >/dev/null

version=$(cargo pkgid -p txmap-clib)
version=${version##*[#@]}
major=${version%%.*}
lib=$prefix/lib

# The files, and the links from the development name to the SONAME to the file.
[ -f "$prefix/include/txmap.h" ] || fail "no $prefix/include/txmap.h"
cmp -s include/txmap.h "$prefix/include/txmap.h" || fail "installed txmap.h differs from include/txmap.h"
[ -f "$lib/libtxmap.so.$version" ] && [ ! -L "$lib/libtxmap.so.$version" ] || fail "no file $lib/libtxmap.so.$version"
[ "$(readlink "$lib/libtxmap.so.$major")" = "libtxmap.so.$version" ] || fail "libtxmap.so.$major does not link to libtxmap.so.$version"
[ "$(readlink "$lib/libtxmap.so")" = "libtxmap.so.$major" ] || fail "libtxmap.so does not link to libtxmap.so.$major"
[ -f "$lib/libtxmap.a" ] || fail "no $lib/libtxmap.a"

readelf -d "$lib/libtxmap.so.$version" | grep -q "(SONAME).*\[libtxmap.so.$major\]" ||
  fail "libtxmap.so.$version has no SONAME libtxmap.so.$major: $(readelf -d "$lib/libtxmap.so.$version" | grep SONAME)"

export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion txmap)" = "$version" ] || fail "pkg-config --modversion txmap is not $version"
cc=${CC:-cc}
data=$tmp/data

# Shared: the program needs the SONAME, found through LD_LIBRARY_PATH.
# shellcheck disable=SC2046 # pkg-config's output is a list of flags
"$cc" -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags txmap) \
  crates/txmap-ctest/c/smoke.c -o "$tmp/smoke" $(pkg-config --libs txmap)
readelf -d "$tmp/smoke" | grep -q "(NEEDED).*\[libtxmap.so.$major\]" ||
  fail "smoke does not need libtxmap.so.$major: $(readelf -d "$tmp/smoke" | grep NEEDED)"
mkdir -p "$data/shared"
out=$(LD_LIBRARY_PATH=$lib "$tmp/smoke" "$data/shared") || fail "smoke (shared) exited with $?: $out"
[[ $out == *"smoke: ok"* ]] || fail "smoke (shared) printed: $out"

# Static: libtxmap.a plus Libs.private, without libtxmap.so.
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags txmap) \
  crates/txmap-ctest/c/smoke.c -o "$tmp/smoke-static" \
  -Wl,-Bstatic $(pkg-config --libs-only-L --libs-only-l txmap) -Wl,-Bdynamic \
  $(pkg-config --static --libs-only-l txmap | sed 's/-ltxmap//')
if readelf -d "$tmp/smoke-static" | grep -q "(NEEDED).*libtxmap"; then
  fail "smoke-static needs libtxmap.so"
fi
mkdir -p "$data/static"
out=$("$tmp/smoke-static" "$data/static") || fail "smoke (static) exited with $?: $out"
[[ $out == *"smoke: ok"* ]] || fail "smoke (static) printed: $out"

echo "test-install.sh: ok (txmap $version: SONAME libtxmap.so.$major, pkg-config shared and static builds run)"
