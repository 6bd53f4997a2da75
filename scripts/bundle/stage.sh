#!/usr/bin/env bash
# On the GPU machine, in a call that carries one or more parts of an offline engine bundle (built on a CPU
# machine by shared/tools/<engine>-bundle/make.sh; 64 MiB a call):
#
#   bash scripts/bundle/stage.sh ENGINE .whl/ENGINE/1 [PART_OR_DIR...]        (ENGINE: vllm | sglang)
#
# Copies the carried parts (and their MANIFEST) into the engine's stage folder (vllm: $VLLM_STAGE, default
# /root/stage; sglang: $SGLB_STAGE, default /root/stage-sglang), which the next call finds as long as it
# starts while the machine is still warm (30 s after this call ends). Checks each part's sha256 against
# MANIFEST and says which parts are still to come.
set -euo pipefail
ENGINE=${1:?usage: stage.sh vllm|sglang PART...}; shift
case "$ENGINE" in
  vllm) STAGE=${VLLM_STAGE:-/root/stage} ;;
  sglang) STAGE=${SGLB_STAGE:-/root/stage-sglang} ;;
  *) echo "[stage] unknown engine bundle: $ENGINE (vllm or sglang)" >&2; exit 2 ;;
esac
log() { printf '[stage] %s\n' "$*" >&2; }
mkdir -p "$STAGE"

for arg in "$@"; do
  if [ -d "$arg" ]; then
    files=("$arg"/"$ENGINE"-site.tar.zst.* "$arg"/MANIFEST)
  else
    files=("$arg")
    [ -f "$(dirname "$arg")/MANIFEST" ] && files+=("$(dirname "$arg")/MANIFEST")
  fi
  for f in "${files[@]}"; do
    [ -f "$f" ] || { log "not found: $f"; exit 1; }
    cp -f "$f" "$STAGE/"
  done
done

MAN="$STAGE/MANIFEST"
[ -f "$MAN" ] || { log "no MANIFEST in $STAGE yet"; exit 1; }
# A part too large to travel beside the project's tree goes in pieces (NAME.piece0, NAME.piece1, ...; split -b
# on the CPU machine, each piece in its own call): once the last has come, they are joined into the part.
while read -r sum size name; do
  pieces=("$STAGE/$name".piece*)
  [ -f "${pieces[0]}" ] && [ ! -f "$STAGE/$name" ] || continue
  total=$(cat "${pieces[@]}" | wc -c)
  if [ "$total" = "$size" ]; then
    printf '%s\n' "${pieces[@]}" | sort -V | xargs cat > "$STAGE/$name" && rm -f "${pieces[@]}"
  else
    log "$name: ${#pieces[@]} piece(s), $total of $size bytes so far"
  fi
done < <(grep -E '^[0-9a-f]{64} ' "$MAN")
have=0; need=$(awk '$1 == "parts" { print $2 }' "$MAN"); todo=()
while read -r sum size name; do
  if [ -f "$STAGE/$name" ]; then
    if [ "$(stat -c %s "$STAGE/$name")" = "$size" ] && echo "$sum  $STAGE/$name" | sha256sum -c --quiet - >/dev/null 2>&1; then
      have=$((have + 1))
    else
      log "BAD $name (size or sha256 differs from MANIFEST); removed"
      rm -f "$STAGE/$name"; todo+=("$name")
    fi
  else
    todo+=("$name")
  fi
done < <(grep -E '^[0-9a-f]{64} ' "$MAN")
if [ ${#todo[@]} -gt 0 ]; then
  log "$STAGE holds $have of $need parts; still to come: ${todo[*]}"
else
  log "$STAGE holds all $need parts"
fi
df -h "$STAGE" | tail -1 >&2
