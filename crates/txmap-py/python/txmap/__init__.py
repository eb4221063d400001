"""txmap: ACID transactions over memory-mapped files.

Map a region, begin a transaction, read and write it (through the
accessors, the buffer protocol with numpy, or the named maps and arrays),
commit::

    import txmap
    region = txmap.Region.open("data.txm", 1 << 20, create=True)
    view = region.view()                      # one view per thread
    with view.transaction():                  # commits on exit
        m = view.map("users")                 # a B+-tree of bytes
        m[b"alice"] = b"admin"

    @txmap.transactional                      # retried on conflict
    def bump(view, key):
        m = view.map("counters")
        m[key] = str(int(m.get(key, b"0")) + 1).encode()

Counters that many transactions update: ``view.add_u64(offset, 1)`` (also
``add_i64``, ``min_u64``/``max_u64``, ``min_i64``/``max_i64``) is applied again
at commit to the newest value, so concurrent adders do not conflict.
``view.pause()``/``view.resume(p)`` set a transaction aside and continue it.
``view.nested_top(fn, undo, undo_args)`` commits ``fn``'s work at once and
undoes it (by a built-in operation such as ``txmap.ADD_U64``, or one
registered in Rust) if the enclosing transaction does not commit; Python
functions cannot be registered as operations (recovery must be able to run
them in any process that opens the region).

A forked child cannot use its parent's regions and views: it opens the
region again (``Region`` objects pickle as their path, so ``multiprocessing``
passes them to workers, which open their own).
"""

from __future__ import annotations

import functools as _functools
from typing import Any, Callable, TypeVar

from ._errors import (
    Aborted,
    Conflict,
    CorruptError,
    Error,
    FileError,
    InvalidError,
    RegionExistsError,
    RegionNotFoundError,
    SnapshotTooOld,
    TransactionError,
)
from ._txmap import (
    ADD_I64,
    ADD_U64,
    FIRST_USER_OP,
    MAX_I64,
    MAX_U64,
    MIN_I64,
    MIN_U64,
    PAGE_SIZE,
    Array,
    Map,
    Paused,
    Region,
    Transaction,
    View,
    is_registered,
)

__all__ = [
    "ADD_I64",
    "ADD_U64",
    "FIRST_USER_OP",
    "MAX_I64",
    "MAX_U64",
    "MIN_I64",
    "MIN_U64",
    "Aborted",
    "Array",
    "Conflict",
    "CorruptError",
    "Error",
    "FileError",
    "InvalidError",
    "Map",
    "PAGE_SIZE",
    "Paused",
    "Region",
    "RegionExistsError",
    "RegionNotFoundError",
    "SnapshotTooOld",
    "Transaction",
    "TransactionError",
    "View",
    "is_registered",
    "ndarray",
    "transactional",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def transactional(fn: _F | None = None, **options: Any) -> Any:
    """Decorator: ``fn(view, *args, **kwargs)`` runs in a transaction of
    ``view``, committed when it returns and retried on ``Conflict`` with
    backoff (``View.run``). ``options`` are ``View.run``'s: ``read_only``,
    ``isolation``, ``attempts``. Use as ``@transactional`` or
    ``@transactional(read_only=True)``."""

    def wrap(f: _F) -> _F:
        @_functools.wraps(f)
        def run(view: View, *args: Any, **kwargs: Any) -> Any:
            return view.run(lambda v: f(v, *args, **kwargs), **options)

        return run  # type: ignore[return-value]

    return wrap(fn) if fn is not None else wrap


def ndarray(view: View, dtype: Any, shape: Any, offset: int = 0) -> Any:
    """A numpy array of ``dtype`` and ``shape`` at ``offset`` in the region,
    sharing the view's memory (no copy). Inside a transaction only; stores
    to it are part of the transaction. Needs numpy."""
    import numpy as np

    if isinstance(shape, int):
        shape = (shape,)
    count = 1
    for n in shape:
        count *= n
    return np.frombuffer(view.buffer(), dtype=dtype, count=count, offset=offset).reshape(shape)


import collections.abc as _abc  # noqa: E402

_abc.MutableMapping.register(Map)
_abc.Sequence.register(Array)
