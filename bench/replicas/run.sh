#!/usr/bin/env bash
# bench/replicas: several `purser serve` replicas sharing one PostgreSQL (a private server on a
# Unix socket under a temporary directory), one simulated model server (instant answers).
#
#   exactness  1, 3 and 8 replicas; a client keeps 32 requests in flight, spread round robin over
#              them, against one hard wallet of $1.00 (about 1,700 requests' worth) until it keeps
#              refusing. Then 3 replicas with one killed (SIGKILL) mid-burst and started again,
#              and 3 replicas with PostgreSQL restarted (immediate: as a crash) mid-burst. Per
#              run: answered, spent (from the store), spent / limit, answered relative to 1
#              replica, what the replicas still hold reserved, and lease use beyond grants.
#   rate       4 replicas, a key limited to 100 requests a minute, an open loop of 4 requests a
#              second for RATE_SECONDS (180): admitted per whole minute after the first.
#   throughput 3 replicas on PostgreSQL against 1 on SQLite, wrk -c16 on each replica for
#              DURATION (10s): requests a second, and PostgreSQL round trips per request
#              (purser_store_round_trips_total).
# Results: bench/results/replicas.json.   bench/replicas/run.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$(realpath "$build/purser")"
rate_seconds=${RATE_SECONDS:-185}
parts=${PARTS:-exact rate throughput}  # a subset for a partial run
duration=${DURATION:-10s}
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
. bench/lib.sh
admin=bench-admin-key-0123456789abcdef

bindir=$(pg_config --bindir)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$tmp/pg"
[ "$(id -u)" = 0 ] && chown postgres "$tmp/pg"
as_pg "$bindir/initdb" -D "$tmp/pg/data" -A trust -U purser -E UTF8 --no-instructions >/dev/null
pg_ctl_cmd="$bindir/pg_ctl -D $tmp/pg/data -l $tmp/pg/server.log -w -t 60"
pg_opts="-c listen_addresses='' -k $tmp/pg -p 5432 -c max_connections=300"
as_pg $pg_ctl_cmd -o "$pg_opts" start >/dev/null
pg_restart="$([ "$(id -u)" = 0 ] && echo "runuser -u postgres -- ") $pg_ctl_cmd -m immediate -o \"$pg_opts\" restart"
stop_all() {
  cleanup_pids
  as_pg $pg_ctl_cmd -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
cleanup_pids() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop_all EXIT
psql_q() { "$bindir/psql" -X -A -t -q -h "$tmp/pg" -p 5432 -U purser -d "$1" -c "$2"; }
conninfo() { echo "host=$tmp/pg port=5432 user=purser dbname=$1"; }

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --models m --ttft-ms 0 --tokens-per-s 0 --threads 1 >"$tmp/sim.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"

# start_replica DB I -> rport[I], rpid[I]; its data directory is $tmp/DB-I.
declare -a rport rpid
start_replica() {
  local db=$1 i=$2 port store
  port=$(free_port)
  if [ "$db" = sqlite ]; then store=""; else store="store: {postgres: \"$(conninfo "$db")\", max_connections: 4}"; fi
  # One replica runs the fleet engine.
  [ "$i" -gt 0 ] && store+=$'\n'"fleet: {enabled: false}"
  cat >"$tmp/$db-$i.yaml" <<CONF
listen: 127.0.0.1:$port
threads: 1
log: {level: warn}
$store
providers:
  - {name: p, kind: openai, base_url: http://127.0.0.1:$sim_port/v1}
routes:
  - {model: chat, targets: [{provider: p, model: m}]}
prices:
  - {provider: p, model: m, input_per_mtok: "10", output_per_mtok: "100"}
CONF
  PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/$db-$i.yaml" --data "$tmp/$db-$i" >>"$tmp/$db-$i.log" 2>&1 &
  rpid[$i]=$!
  pids+=($!)
  rport[$i]=$port
  wait_for "http://127.0.0.1:$port/healthz"
}
stop_replicas() {
  local i
  for i in "$@"; do kill -TERM "${rpid[$i]}" 2>/dev/null || true; done
  for i in "$@"; do wait "${rpid[$i]}" 2>/dev/null || true; done
}
# setup DB N LIMIT [KEY_FIELDS]: N replicas on database DB, the member and a hard user wallet
# made through the first before the others start; sets $key and $wallet.
setup() {
  local db=$1 n=$2 limit=$3 extra=${4:-} i
  [ "$db" = sqlite ] || as_pg "$bindir/createdb" -h "$tmp/pg" -p 5432 -U purser "$db"
  start_replica "$db" 0
  bench_member "http://127.0.0.1:${rport[0]}" "$admin" "$extra"
  wallet=$(curl -sf -X POST "http://127.0.0.1:${rport[0]}/api/v1/wallets" -H "Authorization: Bearer $admin" \
    -d "{\"scope\":{\"kind\":\"user\",\"id\":\"$user\"},\"limit\":\"$limit\"}" | jsonfield id)
  for i in $(seq 1 $((n - 1))); do start_replica "$db" "$i"; done
}
ports_of() { local n=$1 i out=""; for i in $(seq 0 $((n - 1))); do out+="${rport[$i]},"; done; echo "${out%,}"; }
reserved_of() {  # the wallet's reserved amount as each replica sees it, summed
  local n=$1 i total=0 r
  for i in $(seq 0 $((n - 1))); do
    r=$(curl -sf "http://127.0.0.1:${rport[$i]}/api/v1/wallets" -H "Authorization: Bearer $admin" |
      node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{const w=JSON.parse(s).data.find(x=>x.id==='$wallet');console.log(w?w.reserved:'?')})")
    total=$(node -e "console.log(($total + Number('$r')).toFixed(9))")
  done
  echo "$total"
}

: >"$tmp/exact.txt"
exactness() {  # N VARIANT
  local n=$1 variant=$2 db="exact_${1}_$2" burst extra_args=() second='{"ok":0,"budget":0,"rate":0,"other":0}'
  setup "$db" "$n" 1.00
  case $variant in
    kill) extra_args=(--kill-pid "${rpid[1]}" --kill-port "${rport[1]}" --kill-after 300) ;;
    pgrestart) extra_args=(--after 300 --run "$pg_restart") ;;
  esac
  burst=$(node bench/replicas/burst.mjs --ports "$(ports_of "$n")" --key "$key" --concurrency 32 --until-refused 40 "${extra_args[@]}")
  if [ "$variant" = kill ]; then
    # Started again on its data directory: it replays its journal and adopts its leases; the
    # client then goes on over all of them until the wallet keeps refusing.
    wait "${rpid[1]}" 2>/dev/null || true
    start_replica "$db" 1
    second=$(node bench/replicas/burst.mjs --ports "$(ports_of "$n")" --key "$key" --concurrency 32 --until-refused 40)
  elif [ "$variant" = pgrestart ]; then
    second=$(node bench/replicas/burst.mjs --ports "$(ports_of "$n")" --key "$key" --concurrency 32 --until-refused 40)
  fi
  local reserved; reserved=$(reserved_of "$n")
  stop_replicas $(seq 0 $((n - 1)))
  local spent over leased recorded
  spent=$(psql_q "$db" "SELECT COALESCE(SUM(cost_nanos),0) FROM wallet_spend WHERE wallet_id = '$wallet'")
  over=$(psql_q "$db" "SELECT COALESCE(SUM(used_nanos - granted_nanos),0) FROM wallet_leases WHERE used_nanos > granted_nanos")
  leased=$(psql_q "$db" "SELECT COALESCE(SUM(granted_nanos - used_nanos),0) FROM wallet_leases WHERE granted_nanos > used_nanos")
  recorded=$(psql_q "$db" "SELECT COUNT(*) FROM usage_events WHERE status = 200 AND recovered = 0")
  echo "$n $variant $burst $second $spent $over $leased $recorded $reserved" >>"$tmp/exact.txt"
  echo "exactness: $n replica(s) $variant done" >&2
}
if [[ " $parts " == *" exact "* ]]; then
  exactness 1 plain
  exactness 3 plain
  exactness 8 plain
  exactness 3 kill
  exactness 3 pgrestart
