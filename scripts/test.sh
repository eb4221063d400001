#!/usr/bin/env bash
# The project's test command (README): every test of the workspace, then
# the Python package's (built with maturin into target/pyenv; see scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release
bash scripts/test-python.sh
