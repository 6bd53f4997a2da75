#!/usr/bin/env bash
# On a GPU machine of several GPUs, in one call: benchmarks side by side, each on GPUs of its own ("lanes"), so
# that one lease runs the one-GPU rows of several engines and shapes at once (a multi-GPU machine's whole time
# counts, whatever its GPUs do). Each lane is a fresh process tree with its own folders; exactness rows are
# unaffected by the neighbours, timing rows share the host's CPUs with them (the summary says which lanes ran).
#
#   bash scripts/gpu_lanes.sh 'GPUS ENGINE [NAME=VALUE...] [ARGS...]' ...
#
#   GPUS    CUDA_VISIBLE_DEVICES of the lane, e.g. 0 or 2,3
#   ENGINE  vllm or sglang: scripts/ENGINE/gpu_run.sh -- ARGS (the bundle staged and installed first, once);
#           tier: scripts/gpu_tier.sh ARGS (the GPU test tier; one such lane a call)
#   NAME=VALUE  set in that lane only (e.g. BASELINE=/root/build-prev for a tier lane's --bench)
#   Each lane keeps its own engine and compiler caches in /tmp/lane-N/caches (LANES_SHARED_CACHES=1: the machine's)
#   ARGS    as a shell would split them ('--decode-batches ""' keeps the empty argument)
#
# Example (4 GPUs): bash scripts/gpu_lanes.sh '0 vllm --shapes mistral-small --api serve --modes save,native,load'
#                   '1 sglang --shapes qwen3-moe-small --modes native,save,load' '2,3 vllm --tp 2 ...' ...
# What comes back: OUT/lane-N.tgz (the lane's report, logs and run.log) and OUT/lanes.txt, the summary also
# printed last. LANES_SECONDS (default 570): the call's bound for every lane, setup included.
set -u -o pipefail
T0=$(date +%s)
export PYTHONPATH=${PYTHONPATH:-}
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
[ $# -ge 1 ] || { echo "usage: bash scripts/gpu_lanes.sh 'GPUS ENGINE [ARGS...]' ..." >&2; exit 2; }
if [ $# -gt 7 ]; then echo "at most 7 lanes: a call brings back 8 files" >&2; exit 2; fi

# Each GPU in one lane at most: two lanes on one GPU would share its memory, each sized for the GPU alone.
USED=" "
for spec in "$@"; do
  read -r gpus _ <<<"$spec"
  [[ "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "lanes: '$spec' does not start with GPU numbers (e.g. 0 or 2,3)" >&2; exit 2; }
  for g in ${gpus//,/ }; do
    case "$USED" in *" $g "*) echo "lanes: GPU $g is in two lanes ('$spec' and an earlier one)" >&2; exit 2 ;; esac
    USED="$USED$g "
  done
done

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_carried_wheels
INSTALLED=""
# Each engine once, and the native library once, before any lane starts: lanes then find both ready.
for spec in "$@"; do
  read -r _ engine _ <<<"$spec"
  case "$engine" in
    vllm | sglang) echo "$INSTALLED" | grep -qw "$engine" && continue
      ( install_engine_bundle "$engine" >/dev/null ) || { echo "lanes: the $engine bundle is not installed"; exit 3; }
      INSTALLED="$INSTALLED $engine" ;;
    tier) ;;
    *) echo "lanes: unknown engine '$engine' in '$spec' (vllm, sglang or tier)" >&2; exit 2 ;;
  esac
done 2>&1
build_native_if_stale "$OUT"
BOUND=${LANES_SECONDS:-570}
# A lent machine may keep /tmp from an earlier call or session: only what this call's lanes write is theirs.
STARTED=$(cd "$OUT" && pwd)/.lanes-started
touch "$STARTED"

i=0
for spec in "$@"; do
  i=$((i + 1))
  dir=$OUT/lane-$i
  mkdir -p "$dir"
  echo "$spec" >"$dir/spec.txt"
  (
    read -r gpus engine rest <<<"$spec"
    eval "set -- $rest"
    # Each lane its own compile and JIT caches, kept below /tmp/lane-N while the machine is warm, as its archive
    # is: on a shared cache one lane's processes read the Inductor choices and Triton kernels the other lane's
    # write, which mixes two experiments (8043097). LANES_SHARED_CACHES=1 keeps the machine's own.
    if [ "${LANES_SHARED_CACHES:-0}" != 1 ]; then
      c=/tmp/lane-$i/caches
      export XDG_CACHE_HOME=$c VLLM_CACHE_ROOT=$c/vllm TRITON_CACHE_DIR=$c/triton TORCHINDUCTOR_CACHE_DIR=$c/inductor \
        CUDA_CACHE_PATH=$c/nv TVM_FFI_CACHE_DIR=$c/tvm-ffi
    fi
    while [ $# -gt 0 ] && [[ "$1" =~ ^[A-Z_][A-Z0-9_]*= ]]; do export "${1?}"; shift; done
    left=$(( BOUND - ($(date +%s) - T0) - 20 ))
    # The benchmark's own bound ends 45 s before the lane's: it then stops its engines and writes its report,
    # and the engine script copies it out, before the lane's timeout could cut either short.
    export CUDA_VISIBLE_DEVICES=$gpus LANE=$i OUT=$dir BENCH_SECONDS=${BENCH_SECONDS:-$((left - 45))}
    case "$engine" in
      vllm | sglang) exec timeout --kill-after=15 "$((left + 10))" bash "scripts/$engine/gpu_run.sh" -- "$@" ;;
      tier) exec timeout --kill-after=15 "$left" bash scripts/gpu_tier.sh "$@" ;;
    esac
  ) >"$dir/run.log" 2>&1 &
  echo "$!" >"$dir/pid"
  sleep 3  # the lanes' engines do not all pick their ports and write their caches in the same second
