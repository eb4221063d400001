"""Transactions: commit, abort, nesting, read-only, conflicts and retries
between views and threads."""

from __future__ import annotations

import pickle
import struct
import threading

import pytest

import txmap
from workers import incr


def u64(view, off):
    return struct.unpack("<Q", view.read(off, 8))[0]


def test_commit_is_visible_to_another_view(region, view):
    other = region.view()
    with view.transaction():
        view.write(100, b"hello")
    with other.transaction(read_only=True):
        assert other.read(100, 5) == b"hello"


def test_exception_aborts_and_propagates(region, view):
    with view.transaction():
        view.write(0, b"before")
    with pytest.raises(KeyError):
        with view.transaction():
            view.write(0, b"after!")
            raise KeyError("boom")
    assert not view.in_transaction
    with region.view() as other, other.transaction():
        assert other.read(0, 6) == b"before"


def test_reopen_sees_committed_data(path):
    with txmap.Region.create(path, 1 << 16) as r:
        v = r.view()
        with v.transaction():
            v.write(8, b"durable")
        v.close()
    with txmap.Region.open(path) as r:
        v = r.view()
        with v.transaction(read_only=True):
            assert v.read(8, 7) == b"durable"
        v.close()


def test_nested_transactions_fold_and_inner_exception_dooms_outer(view):
    with view.transaction():
        with view.transaction():
            view.write(0, b"x")
        assert view.in_transaction
    with view.transaction(read_only=True):
        assert view.read(0, 1) == b"x"
    # An exception swallowed between an inner and the outer block: the
    # outer commit refuses (nothing of the transaction is kept).
    with pytest.raises(txmap.Aborted):
        with view.transaction():
            view.write(0, b"y")
            try:
                with view.transaction():
                    raise ValueError("inner")
            except ValueError:
                pass
    with view.transaction(read_only=True):
        assert view.read(0, 1) == b"x"


def test_explicit_begin_commit_abort(view):
    view.begin()
    view.write(0, b"a")
    view.commit()
    view.begin()
    view.write(0, b"b")
    view.abort()
    assert not view.in_transaction
    view.begin(read_only=True)
    assert view.read(0, 1) == b"a"
    view.commit()
    with pytest.raises(txmap.TransactionError, match="outside a transaction"):
        view.commit()
    with pytest.raises(txmap.TransactionError, match="outside a transaction"):
        view.write(0, b"c")


def test_abort_inside_with_block_ends_it_quietly(view):
    with view.transaction():
        view.write(0, b"z")
        view.abort()
    with view.transaction(read_only=True):
        assert view.read(0, 1) == b"\0"


def test_read_only_transaction_refuses_stores(view):
    with pytest.raises(txmap.TransactionError, match="read-only"):
        with view.transaction(read_only=True):
            view.write(0, b"no")
    with view.transaction(read_only=True):
        assert view.read(0, 2) == b"\0\0"


def test_conflict_between_two_views(region, view):
    other = region.view()
    view.begin()
    u64(view, 0)
    with other.transaction():
        incr(other, 0)
    incr(view, 0)
    with pytest.raises(txmap.Conflict) as e:
        view.commit()
    assert region.path in str(e.value) and e.value.path == region.path
    assert not view.in_transaction
    with view.transaction(read_only=True):
        assert u64(view, 0) == 1  # the loser's increment is not visible


def test_conflict_raised_at_with_exit(region, view):
    other = region.view()
    with pytest.raises(txmap.Conflict):
        with view.transaction():
            u64(view, 0)
            with other.transaction():
                incr(other, 0)
            incr(view, 0)


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_write_skew_only_under_snapshot_isolation(region, isolation):
    # A reads x and writes y; B reads y and writes x; neither writes what the other writes.
    a, b = region.view(), region.view()
    a.begin(isolation=isolation)
    b.begin(isolation=isolation)
    u64(a, 0), u64(b, 4096)
    a.write(4096, struct.pack("<Q", 1))
    b.write(0, struct.pack("<Q", 1))
    a.commit()
    if isolation == "snapshot":
        b.commit()  # write skew is allowed
        expected = (1, 1)
    else:
        with pytest.raises(txmap.Conflict):
            b.commit()
        expected = (0, 1)
    with a.transaction(read_only=True):
        assert (u64(a, 0), u64(a, 4096)) == expected


def test_region_sync_checkpoint_and_stats(path):
    with txmap.Region.create(path, 1 << 16, durability="async") as r:
        assert r.durability == "async" and r.size == 1 << 16
        v = r.view()
        before = r.stats()["commit_seq"]
        for i in range(5):
            with v.transaction():
                v.write(8 * i, b"12345678")
        r.sync()
        r.checkpoint()
        s = r.stats()
        assert s["commit_seq"] == before + 5 and s["checkpoint_seq"] == s["commit_seq"]
        v.close()


def test_run_retries_a_conflict_and_returns_the_result(region, view):
    other = region.view()
    calls = []

    def step(v):
        calls.append(1)
        n = u64(v, 0)
        if len(calls) == 1:  # a concurrent commit lands meanwhile
            with other.transaction():
                incr(other, 0)
        v.write(0, struct.pack("<Q", n + 10))
        return n

    assert view.run(step) == 1
    assert len(calls) == 2
    with view.transaction(read_only=True):
        assert u64(view, 0) == 11


