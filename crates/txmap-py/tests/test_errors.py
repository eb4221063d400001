"""Bad arguments and bad files: Python exceptions that name the file."""

from __future__ import annotations

import os
import pickle

import pytest

import txmap


def test_create_bad_arguments(path):
    with pytest.raises(ValueError, match="size must be positive"):
        txmap.Region.create(path, 0)
    with pytest.raises(ValueError, match="size must be positive"):
        txmap.Region.create(path, -5)
    with pytest.raises(TypeError):
        txmap.Region.create(path, "big")
    with pytest.raises(ValueError, match="durability"):
        txmap.Region.create(path, 4096, durability="sometimes")
    with pytest.raises(TypeError):
        txmap.Region.create(12, 4096)
    assert not os.path.exists(path)


def test_create_over_an_existing_region(path, region):
    with pytest.raises(FileExistsError) as e:
        txmap.Region.create(path, 4096)
    assert isinstance(e.value, txmap.Error) and path in str(e.value)


def test_open_missing_file(tmp_path):
    p = str(tmp_path / "missing.txm")
    with pytest.raises(FileNotFoundError) as e:
        txmap.Region.open(p)
    assert isinstance(e.value, txmap.RegionNotFoundError) and p in str(e.value)
    assert e.value.errno == 2 and e.value.path == p


def test_open_garbage_file(tmp_path):
    p = tmp_path / "garbage.txm"
    p.write_bytes(os.urandom(10000))
    with pytest.raises(txmap.Error) as e:
        txmap.Region.open(str(p))
    assert str(p) in str(e.value) and "not a txmap region" in str(e.value)


def test_open_empty_file_and_directory(tmp_path):
    p = tmp_path / "empty.txm"
    p.write_bytes(b"")
    with pytest.raises(txmap.Error, match="empty.txm"):
        txmap.Region.open(str(p))
    with pytest.raises(txmap.Error, match=str(tmp_path)):
        txmap.Region.open(str(tmp_path))


def test_open_region_with_missing_log(path):
    txmap.Region.create(path, 4096).close()
    os.remove(path + "-log")
    with pytest.raises(FileNotFoundError, match="log"):
        txmap.Region.open(path)


def test_open_damaged_region_header(path):
    txmap.Region.create(path, 4096).close()
    with open(path, "r+b") as f:
        f.write(b"\xff" * 4096)
    with pytest.raises(txmap.Error) as e:
        txmap.Region.open(path)
    assert path in str(e.value)


def test_open_or_create_and_grow(path):
    with txmap.Region.open(path, 8192, create=True) as r:
        assert r.size == 8192
    with txmap.Region.open(path, 1 << 16) as r:
        assert r.size == 1 << 16
    with pytest.raises(ValueError, match="needs a size"):
        txmap.Region.open(path + "2", create=True)


def test_view_bad_arguments(view):
    with view.transaction():
        with pytest.raises(ValueError, match="outside the region"):
            view.read(len(view) - 2, 4)
        with pytest.raises(ValueError, match="non-negative"):
            view.read(-1, 4)
        with pytest.raises(ValueError, match="outside the region"):
            view.write(len(view), b"x")
        with pytest.raises(TypeError, match="bytes"):
            view.write(0, "text")
        with pytest.raises(ValueError, match="isolation"):
            view.transaction(isolation="chaos")
    with pytest.raises(ValueError, match="attempts"):
        view.run(lambda v: None, attempts=0)


def test_closed_region_and_view(path):
    r = txmap.Region.create(path, 4096)
    v = r.view()
    r.close()
    r.close()  # twice is fine
    with pytest.raises(txmap.TransactionError, match="closed"):
        r.view()
    with v.transaction():  # views keep the region open
        v.write(0, b"ok")
    v.close()
    with pytest.raises(txmap.TransactionError, match="closed"):
        v.read(0, 1)


def test_views_do_not_pickle(view):
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(view)


def test_faulthandler_enabled_after_a_view_is_refused_not_a_crash(path):
    import subprocess
    import sys

    txmap.Region.create(path, 1 << 16).close()
    code = f"""
import faulthandler, txmap
faulthandler.disable()
r = txmap.Region.open({path!r})
v = r.view()
with v.transaction():
    v.write(0, b"ok")
faulthandler.enable()  # takes SIGSEGV over from txmap
try:
    v.begin()
except txmap.Error as e:
    print("refused:", e)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout and "faulthandler" in p.stdout and path in p.stdout