done

i=0
for spec in "$@"; do
  i=$((i + 1))
  wait "$(cat "$OUT/lane-$i/pid")"
  echo $? >"$OUT/lane-$i/rc"
  # A lane its timeout stopped has not copied its reports out: the benchmark writes each shape's document after
  # every run, so what the lane finished is in its scratch folder (gpu_run.sh's WORK); bring that back.
  for f in /tmp/lane-"$i"/foundry-*-bench/*.json /tmp/lane-"$i"/foundry-*-bench/*.txt /tmp/lane-"$i"/foundry-*-bench/*.png; do
    [ -f "$f" ] && [ "$f" -nt "$STARTED" ] && [ ! -e "$OUT/lane-$i/$(basename "$f")" ] && cp "$f" "$OUT/lane-$i/"
  done
  fresh_work=$(cd "/tmp/lane-$i" 2>/dev/null && for d in foundry-*-bench; do [ -d "$d" ] && [ "$d" -nt "$STARTED" ] && echo "$d"; done)
  if [ ! -e "$OUT/lane-$i/logs.tgz" ] && [ -n "$fresh_work" ]; then
    # shellcheck disable=SC2086  # one word per folder
    tar czf "$OUT/lane-$i/logs.tgz" -C "/tmp/lane-$i" --exclude='*.png' $fresh_work 2>/dev/null
  fi
done
{
  echo "lanes, $(nvidia-smi -L | wc -l) GPUs, $(( $(date +%s) - T0 )) s in all:"
  i=0
  for spec in "$@"; do
    i=$((i + 1))
    echo "== lane $i (rc $(cat "$OUT/lane-$i/rc")): $spec"
    # The verdicts first (answers, targets, kernel choices), from the lane's reports: a call's reply shows only
    # the end of what it printed, and the next call must be sent within seconds of it.
    for report in "$OUT/lane-$i"/*.txt; do
      [ -f "$report" ] && [ "$(basename "$report")" != spec.txt ] || continue
      grep -h -E "answered alike|: (NOT )?met$|: met|took SAVE|chose by timing|took longer than native|^(Foundry|native)[^:]*  " \
        "$report" | head -n 24
    done
    grep -v '^\[' "$OUT/lane-$i/run.log" | tail -n "${LANE_TAIL:-14}"
  done
} >"$OUT/lanes.txt"
i=0
for spec in "$@"; do
  i=$((i + 1))
  rm -f "$OUT/lane-$i/pid"
  tar czf "$OUT/lane-$i.tgz" -C "$OUT/lane-$i" . && rm -rf "$OUT/lane-$i"
done
rm -f "$STARTED"
cat "$OUT/lanes.txt"
