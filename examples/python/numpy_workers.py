"""Worker processes update one numpy array in a region, transactionally.

    python examples/python/numpy_workers.py [REGION] [--workers N] [--rounds R]

A region holds a grid of float64 cells and a step counter. Each worker
process repeatedly takes a transaction, reads the whole grid (zero copy:
the array is the region's memory), adds its own contribution to one row
and bumps the counter. Conflicting transactions are retried by
``View.run``; because each one is serializable, the final grid is exactly
the sum of every committed step, whatever the interleaving. Run it twice:
the state persists (and survives a crash of any worker).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile

import numpy as np

import txmap

ROWS, COLS = 8, 512
CELLS = ROWS * COLS


def layout(view: txmap.View) -> tuple[np.ndarray, np.ndarray]:
    """The grid and the counter, as arrays over the view (inside a transaction)."""
    off = view.root(8 * (CELLS + 1))  # the region's root object: same offset everywhere
    buf = view.buffer()
    grid = np.frombuffer(buf, dtype=np.float64, count=CELLS, offset=off).reshape(ROWS, COLS)
    steps = np.frombuffer(buf, dtype=np.int64, count=1, offset=off + 8 * CELLS)
    return grid, steps


def worker(region: txmap.Region, w: int, rounds: int) -> int:
    # `region` arrived pickled: this process opened the region itself.
    view = region.view()
    retries = 0

    def step(v: txmap.View) -> None:
        nonlocal retries
        retries += 1
        grid, steps = layout(v)
        row = (w + int(steps[0])) % ROWS  # depends on shared state: conflicts are real
        grid[row] += 1.0
        steps[0] += 1

    for _ in range(rounds):
        view.run(step)
    region.close()
    return retries - rounds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("region", nargs="?", default=os.path.join(tempfile.gettempdir(), "numpy-workers.txm"))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=200)
    a = ap.parse_args()
    region = txmap.Region.open(a.region, 1 << 20, create=True)
    view = region.view()
    with view.transaction():  # the first run allocates the root object
        grid, steps = layout(view)
        before = int(steps[0])
        del grid, steps
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(a.workers) as pool:
        retries = pool.starmap(worker, [(region, w, a.rounds) for w in range(a.workers)])
    with view.transaction(read_only=True):
        grid, steps = layout(view)
        total = float(grid.sum())
        print(f"steps {int(steps[0])} (this run {int(steps[0]) - before}), grid sum {total:.0f}, "
              f"retried transactions {sum(retries)}")
        assert total == int(steps[0]) * COLS, "every committed step added one to a whole row"
        del grid, steps
    view.close()
    region.close()


if __name__ == "__main__":
    main()
