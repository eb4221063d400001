"""The examples in examples/python run and check their own invariants."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "python")


@pytest.mark.parametrize(
    "script,args",
    [
        ("numpy_workers.py", ["--workers", "2", "--rounds", "30"]),
        ("kv_service.py", ["--workers", "2", "--requests", "40"]),
        ("ticket_shop.py", ["--workers", "3", "--orders", "40"]),
    ],
)
def test_example_runs_twice_on_one_region(tmp_path, script, args):
    region = str(tmp_path / "ex.txm")
    for _ in range(2):  # the second run continues from the first one's state
        p = subprocess.run(
            [sys.executable, os.path.join(EXAMPLES, script), region, *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr
    if script == "kv_service.py":
        assert p.stdout.startswith("160 requests logged, 160 page hits")
    elif script == "ticket_shop.py":
        assert "stock and sales agree" in p.stdout
    else:
        assert "steps 120 (this run 60)" in p.stdout
