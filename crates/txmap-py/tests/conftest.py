"""Fixtures of the txmap Python tests."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import txmap  # noqa: E402


@pytest.fixture
def path(tmp_path):
    """A region path in a fresh directory (pytest --basetemp under target/: ext4)."""
    return str(tmp_path / "t.txm")


@pytest.fixture
def region(path):
    r = txmap.Region.create(path, 1 << 20)
    yield r
    r.close()


@pytest.fixture
def view(region):
    v = region.view()
    yield v
    v.abort()