fi

# Rate: 4 replicas, a key of 100 requests a minute.
echo '{"ok":0,"rate":0,"other":0,"elapsed_ms":0,"admitted_at_ms":[]}' >"$tmp/rate.json"
if [[ " $parts " == *" rate "* ]]; then
  setup rate 4 1000000 ',"rpm":100'
  node bench/replicas/burst.mjs --ports "$(ports_of 4)" --key "$key" --rps 4 --seconds "$rate_seconds" >"$tmp/rate.json"
  stop_replicas 0 1 2 3
  echo "rate: done" >&2
fi

# Throughput: 3 replicas on PostgreSQL, then 1 on SQLite.
round_trips() {  # summed over replicas 0..N-1
  local n=$1 i total=0 v
  for i in $(seq 0 $((n - 1))); do
    v=$(curl -sf "http://127.0.0.1:${rport[$i]}/metrics" | awk '/^purser_store_round_trips_total/ {print $2}')
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
throughput() {  # DB N
  local db=$1 n=$2 i before after reqs=0 rps=0
  setup "$db" "$n" 1000000
  local warm=() load=()
  for i in $(seq 0 $((n - 1))); do
    BENCH_KEY=$key BENCH_MODEL=chat wrk -t1 -c16 -d2s -s bench/gateway/post.lua "http://127.0.0.1:${rport[$i]}/v1/chat/completions" >/dev/null &
    warm+=($!)
  done
  wait "${warm[@]}"
  before=$(round_trips "$n")
  for i in $(seq 0 $((n - 1))); do
    BENCH_KEY=$key BENCH_MODEL=chat wrk -t1 -c16 -d"$duration" -s bench/gateway/post.lua "http://127.0.0.1:${rport[$i]}/v1/chat/completions" >"$tmp/wrk-$db-$i.txt" &
    load+=($!)
  done
  wait "${load[@]}"
  after=$(round_trips "$n")
  for i in $(seq 0 $((n - 1))); do
    reqs=$((reqs + $(awk '/requests in/ {print $1}' "$tmp/wrk-$db-$i.txt")))
    rps=$(node -e "console.log($rps + $(awk '/Requests\/sec:/ {print $2}' "$tmp/wrk-$db-$i.txt"))")
  done
  stop_replicas $(seq 0 $((n - 1)))
  echo "$db $n $rps $reqs $((after - before))" >>"$tmp/throughput.txt"
  echo "throughput: $db $n done" >&2
}
: >"$tmp/throughput.txt"
if [[ " $parts " == *" throughput "* ]]; then
  throughput sqlite 1
  throughput tp 3
fi

mkdir -p bench/results
out=bench/results/replicas.json
[ "$parts" = "exact rate throughput" ] || out=bench/results/replicas-partial.json
node bench/replicas/summary.mjs "$tmp" "$(nproc)" >"$out"
node -e "const r=require('./$out'); console.log(r.text)"
