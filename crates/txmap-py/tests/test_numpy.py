"""Zero copy: numpy arrays over a view's memory, inside transactions."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import txmap

HERE = os.path.dirname(__file__)
# Wheels for CPython 3.11+ (feature py311) export the buffer protocol on the
# view itself; the abi3 wheel for 3.9+ through view.buffer() only.
needs_view_export = pytest.mark.skipif(
    not txmap._txmap.VIEW_EXPORTS_BUFFER, reason="memoryview(view) needs the py311 wheel"
)


def test_array_is_the_region_memory(view):
    with view.transaction():
        off = view.alloc(8 * 100)
        a = txmap.ndarray(view, np.int64, 100, off)
        assert a.ctypes.data == view.address + off  # no copy
        a[:] = np.arange(100)
        assert view.read(off + 8 * 5, 8) == (5).to_bytes(8, "little")
    with view.transaction(read_only=True):
        assert a.sum() == sum(range(100))


@needs_view_export
def test_memoryview_of_the_view_itself(view):
    with view.transaction():
        m = memoryview(view)
        assert len(m) == len(view) and not m.readonly
        m[10:13] = b"abc"
        m.release()
    with view.transaction(read_only=True):
        m = memoryview(view)
        assert m.readonly and bytes(m[10:13]) == b"abc"
        m.release()


def test_updates_in_place_are_committed_and_seen_elsewhere(region, view):
    with view.transaction():
        off = view.root(8 * 1000)
        a = np.frombuffer(view.buffer(), dtype=np.float64, count=1000, offset=off)
        a += 1.5
        a[::2] *= 2
    other = region.view()
    with other.transaction(read_only=True):
        b = np.frombuffer(other.buffer(), dtype=np.float64, count=1000, offset=off)
        assert b[0] == 3.0 and b[1] == 1.5 and b.sum() == 500 * 3.0 + 500 * 1.5
        del b


def test_aborted_update_is_discarded(view):
    with view.transaction():
        off = view.root(8 * 512)
        a = np.frombuffer(view.buffer(), dtype=np.int64, count=512, offset=off)
        a[:] = 1
    with pytest.raises(ZeroDivisionError):
        with view.transaction():
            a[:] = 42  # the same array, used again in a later transaction
            1 / 0
    with view.transaction(read_only=True):
        assert (a == 1).all()


def test_set_page_access_then_large_update(view):
    n = 1 << 18  # 2 MiB over many pages
    view.grow(4 << 20)
    with view.transaction():
        off = view.alloc(8 * n)
        view.set_page_access(off, 8 * n, write=True)
        a = np.frombuffer(view.buffer(), dtype=np.int64, count=n, offset=off)
        faults = view.faults
        a[:] = 3
        assert view.faults == faults  # declared: no fault per page
    with view.transaction(read_only=True):
        assert int(a.sum()) == 3 * n


def test_read_only_transaction_gives_read_only_arrays(view):
    with view.transaction():
        off = view.root(64)
    with view.transaction(read_only=True):
        a = np.frombuffer(view.buffer(), dtype=np.int64, count=8, offset=off)
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 1
        m = view.buffer()
        with pytest.raises(TypeError, match="read-only"):
            m[0:1] = b"x"
        m.release()
        del a


def test_buffer_outside_a_transaction_is_refused(view):
    with pytest.raises(BufferError, match="only inside a transaction"):
        view.buffer()


@needs_view_export
def test_view_export_outside_a_transaction_is_refused(view):
    with pytest.raises(BufferError, match="only inside a transaction"):
        memoryview(view)
    with view.transaction():
        a = np.frombuffer(view, dtype=np.float64, count=4, offset=8192)
        a[0] = 2.5
        del a
    with pytest.raises(BufferError, match="only inside a transaction"):
        np.frombuffer(view, dtype=np.uint8)


def test_closing_a_view_with_live_arrays_is_refused(region):
    v = region.view()
    with v.transaction():
        a = np.frombuffer(v.buffer(), dtype=np.uint8, count=16)
    assert v.exports == 1
    with pytest.raises(BufferError, match="alive"):
        v.close()
    del a
    assert v.exports == 0
    v.close()
    with pytest.raises(txmap.TransactionError, match="closed"):
        v.begin()


def test_store_through_a_stale_array_stops_the_process_and_is_not_applied(path):
    txmap.Region.create(path, 1 << 20).close()
    p = subprocess.run(
        [sys.executable, os.path.join(HERE, "workers.py"), "stale_store", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "committed" in p.stdout and "store applied" not in p.stdout
    assert p.returncode != 0
    assert "store to a view outside a transaction" in p.stderr
    with txmap.Region.open(path) as r:
        v = r.view()
        with v.transaction(read_only=True):
            off = v.root(64)
            assert np.frombuffer(v.buffer(), dtype=np.int64, count=1, offset=off)[0] == 7
        v.close()
