#!/usr/bin/env bash
# The Python package's tests: builds the wheel into target/pyenv and runs pytest.
# Fails when any test fails or when pytest collects no test (exit status 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/python-env.sh
rm -rf target/pytest
status=0
target/pyenv/bin/python -m pytest crates/txmap-py/tests -q -p no:cacheprovider \
  --basetemp=target/pytest "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "python tests failed (pytest exit status $status)" >&2
  exit "$status"
fi
