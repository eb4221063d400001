#!/usr/bin/env bash
# The project's test command (README): every test of the workspace, then
# the Python package's (built with maturin into target/pyenv; see scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release
# Installs the C library into a temporary prefix and builds a C program with
# pkg-config (after cargo test: it runs cargo itself).
bash scripts/test-install.sh
bash scripts/test-python.sh