def test_run_gives_up_after_attempts(region, view):
    other = region.view()

    def always_conflicts(v):
        u64(v, 0)
        with other.transaction():
            incr(other, 0)
        incr(v, 0)

    with pytest.raises(txmap.Conflict):
        view.run(always_conflicts, attempts=3)
    with view.transaction(read_only=True):
        assert u64(view, 0) == 3


def test_run_propagates_other_exceptions_without_retry(view):
    calls = []

    def fails(v):
        calls.append(1)
        v.write(0, b"q")
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        view.run(fails)
    assert calls == [1]
    with view.transaction(read_only=True):
        assert view.read(0, 1) == b"\0"


def test_transactional_decorator(view):
    @txmap.transactional
    def add(v, k):
        m = v.map("counts")
        m[k] = str(int(m.get(k, b"0")) + 1).encode()

    @txmap.transactional(read_only=True)
    def get(v, k):
        return v.map("counts", create=False)[k]

    add(view, b"a")
    add(view, b"a")
    assert get(view, b"a") == b"2"


def test_threads_interleaved_deterministically_conflict(region):
    a_read = threading.Event()
    b_done = threading.Event()
    result = {}

    def thread_a():
        v = region.view()
        try:
            with v.transaction():
                u64(v, 0)
                a_read.set()
                b_done.wait()
                incr(v, 0)
            result["a"] = "committed"
        except txmap.Conflict:
            result["a"] = "conflict"
        v.close()

    def thread_b():
        v = region.view()
        a_read.wait()
        with v.transaction():
            incr(v, 0)
        b_done.set()
        v.close()

    ts = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert result["a"] == "conflict"


def test_threads_increment_with_retries_exactly(region):
    threads, times = 4, 150
    conflicts = []

    def work():
        v = region.view()
        calls = 0

        def step(v):
            nonlocal calls
            calls += 1
            incr(v, 0)

        for _ in range(times):
            v.run(step)
        conflicts.append(calls - times)
        v.close()

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    with region.view() as v, v.transaction(read_only=True):
        assert u64(v, 0) == threads * times


def test_gil_is_released_while_a_commit_waits_for_its_sync(region):
    """Another thread runs while a commit is inside its log sync: it finds
    the committing view busy, which it can see only if the committer let
    the GIL go while holding the view (syncs slowed to 0.3 s to make the
    window wide)."""
    from txmap import _txmap

    v = region.view()
    seen = []
    started = threading.Event()
    done = threading.Event()

    def committer():
        with v.transaction():
            v.write(0, b"x")
            started.set()
        done.set()

    def observer():
        started.wait()
        while not done.is_set():
            try:
                v.in_transaction  # noqa: B018
            except txmap.TransactionError as e:
                seen.append(str(e))
                return

    _txmap._debug_slow_syncs(300_000)
    try:
        ts = [threading.Thread(target=committer), threading.Thread(target=observer)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        _txmap._debug_slow_syncs(0)
    assert seen and "another thread" in seen[0]
    v.close()


def _pages_held_after_reading(region, pages):
    """Reads every page by plain loads (a memoryview) in two read-write
    transactions of a fresh view (the first, like a read-only one, maps the
    region file's pages and copies nothing; the second copies each page it
    reads); the view's private pages during and after the second."""
    with region.view() as v:
        for _ in range(2):
            with v.transaction():
                mv = memoryview(v)
                assert sum(mv[p * 4096] for p in range(pages)) == 0
                during = v.private_bytes // 4096
                mv.release()
        return during, v.private_bytes // 4096


def test_view_private_pages_bounds_what_a_view_keeps(tmp_path):
    pages = 256
    small = txmap.Region.create(
        str(tmp_path / "small.txm"), pages * 4096, view_private_pages=8
    )
    during, after = _pages_held_after_reading(small, pages)
    assert during >= pages and after <= 8
    # The option travels with a pickled region.
    again = pickle.loads(pickle.dumps(small))
    assert _pages_held_after_reading(again, pages)[1] <= 8
    again.close()
    small.close()
    with txmap.Region.create(str(tmp_path / "default.txm"), pages * 4096) as r:
        assert _pages_held_after_reading(r, pages)[1] >= pages
    with pytest.raises(ValueError):
        txmap.Region.create(str(tmp_path / "bad.txm"), 4096, view_private_pages=-1)


def test_named_regions_of_an_environment_commit_together(tmp_path):
    def i64(view, off):
        return struct.unpack("<q", view.read(off, 8))[0]

    env = txmap.Region.open_env(tmp_path / "env")
    a = env.named("a", 4096)
    b = env.named("b", 5000)
    # Page 0 holds the catalog; each region whole pages after the last.
    assert a == (4096, 4096)
    assert b == (8192, 8192)
    assert env.named("a") == a
    with pytest.raises(txmap.InvalidError):
        env.named("a", 8192)
    with pytest.raises(txmap.InvalidError):
        env.named("missing")
    v = env.view()
    with v.transaction():
        v.write(a[0], struct.pack("<q", 100))
    for _ in range(10):
        with v.transaction():
            x, y = i64(v, a[0]), i64(v, b[0])
            assert x + y == 100
            v.write(a[0], struct.pack("<q", x - 5))
            v.write(b[0], struct.pack("<q", y + 5))
    v.close()
    env.close()
    with txmap.Region.open_env(tmp_path / "env") as env:
        assert env.named("b") == b
        with env.view() as w, w.transaction(read_only=True):
            assert (i64(w, a[0]), i64(w, b[0])) == (50, 50)
