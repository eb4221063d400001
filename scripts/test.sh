#!/usr/bin/env bash
# The project's test command (README): every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release
