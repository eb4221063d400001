#!/usr/bin/env bash
# Makes target/pyenv (a venv with maturin, pytest, numpy, hypothesis and,
# for the benchmark, lmdb, from PyPI) if it is missing, builds the txmap
# wheel with maturin and installs it there. Prints nothing else on success.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=target/pyenv
if ! "$VENV/bin/python" -c 'import maturin, pytest, numpy, hypothesis, lmdb' 2>/dev/null; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check maturin pytest numpy hypothesis lmdb
fi
# On CPython 3.11+ build the wheel whose views export the buffer protocol
# themselves (memoryview(view)); the default wheel is abi3 for 3.9+.
if "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  FEATURES=(--no-default-features --features py311)
else
  FEATURES=()
fi
rm -rf target/wheels
"$VENV/bin/maturin" build -q --release "${FEATURES[@]}" -m crates/txmap-py/Cargo.toml \
  -o target/wheels -i "$VENV/bin/python" >/dev/null
"$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps target/wheels/txmap-*.whl
