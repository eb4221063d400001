"""Issue 18 from Python: pause and resume, commutative updates (add, min,
max), registered operations, nested top actions compensated at abort and
after the parent's process was SIGKILLed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import threading

import pytest
import workers

import txmap

HERE = os.path.dirname(__file__)
PAGE = txmap.PAGE_SIZE


def u64(view: txmap.View, off: int) -> int:
    return struct.unpack("<Q", view.read(off, 8))[0]


def i64(view: txmap.View, off: int) -> int:
    return struct.unpack("<q", view.read(off, 8))[0]


def committed(region: txmap.Region, off: int, fmt: str = "<Q") -> int:
    v = region.view()
    try:
        with v.transaction(read_only=True):
            return struct.unpack(fmt, v.read(off, 8))[0]
    finally:
        v.close()


def put(view: txmap.View, off: int, x: int) -> None:
    view.write(off, struct.pack("<Q", x))


# --- pause and resume ---------------------------------------------------


def test_a_paused_transaction_keeps_its_writes_while_others_commit(region, view):
    with view.transaction():
        put(view, 0, 7)
        p = view.pause()
        assert not view.in_transaction
        assert isinstance(p.snapshot, int)
        # Another transaction on the same view: it sees committed data only.
        with view.transaction():
            assert u64(view, 0) == 0
            put(view, PAGE, 9)
        assert committed(region, PAGE) == 9
        assert committed(region, 0) == 0  # the paused store is invisible
        view.resume(p)
        assert view.in_transaction
        assert u64(view, 0) == 7
        assert p.snapshot is None
    assert committed(region, 0) == 7
    assert committed(region, PAGE) == 9


def test_a_resumed_transaction_validates_what_it_read_before_the_pause(region, view):
    other = region.view()
    view.begin()
    assert u64(view, 0) == 0
    p = view.pause()
    with other.transaction():
        put(other, 0, 1)
    view.resume(p)
    put(view, PAGE, u64(view, 0) + 10)  # still its snapshot: 0
    assert u64(view, PAGE) == 10
    with pytest.raises(txmap.Conflict):
        view.commit()
    assert committed(region, PAGE) == 0
    other.close()


def test_resume_needs_a_view_outside_a_transaction_and_works_once(region, view):
    view.begin()
    put(view, 0, 3)
    p = view.pause()
    view.begin()
    with pytest.raises(txmap.TransactionError):
        view.resume(p)
    view.abort()
    other = region.view()  # any view of the region in this process
    other.resume(p)
    with pytest.raises(txmap.TransactionError):
        view.resume(p)
    other.commit()
    assert committed(region, 0) == 3
    other.close()
    with pytest.raises(txmap.TransactionError):
        view.pause()  # outside a transaction


def test_a_discarded_paused_transaction_is_rolled_back(region, view):
    view.begin()
    put(view, 0, 5)
    p = view.pause()
    p.discard()
    with pytest.raises(txmap.TransactionError):
        view.resume(p)
    assert committed(region, 0) == 0


# --- commutative updates ------------------------------------------------


def test_concurrent_adds_to_one_counter_both_commit(region):
    a, b = region.view(), region.view()
    a.begin()
    b.begin()
    a.add_u64(0, 5)
    b.add_u64(0, 7)
    assert u64(a, 0) == 5  # the transaction sees its own add
    a.commit()
    b.commit()  # no conflict: applied again to the newest value
    assert committed(region, 0) == 12
    # The same by a read and a write: the second commit conflicts.
    a.begin()
    b.begin()
    put(a, 0, u64(a, 0) + 1)
    put(b, 0, u64(b, 0) + 1)
    a.commit()
    with pytest.raises(txmap.Conflict):
        b.commit()
    assert committed(region, 0) == 13
    a.close()
    b.close()


def test_commutative_appends_to_one_array_both_commit(region):
    a, b = region.view(), region.view()
    with a.transaction():
        arr_a = a.array("log", 8)
        arr_a.reserve(100)
    with b.transaction():
        arr_b = b.array("log")
    item = lambda x: struct.pack("<Q", x)  # noqa: E731
    a.begin()
    b.begin()
    assert arr_a.append_commutative(item(1)) == 0
    assert arr_b.append_commutative(item(2)) == 0  # provisional, as a's
    b.commit()
    a.commit()  # no conflict: appended to the newest array, after b's item
    with a.transaction(read_only=True):
        assert list(arr_a) == [item(2), item(1)]
    # Reading the length validates it: the second commit conflicts.
    a.begin()
    b.begin()
    arr_a.append_commutative(item(len(arr_a)))
    arr_b.append_commutative(item(3))
    b.commit()
    with pytest.raises(txmap.Conflict):
        a.commit()
    with a.transaction(read_only=True):
        assert list(arr_a) == [item(2), item(1), item(3)]
    a.close()
    b.close()


def test_add_min_max_signed_and_unsigned(region, view):
    with view.transaction():
        view.add_u64(0, 10)
        view.add_u64(0, -3)  # wrapping subtraction
        view.add_i64(8, -20)
        view.add_i64(8, 5)
        view.max_u64(16, 40)
        view.max_u64(16, 30)
        view.min_u64(24, 2**64 - 1)
        view.min_u64(24, 9)
        view.min_i64(32, -7)
        view.min_i64(32, 3)
        view.max_i64(40, -7)
        view.max_i64(40, -9)
    assert committed(region, 0) == 7
    assert committed(region, 8, "<q") == -15
    assert committed(region, 16) == 40
    assert committed(region, 24) == 0  # min of 0 and the operands
    assert committed(region, 32, "<q") == -7
    assert committed(region, 40, "<q") == 0  # max of 0 and the operands
    with view.transaction():
        view.add_u64(0, 1)
        view.abort()
    assert committed(region, 0) == 7  # an abort drops its adds


def test_commutative_update_errors(region, view):
    with pytest.raises(txmap.TransactionError):
        view.add_u64(0, 1)  # outside a transaction
    with view.transaction():
        with pytest.raises(txmap.InvalidError):
            view.add_u64(4, 1)  # not 8-byte aligned
        with pytest.raises(txmap.InvalidError):
            view.add_i64(0, 2**63)  # out of range
        with pytest.raises(txmap.InvalidError):
            view.min_u64(0, -1)
        with pytest.raises(txmap.InvalidError):
            view.add_u64(1 << 40, 1)  # past the region
    view.begin(read_only=True)
    with pytest.raises(txmap.TransactionError):
        view.add_u64(0, 1)
    view.abort()
    assert committed(region, 0) == 0


def test_threads_adding_to_one_counter_never_conflict(region):
    threads, times = 4, 100
    conflicts = []

    def work() -> None:
        conflicts.append(workers.counter_worker(region, 0, times, by_add=True))

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert committed(region, 0) == threads * times
    assert conflicts == [0] * threads


def test_processes_adding_to_one_counter_lose_no_add(path):
    procs, times = 3, 60
    txmap.Region.create(path, 1 << 20).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(procs) as pool:
        conflicts = pool.starmap(workers.counter_worker_by_path, [(path, 0, times, True)] * procs)
    assert all(c >= 0 for c in conflicts)
    with txmap.Region.open(path) as r:
        assert committed(r, 0) == procs * times


# --- registered operations ------------------------------------------------


def test_apply_runs_a_built_in_operation_and_unknown_ones_fail(region, view):
    assert txmap.is_registered(txmap.ADD_U64)
    assert not txmap.is_registered(txmap.FIRST_USER_OP + 999)
    with view.transaction():
        view.apply(txmap.ADD_U64, struct.pack("<QQ", 0, 41))
        assert u64(view, 0) == 41
    assert committed(region, 0) == 41
    with view.transaction():
        with pytest.raises(txmap.InvalidError):
            view.apply(txmap.FIRST_USER_OP + 999, b"")
    with view.transaction(isolation="snapshot"):
        with pytest.raises(txmap.InvalidError):
            view.apply(txmap.ADD_U64, struct.pack("<QQ", 0, 1))


# --- nested top actions ---------------------------------------------------


def add_by_store(off: int, x: int):
    """A nested action adding ``x`` to the u64 at ``off`` by a load and a
    store; returns (the action, its undo's arguments)."""

    def action(v: txmap.View) -> int:
        n = u64(v, off) + x
        put(v, off, n)
        return n

    return action, struct.pack("<QQ", off, (-x) % (1 << 64))


def test_a_nested_action_commits_at_once_and_is_undone_when_its_parent_aborts(region, view):
    action, undo = add_by_store(PAGE, 7)
    for end in ("abort", "raise", "commit"):
        try:
            with view.transaction():
                put(view, 0, 1)
                assert view.nested_top(action, txmap.ADD_U64, undo) == 7
                # Visible to everyone at once; the parent's own store is not.
                assert committed(region, PAGE) == 7
                assert committed(region, 0) == 0
                if end == "abort":
                    view.abort()
                elif end == "raise":
                    raise KeyError("parent fails")
        except KeyError:
            pass
        if end != "commit":
            assert committed(region, PAGE) == 0, end  # compensated
            assert committed(region, 0) == 0, end
    assert committed(region, PAGE) == 7
    assert committed(region, 0) == 1


def test_a_parent_that_conflicts_has_its_actions_compensated_before_the_retry(region, view):
    other = region.view()
    action, undo = add_by_store(PAGE, 5)
    attempts = 0

    def parent(v: txmap.View) -> None:
        nonlocal attempts
        attempts += 1
        n = u64(v, 0)
        v.nested_top(action, txmap.ADD_U64, undo)
        if attempts == 1:
            with other.transaction():  # invalidates what the parent read
                put(other, 0, 100)
        put(v, 0, n + 1)

    view.run(parent)
    assert attempts == 2
    assert committed(region, PAGE) == 5  # the first attempt's action undone
    assert committed(region, 0) == 101
    other.close()


def test_an_exception_in_the_action_rolls_it_back_and_the_parent_goes_on(region, view):
    with view.transaction():
        put(view, 0, 1)

        def failing(v: txmap.View) -> None:
            put(v, PAGE, 9)
            raise ValueError("no")

        with pytest.raises(ValueError):
            view.nested_top(failing, txmap.ADD_U64, struct.pack("<QQ", PAGE, 1))
        assert view.in_transaction
        assert u64(view, 0) == 1
    assert committed(region, PAGE) == 0
    assert committed(region, 0) == 1


def test_the_bracketing_form(region, view):
    undo = struct.pack("<QQ", PAGE, (-3) % (1 << 64))
    view.begin()
    with pytest.raises(txmap.TransactionError):
        view.nta_end()  # none open
    view.nta_begin(txmap.ADD_U64, undo)
    put(view, PAGE, 3)
    with pytest.raises(txmap.TransactionError):
        view.commit()  # the action ends with nta_end
    view.nta_end()
    view.nta_begin(txmap.ADD_U64, undo)
    put(view, 2 * PAGE, 4)
    view.nta_abort()  # rolled back, no undo registered
    view.abort()
    assert committed(region, PAGE) == 0
    assert committed(region, 2 * PAGE) == 0
    with pytest.raises(txmap.TransactionError):
        view.nta_begin(txmap.ADD_U64, undo)  # outside a transaction
    with view.transaction():
        with pytest.raises(txmap.InvalidError):
            view.nta_begin(txmap.FIRST_USER_OP + 999, b"")  # not registered


def test_a_killed_parents_nested_action_is_compensated_by_the_next_opener(path):
    txmap.Region.create(path, 1 << 20).close()
    p = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "workers.py"), "nta_holder", path],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "held"
        with txmap.Region.open(path) as r:
            assert committed(r, 0) == 5  # the action committed
            assert committed(r, 8) == 0  # its parent did not
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert p.returncode == -signal.SIGKILL
    finally:
        p.kill()
        p.stdout.close()
    with txmap.Region.open(path) as r:
        assert committed(r, 0) == 0
        assert committed(r, 8) == 0
