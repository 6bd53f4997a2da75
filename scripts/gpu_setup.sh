# Sourced by the scripts that run on the GPU machine (gpu_tier.sh, vllm/ and sglang/gpu_run.sh): what each needs first.

# The GPU machine reaches no package index: the wheels the package needs beyond its image (lz4, zstandard)
# are carried in .whl/deps (pip download --python-version 3.12 --only-binary :all: lz4 zstandard).
install_carried_wheels() {
  if [ -d .whl/deps ]; then python3 -m pip install -q --no-deps --no-index .whl/deps/*.whl 2>&1 | grep -v -i warning; fi
  return 0
}

# build_native SOURCE_DIR LOG: libfoundry.so into SOURCE_DIR/build/gpu, the output into LOG.
build_native() {
  { cmake -S "$1" -B "$1/build/gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build "$1/build/gpu"; } > "$2" 2>&1
}

# build_native_if_stale OUT: libfoundry.so into ./build/gpu unless it is newer than every native source (the
# machine keeps it while warm); the build's output into OUT/build.log, its tail on failure. Exits on failure.
build_native_if_stale() {
  if [ ! -f build/gpu/libfoundry.so ] || [ -n "$(find csrc CMakeLists.txt -newer build/gpu/libfoundry.so | head -1)" ]; then
    if ! build_native . "$1/build.log"; then
      tail -30 "$1/build.log"; echo "BUILD FAILED"; exit 1
    fi
  fi
  # Foundry's bytecode too, as an installed package has it (the image sets PYTHONDONTWRITEBYTECODE).
  python3 -m compileall -q foundry >/dev/null 2>&1 || true
  export FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
}

# machine_info OUT: the GPU, driver, Python and torch, into OUT/machine.txt and the log.
machine_info() {
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 "$(dirname "${BASH_SOURCE[0]}")/tier_summary.py" machine
  } | tee "$1/machine.txt"
}

# install_engine_bundle ENGINE [PART...]: the carried wheels, then the offline engine bundle (vllm | sglang;
# scripts/bundle/install.sh), its variables exported here. Returns 3 when the bundle is not installed.
install_engine_bundle() {
  local engine=$1 env_line
  shift
  install_carried_wheels
  env_line=$(bash scripts/bundle/install.sh "$engine" "$@") || { echo "$engine bundle not installed (see above)"; return 3; }
  eval "$env_line"
}

# The benchmark's own bound (its --seconds), never past the call's timeout: the caller's --seconds where it is
# the smaller, else BOUND. Passed last, it is the one the benchmark reads.
bench_seconds() {  # BOUND ARGS...
  local bound=$1 prev="" given="" a
  shift
  for a in "$@"; do
    [ "$prev" = "--seconds" ] && given=$a
    prev=$a
  done
  if [ -n "$given" ] && awk -v g="$given" -v b="$bound" 'BEGIN { exit !(g + 0 < b + 0) }'; then echo "$given"; else echo "$bound"; fi
}

diff_rank_archives() {  # ARCHIVE WORK OUT: each rank's archive against rank 0's, node by node and file by file
  # (one capture for every rank), in what is left of the call's 600 s: rank 1 first, whose summary is shown, then
  # the others (at TP=4, whether a rank's shift grows with the rank); all in OUT/diff-ranks.txt, JSON in WORK.
  local archive=$1 work=$2 out=$3 r
  [ -d "$archive/rank_1" ] || return 0
  : > "$out/diff-ranks.txt"
  for r in $(ls -d "$archive"/rank_* | sed 's/.*rank_//' | sort -n); do
    [ "$r" = 0 ] && continue
    [ "$SECONDS" -lt 570 ] || { echo "== rank $r: not compared, the call's time is spent" >> "$out/diff-ranks.txt"; continue; }
    [ "$r" = 1 ] || echo "== rank 0 against rank $r" >> "$out/diff-ranks.txt"
    timeout "$(( 580 - SECONDS ))" python3 scripts/diff_archives.py "$archive/rank_0" "$archive/rank_$r" \
      --json "$work/diff-ranks$( [ "$r" = 1 ] || echo "-$r" ).json" >> "$out/diff-ranks.txt" 2>&1
    [ "$r" = 1 ] && head -14 "$out/diff-ranks.txt"
  done
}
