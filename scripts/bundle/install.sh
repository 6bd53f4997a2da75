#!/usr/bin/env bash
# On the GPU machine, in the last call of the chain (it carries the last part of the engine's bundle):
#
#   env_line=$(bash scripts/bundle/install.sh ENGINE [PART...]) || exit 1; eval "$env_line"
#
# ENGINE is vllm or sglang. Stages the parts named here (like stage.sh), checks that the stage folder now
# holds every part of MANIFEST with the right sha256, reassembles them, unpacks into the engine's site folder
# and prints the one line to use on stdout (everything else goes to stderr):
#   vllm:   export PYTHONPATH=/tmp/vllm-site${PYTHONPATH:+:$PYTHONPATH} VLLM_USE_FLASHINFER_SAMPLER=0
#           (FlashInfer is not bundled, and vLLM 0.26's sampler imports it unless that variable is 0)
#   sglang: export PYTHONPATH=/tmp/sglang-site${PYTHONPATH:+:$PYTHONPATH} SGLANG_IS_FLASHINFER_AVAILABLE=false HF_HUB_OFFLINE=1
#           (FlashInfer is bundled for SGLang's module-level imports only; no network: fail fast on the hub)
# Site folders: $VLLM_SITE (default /tmp/vllm-site), $SGLB_SITE (default /tmp/sglang-site). Keep the
# `env_line=$(...) || exit` form: `eval "$(install.sh)" || exit` does not stop on failure.
# Idempotent: if the site folder is already complete it only prints that line. Decompresses with the zstd
# program, or else with python3 and pyarrow or zstandard (the GPU image has pyarrow, no zstd program).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENGINE=${1:?usage: install.sh vllm|sglang [PART...]}; shift
case "$ENGINE" in
  vllm) STAGE=${VLLM_STAGE:-/root/stage}; DEST=${VLLM_SITE:-/tmp/vllm-site}; EXTRA="VLLM_USE_FLASHINFER_SAMPLER=0" ;;
  sglang) STAGE=${SGLB_STAGE:-/root/stage-sglang}; DEST=${SGLB_SITE:-/tmp/sglang-site}
          EXTRA="SGLANG_IS_FLASHINFER_AVAILABLE=false HF_HUB_OFFLINE=1" ;;
  *) echo "[install] unknown engine bundle: $ENGINE (vllm or sglang)" >&2; exit 2 ;;
esac
log() { printf '[install] %s\n' "$*" >&2; }
emit() { printf 'export PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} %s\n' "$DEST" "$EXTRA"; }
OK="$DEST/.$ENGINE-bundle-ok"

if [ -f "$OK" ]; then
  log "already installed: $DEST ($(head -1 "$OK"))"
  emit; exit 0
fi

t0=$(date +%s.%N)
if [ $# -gt 0 ]; then bash "$HERE/stage.sh" "$ENGINE" "$@" >&2; fi
MAN="$STAGE/MANIFEST"
[ -f "$MAN" ] || { log "no MANIFEST in $STAGE: no part was staged (did the machine go cold between calls?)"; exit 3; }
PARTS=(); missing=()
while read -r sum size name; do
  if [ -f "$STAGE/$name" ] && echo "$sum  $STAGE/$name" | sha256sum -c --quiet - >/dev/null 2>&1; then
    PARTS+=("$STAGE/$name")
  else
    missing+=("$name")
  fi
done < <(grep -E '^[0-9a-f]{64} ' "$MAN")
if [ ${#missing[@]} -gt 0 ]; then
  log "missing or damaged parts: ${missing[*]} (the machine may have gone cold between calls; restage all parts)"
  exit 3
fi

if command -v zstd >/dev/null; then
  DECOMP=(zstd -dc --long=27); how="zstd $(zstd -V | grep -o 'v[0-9.]*')"
else
  DECOMP=(python3 -c '
import shutil, sys
src = sys.stdin.buffer
try:
    import pyarrow as pa
    r = pa.CompressedInputStream(pa.PythonFile(src, mode="r"), "zstd")
except ImportError:
    import zstandard
    r = zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(src)
shutil.copyfileobj(r, sys.stdout.buffer, 1 << 22)
')
  how="python3 (pyarrow or zstandard): no zstd program"
fi

rm -rf "$DEST.partial"; mkdir -p "$DEST.partial"
cat "${PARTS[@]}" | "${DECOMP[@]}" | tar -x -C "$DEST.partial" --strip-components=1
# Bytecode compiled now, as pip does when it installs a package: without it every process of the engine
# compiles the sources it imports again (the GPU image sets PYTHONDONTWRITEBYTECODE), seconds of its start-up
# that no installed engine pays, under LOAD and natively alike.
had=$(find "$DEST.partial" -name '*.pyc' | wc -l)
python3 -m compileall -q -j 0 "$DEST.partial" >/dev/null 2>&1 || log "compileall reported errors (a module that does not compile is left to import as source)"
log "bytecode: $had .pyc files unpacked, $(find "$DEST.partial" -name '*.pyc' | wc -l) after compileall"
rm -rf "$DEST"; mv "$DEST.partial" "$DEST"
head -1 "$MAN" >"$OK"
t1=$(date +%s.%N)
log "unpacked ${#PARTS[@]} parts into $DEST: $(du -sm "$DEST" | cut -f1) MiB in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s via $how"
emit
