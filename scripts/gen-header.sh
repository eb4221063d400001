#!/usr/bin/env bash
# Regenerates include/txmap.h from the C API in crates/txmap-capi/src/ with cbindgen.
#   scripts/gen-header.sh           write include/txmap.h
#   scripts/gen-header.sh --check   exit 1 (and show a diff) if include/txmap.h is stale
set -euo pipefail
cd "$(dirname "$0")/.."

CBINDGEN=${CBINDGEN:-cbindgen}
if ! command -v "$CBINDGEN" >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cbindgen" ]; then
    CBINDGEN="$HOME/.cargo/bin/cbindgen"
  else
    echo "gen-header.sh: cbindgen not found (cargo install cbindgen --version 0.29.4)" >&2
    exit 2
  fi
fi

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

out=include/txmap.h
tmp=$(mktemp "${TMPDIR:-/tmp}/txmap-header.XXXXXX")
trap 'rm -f "$tmp"' EXIT

# Parsing the C API crate's source (not the txmap crate it uses) keeps the
# txmap crate's public constants out of the header.
"$CBINDGEN" --quiet --config cbindgen.toml --output "$tmp" crates/txmap-capi/src/lib.rs

if [ "$check" = 1 ]; then
  if ! diff -u "$out" "$tmp"; then
    echo "gen-header.sh: $out is stale; run scripts/gen-header.sh" >&2
    exit 1
  fi
  echo "gen-header.sh: $out is up to date"
else
  mkdir -p "$(dirname "$out")"
  cp "$tmp" "$out"
  echo "gen-header.sh: wrote $out"
fi
