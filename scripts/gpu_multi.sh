#!/usr/bin/env bash
# Two GPUs, one rank each: an NCCL all-reduce captured in a graph, saved per rank (one archive folder per
# rank), loaded in fresh processes on every rank and compared bit for bit with the native graph
# (tests/gpu/multi_rank.py). Needs a 2-GPU machine (nvidia-h100-x2 / nvidia-h200-x2); with fewer GPUs it
# prints "skipped" and exits 0. Logs and the JSON report go to $OUT; a short summary is printed last.
#
#   bash scripts/gpu_multi.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
# NVLink multicast stays off in every process this starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,P2P,ALLOC}

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_carried_wheels
nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader | tee "$OUT/multi-machine.txt"
nvidia-smi topo -m >> "$OUT/multi-machine.txt" 2>&1 || true
if ! build_native . "$OUT/build.log"; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
export FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so

WORK=$(mktemp -d /tmp/foundry-ranks-XXXX)
# The phases run apart, so that what SAVE wrote is inspected before LOAD runs (and kept if LOAD hangs).
timeout 240 python3 -m foundry.cli run -- python3 tests/gpu/multi_rank.py "$WORK" save > "$OUT/multi-save.log" 2>&1
RC=$?
tail -1 "$OUT/multi-save.log" > "$OUT/multi-save.json"
for r in 0 1; do
  [ -d "$WORK/rank_$r" ] && python3 -m foundry.cli inspect "$WORK/rank_$r" > "$OUT/inspect-rank_$r.txt" 2>&1
done
# What differs between the ranks, and between two SAVEs of rank 0 in fresh processes (process state).
timeout 240 python3 -m foundry.cli run -- python3 tests/gpu/multi_rank.py "$WORK" resave > "$OUT/multi-resave.log" 2>&1
{ echo "== rank 0 against rank 1"; python3 scripts/diff_archives.py "$WORK/rank_0" "$WORK/rank_1" --json "$OUT/diff-ranks.json"
  echo "== rank 0 against rank 0 saved again"; python3 scripts/diff_archives.py "$WORK/rank_0" "$WORK/rank_0.again" --json "$OUT/diff-resave.json"
} > "$OUT/diff.txt" 2>&1
if [ -f "$WORK/rank_0/graph_manifest.json" ] && [ -f "$WORK/rank_1/graph_manifest.json" ]; then
  # Rank 1's graph bundle stored against rank 0's, as the engine plugins store it: rank 1's LOAD below then reads
  # its graphs through the rebuilt bundle.
  python3 scripts/store_rank_bundle.py "$WORK/rank_1" "$WORK/rank_0" | tee "$OUT/bundle-stored.txt"
  timeout 240 python3 -m foundry.cli run -- python3 tests/gpu/multi_rank.py "$WORK" load > "$OUT/multi-load.log" 2>&1
  RC=$?
  tail -1 "$OUT/multi-load.log" > "$OUT/multi-load.json"
fi
# Region memory shared the way a custom all-reduce shares its buffers (IPC handles, csrc/ipc.c), read by the
# captured graph through the peer's pointer: SAVE and LOAD of both ranks in one run of its own.
IPCWORK=$(mktemp -d /tmp/foundry-ipc-XXXX)
FOUNDRY_MULTI_IPC=1 timeout 240 python3 -m foundry.cli run -- python3 tests/gpu/multi_rank.py "$IPCWORK" both \
  > "$OUT/multi-ipc.log" 2>&1
tail -1 "$OUT/multi-ipc.log" > "$OUT/multi-ipc.json"
python3 scripts/multi_summary.py join "$OUT" > "$OUT/multi-rank.json"
# Where the NCCL kernel reads, SAVE's process against LOAD's (before and after CUDAGraph.load).
python3 scripts/multi_state.py "$WORK" > "$OUT/state.txt" 2>&1
cp "$WORK"/state_*.json "$OUT"/ 2>/dev/null

echo "=== summary (exit $RC; full logs: multi-save.log, multi-load.log) ==="
python3 scripts/multi_summary.py show "$OUT/multi-rank.json" || tail -30 "$OUT/multi-save.log" "$OUT/multi-load.log"
grep -h "module variables LOAD writes" -A6 "$OUT"/inspect-rank_0.txt 2>/dev/null | head -8
cat "$OUT/diff.txt" "$OUT/bundle-stored.txt" 2>/dev/null | head -32
head -60 "$OUT/state.txt"
# The device tool brings back at most 8 files: the logs and comparisons travel as one archive.
(cd "$OUT" && tar -czf multi-logs.tgz --remove-files multi-*.log multi-save.json multi-load.json multi-ipc.json build.log diff-*.json state_*.json bundle-stored.txt 2>/dev/null)
exit $RC
