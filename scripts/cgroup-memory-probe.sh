#!/usr/bin/env bash
# Issue 20 probe (docs/design/shared-pages.md): inside a memory cgroup limited
# to LIMIT_MIB, which kinds of memory can hold SIZE_MIB of pages without the
# process being killed? Reads of a file mapping (page cache: reclaimable),
# writes to a private file mapping (anonymous copies) and a memfd (shared
# memory) are tried in turn. Needs root and python3; uses cgroup v2's
# memory.max when the memory controller is there, else v1's
# memory.limit_in_bytes. Creates and removes one child cgroup of its own.
set -u
LIMIT_MIB=${LIMIT_MIB:-64}
SIZE_MIB=${SIZE_MIB:-256}
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/txmap-cgprobe.XXXXXX")
trap 'rm -rf "$dir"' EXIT

v2=""
for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  if grep -qw memory "$root/cgroup.controllers" 2>/dev/null; then v2=$root; fi
done
if [ -n "$v2" ]; then
  own=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
  cg="$v2$own/txmap-probe-$$"
  mkdir "$cg" || exit 1
  echo $((LIMIT_MIB << 20)) > "$cg/memory.max"
  echo "cgroup v2: $cg, memory.max = $LIMIT_MIB MiB"
else
  own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  cg="/sys/fs/cgroup/memory$own/txmap-probe-$$"
  mkdir "$cg" || { echo "no usable memory cgroup"; exit 1; }
  echo $((LIMIT_MIB << 20)) > "$cg/memory.limit_in_bytes"
  echo "cgroup v1 (no memory controller in cgroup v2 here): $cg, memory.limit_in_bytes = $LIMIT_MIB MiB"
fi
trap 'rmdir "$cg" 2>/dev/null; rm -rf "$dir"' EXIT
echo "swap: $(awk '/SwapTotal/ {print $2, $3}' /proc/meminfo)"

dd if=/dev/urandom of="$dir/region" bs=1M count="$SIZE_MIB" status=none
cat > "$dir/probe.py" <<'PY'
import mmap, os, random, sys
P = 4096
kind, path = sys.argv[1], sys.argv[2]
if kind == "file-read":
    f = open(path, "rb"); m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    n = len(m) // P; s = 0
    for i in range(n): s += m[i * P]
    for _ in range(50000): s += m[random.randrange(n) * P]
elif kind == "file-private-write":
    f = open(path, "rb"); m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    for i in range(len(m) // P): m[i * P] = 1
else:
    size = os.path.getsize(path)
    fd = os.memfd_create("probe"); os.ftruncate(fd, size)
    m = mmap.mmap(fd, size)
    for i in range(size // P): m[i * P] = 1
PY
for kind in file-read file-private-write memfd-write; do
  ( echo $BASHPID > "$cg/cgroup.procs"; exec python3 "$dir/probe.py" $kind "$dir/region" )
  rc=$?
  if [ $rc -eq 0 ]; then verdict="completed"; else verdict="killed (exit $rc)"; fi
  echo "$kind of $SIZE_MIB MiB under $LIMIT_MIB MiB: $verdict"
done
