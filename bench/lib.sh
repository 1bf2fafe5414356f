# Helpers the benchmark scripts share: `. bench/lib.sh` after setting `pids=()` and `tmp`.
#   cleanup      kills the processes in $pids and removes $tmp (trap it on EXIT)
#   free_port    prints a TCP port nothing listens on
#   wait_for URL waits (bounded) until URL answers
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    ss -ltn "sport = :$p" | grep -q ":$p" || { echo "$p"; return; }
  done
}
wait_for() { for _ in $(seq 200); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "no answer from $1" >&2; exit 1; }
