"""The collections as Python objects: dict-like maps against a dict model
(hypothesis), ordered iteration and ranges, the array list as a sequence."""

from __future__ import annotations

import collections.abc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txmap

KINDS = ["btree", "cobtree", "lhash"]

keys = st.binary(min_size=0, max_size=24)
values = st.binary(min_size=0, max_size=600)  # some past a page fragment
ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), keys, values),
        st.tuples(st.just("del"), keys, st.just(b"")),
        st.tuples(st.just("pop"), keys, st.just(b"")),
    ),
    max_size=40,
)
txns = st.lists(st.tuples(ops, st.booleans()), min_size=1, max_size=8)


def apply(m, model, op, k, v):
    if op == "set":
        m[k] = v
        model[k] = v
    elif op == "del":
        if k in model:
            del m[k]
            del model[k]
        else:
            with pytest.raises(KeyError):
                del m[k]
    else:
        assert m.pop(k, None) == model.pop(k, None)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(txns=txns)
def test_map_matches_a_dict_model(tmp_path_factory, kind, txns):
    path = str(tmp_path_factory.mktemp("m") / "m.txm")
    with txmap.Region.create(path, 1 << 20, durability="async") as r:
        v = r.view()
        v.map("m", kind)
        model: dict[bytes, bytes] = {}
        for ops_, commit in txns:
            before = dict(model)
            try:
                with v.transaction():
                    m = v.map("m", kind, create=False)
                    for op, k, val in ops_:
                        apply(m, model, op, k, val)
                    if not commit:
                        raise RuntimeError("abort")
            except RuntimeError:
                model = before  # aborted: nothing of it stays
            with v.transaction(read_only=True):
                m = v.map("m", kind, create=False)
                assert len(m) == len(model)
                assert list(m.items()) == sorted(model.items())
                for k in list(model)[:5]:
                    assert k in m and m[k] == model[k]
        v.close()


@pytest.mark.parametrize("kind", ["btree", "cobtree"])
def test_tree_range_and_order_over_many_entries(view, kind):
    n = 2000  # several iteration steps
    with view.transaction():
        m = view.map("t", kind)
        for i in range(n):
            m[b"k%05d" % i] = b"v%d" % i
    with view.transaction(read_only=True):
        m = view.map("t")
        assert m.kind == kind
        ks = list(m)
        assert ks == sorted(ks) and len(ks) == n
        got = list(m.range(b"k00100", b"k00110"))
        assert got == [(b"k%05d" % i, b"v%d" % i) for i in range(100, 110)]
        assert [k for k, _ in m.range(lo=b"k01995")] == [b"k%05d" % i for i in range(1995, 2000)]
        assert list(m.values())[:2] == [b"v0", b"v1"]


def test_map_dict_protocol(view):
    with view.transaction():
        m = view.map("d")
        assert isinstance(m, collections.abc.MutableMapping)
        m.update({b"a": b"1", b"b": b"2"})
        m.update([(b"c", bytearray(b"3"))])
        assert m.setdefault(b"a", b"9") == b"1" and m.setdefault(b"z", b"26") == b"26"
        assert m.get(b"nope") is None and m.get(b"nope", 5) == 5
        with pytest.raises(KeyError):
            m[b"nope"]
        with pytest.raises(TypeError, match="bytes"):
            m["str key"] = b"x"
        with pytest.raises(TypeError, match="bytes"):
            m[b"k"] = "str value"
        assert "str key" not in m
        m.clear()
        assert len(m) == 0


def test_map_needs_a_transaction_and_iterators_belong_to_theirs(view):
    m = view.map("o")  # opening alone runs a transaction of its own
    with pytest.raises(txmap.TransactionError, match="outside a transaction"):
        m[b"a"] = b"b"
    with view.transaction():
        m[b"a"] = b"b"
        it = iter(m)
    with pytest.raises(txmap.TransactionError, match="ended"):
        next(it)
    with pytest.raises(txmap.TransactionError, match="read-only"):
        with view.transaction(read_only=True):
            m[b"x"] = b"y"


def test_map_kinds_and_names(view):
    with view.transaction():
        view.map("h", "lhash")
        view.array("arr", 4)
        assert sorted(view.names()) == [("arr", "array"), ("h", "lhash")]
        with pytest.raises(txmap.InvalidError, match="is a lhash, not a btree"):
            view.map("h", "btree")
        with pytest.raises(txmap.InvalidError, match="not an array"):
            view.array("h", 4)
        with pytest.raises(ValueError, match="map kind"):
            view.map("x", "skiplist")
        with pytest.raises(ValueError):
            view.map("a-name-much-longer-than-thirty-two-bytes")
    with pytest.raises(KeyError):
        view.map("absent", create=False)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.binary(min_size=6, max_size=6), max_size=300), pops=st.integers(0, 20))
def test_array_matches_a_list_model(tmp_path_factory, items, pops):
    path = str(tmp_path_factory.mktemp("a") / "a.txm")
    with txmap.Region.create(path, 1 << 20, durability="async") as r:
        v = r.view()
        with v.transaction():
            a = v.array("a", 6)
            a.extend(items)
            model = list(items)
            for _ in range(min(pops, len(model))):
                assert a.pop() == model.pop()
            if model:
                a[-1] = b"LASTxx"
                model[-1] = b"LASTxx"
        with v.transaction(read_only=True):
            a = v.array("a")
            assert len(a) == len(model) and list(a) == model and a[:] == model
            assert a[::3] == model[::3]
            if model:
                assert a[0] == model[0] and a[-1] == model[-1]
            with pytest.raises(IndexError):
                a[len(model)]
        v.close()


def test_array_item_size_and_offset(view):
    with view.transaction():
        a = view.array("p", 8, create=True)
        with pytest.raises(ValueError, match="8-byte items"):
            a.append(b"short")
        with pytest.raises(IndexError):
            a.pop()
        a.append((12345).to_bytes(8, "little"))
        assert view.read(a.offset(0), 8) == (12345).to_bytes(8, "little")
        with pytest.raises(txmap.InvalidError, match="needs an itemsize"):
            view.array("new")
