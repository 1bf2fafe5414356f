# Helpers the benchmark scripts share: `. bench/lib.sh` after setting `pids=()` and `tmp`.
#   cleanup      kills the processes in $pids and removes $tmp (trap it on EXIT)
#   free_port    prints a TCP port nothing listens on
#   wait_for URL waits (bounded) until URL answers
#   jsonfield F  prints field F of the JSON object on stdin
#   field J F    prints field F of the JSON object J
#   ratio A B    prints A / B to one decimal
#   bench_member URL ADMIN_KEY [KEY_FIELDS]
#                creates tenant "bench", its team "t", user "u" and a key of u's (KEY_FIELDS: more
#                JSON fields for the key, such as ,"rpm":1000); sets $tenant, $team, $user and $key
#   bench_wallets URL ADMIN_KEY
#                a wallet of 1,000,000 on each of the member's tenant, team and user
#   (both pass $BENCH_CURL, extra curl options such as --cacert FILE for an HTTPS Purser)
#   cpu_ticks PID...  the user+system clock ticks the processes have used
#   to_us TIME        a wrk time ("850.12us", "2.31ms", "1.02s") in microseconds
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
field() { node -e "console.log(JSON.parse(process.argv[1])['$2'])" "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }
jsonfield() { node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.parse(s)['$1']))"; }
bench_member() {
  local url=$1 admin=$2 extra=${3:-}
  post() { curl -sf ${BENCH_CURL:-} -X POST "$url$1" -H "Authorization: Bearer $admin" -d "$2"; }
  tenant=$(post /api/v1/tenants '{"name":"bench"}' | jsonfield id)
  team=$(post /api/v1/teams "{\"tenant\":\"$tenant\",\"name\":\"t\"}" | jsonfield id)
  user=$(post /api/v1/users "{\"tenant\":\"$tenant\",\"team\":\"$team\",\"name\":\"u\"}" | jsonfield id)
  key=$(post /api/v1/keys "{\"owner\":{\"kind\":\"user\",\"id\":\"$user\"},\"name\":\"bench\"$extra}" | jsonfield key)
}
bench_wallets() {
  local url=$1 admin=$2 scope
  for scope in "tenant $tenant" "team $team" "user $user"; do
    set -- $scope
    curl -sf ${BENCH_CURL:-} -X POST "$url/api/v1/wallets" -H "Authorization: Bearer $admin" \
      -d "{\"scope\":{\"kind\":\"$1\",\"id\":\"$2\"},\"limit\":\"1000000\"}" >/dev/null
  done
}
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
to_us() { awk -v v="$1" 'BEGIN {n = v + 0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else print n * 1000000}'; }
