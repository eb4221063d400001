#!/usr/bin/env bash
# Counts CPU samples (perf, 5 kHz, DWARF call graphs) in the redb workload's
# bulk load of one txmap-bench binary, and in the steps it is made of
# (docs/benchmarks.md, "Bulk load (issue 20)").
# Usage: scripts/bulk-profile.sh BIN [ENTRIES] [SEED]
set -euo pipefail
bin=$1
entries=${2:-20000}
seed=${3:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/store"
# 16 KiB of stack per sample: the leaf split's two node buffers (8 KiB)
# hid the put path's frames from 8 KiB.
perf record -q -F 5000 --call-graph dwarf,16384 -o "$dir/perf.data" \
    "$bin" --peer-worker "redb|txmap-btree|$dir/store|$entries,1,1,1,1,1|$seed" >/dev/null 2>&1
perf script -i "$dir/perf.data" -F ip,sym 2>/dev/null | python3 -c '
import sys, collections
keys = ["copy_snapshot", "RegionInner::commit", "Mvcc::publish", "encode_record",
        "split_leaf", "alloc_in", "prepare_commit", "insert_in_place", "descend",
        "split_then_insert", "install_zeros_ahead", "Mvcc::reserve", "view::diff"]
n, c = 0, collections.Counter()
for s in sys.stdin.read().split("\n\n"):
    # The bulk load is a write; the removals step (also a write) deletes.
    if "TxSession as txmap_peers::Session>::write" not in s or "BTree::delete" in s:
        continue
    n += 1
    for k in keys:
        if k in s:
            c[k] += 1
print(n, " ".join(f"{k}={c[k]}" for k in keys))'
