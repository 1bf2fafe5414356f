#!/usr/bin/env bash
# bench/gateway: one simulated upstream (purser sim llm, instant 16-token answers) behind each
# contender, in one run, rounds interleaved so that drift in the machine hits them all alike:
#   direct          the simulator itself (the floor)
#   nginx           proxy_pass, 1 worker, upstream keep-alive (the goal)
#   purser-batch    Purser, 1 thread, governance on — key auth, rate limits, a wallet chain of 3
#                   (tenant, team, user), reservation, metering — with ledger.sync: batch
#   purser-always   the same with ledger.sync: always
#   portkey         the Portkey AI gateway 1.15.2 (npm), 1 Node.js process, when installed
#                   (scripts/setup bench)
# Per round and contender: throughput under load (wrk -t1 -cCONNECTIONS), CPU per request (the
# contender's own processes, from /proc), latency at low load (wrk -c1) as the client sees it;
# and time to first token of a 100-token stream (bench/gateway/ttft.mjs). The summary gives
# medians over the rounds with [min–max]: req/s and CPU relative to nginx, added latency and
# added time to first token relative to direct. Results: bench/results/gateway.json.
#   bench/gateway/run.sh BUILD_DIR   (env: ROUNDS=3 CONNECTIONS=64 DURATION=10s LOW_DURATION=5s)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
rounds=${ROUNDS:-3}
connections=${CONNECTIONS:-64}
duration=${DURATION:-10s}
low_duration=${LOW_DURATION:-5s}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT
tick_us=$((1000000 / $(getconf CLK_TCK)))

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --ttft-ms 0 --tokens-per-s 0 --threads 1 >"$tmp/sim.log" 2>&1 &
pids+=($!)
stream_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$stream_port" --ttft-ms 20 --tokens-per-s 2000 --threads 1 >"$tmp/stream.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"
wait_for "http://127.0.0.1:$stream_port/healthz"

nginx_port=$(free_port)
nginx_stream_port=$(free_port)
cat >"$tmp/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/body; proxy_temp_path $tmp/proxy; fastcgi_temp_path $tmp/fastcgi;
  uwsgi_temp_path $tmp/uwsgi; scgi_temp_path $tmp/scgi;
  upstream sim { server 127.0.0.1:$sim_port; keepalive 64; }
  upstream stream { server 127.0.0.1:$stream_port; keepalive 64; }
  server {
    listen 127.0.0.1:$nginx_port;
    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$nginx_stream_port;
    location / { proxy_pass http://stream; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; }
  }
}
CONF
nginx -c "$tmp/nginx.conf" -p "$tmp" &
nginx_pid=$!
pids+=($nginx_pid)

admin=bench-admin-key-0123456789abcdef
start_purser() {  # name sync -> sets port_<name>, pid_<name>, key_<name>
  local name=$1 sync=$2 port
  port=$(free_port)
  cat >"$tmp/$name.yaml" <<CONF
listen: 127.0.0.1:$port
threads: 1
log: {level: warn}
ledger: {sync: $sync}
providers:
  - {name: sim, kind: openai, base_url: http://127.0.0.1:$sim_port/v1}
  - {name: stream, kind: openai, base_url: http://127.0.0.1:$stream_port/v1}
routes:
  - {model: bench, targets: [{provider: sim, model: sim-small}]}
  - {model: stream, targets: [{provider: stream, model: sim-small}]}
prices:
  - {provider: sim, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
  - {provider: stream, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
CONF
  PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/$name.yaml" --data "$tmp/var-$name" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  printf -v "pid_$name" %s $!
  printf -v "port_$name" %s "$port"
  wait_for "http://127.0.0.1:$port/healthz"
  local url="http://127.0.0.1:$port"
  bench_member "$url" "$admin" ',"rpm":100000000,"tpm":1000000000'
  bench_wallets "$url" "$admin"
  printf -v "key_$name" %s "$key"
}
start_purser purser_batch batch
start_purser purser_always always

portkey_js=bench/gateway/portkey/node_modules/@portkey-ai/gateway/build/start-server.js
contenders=(direct nginx purser_batch purser_always)
if [ -f "$portkey_js" ]; then
  portkey_port=$(free_port)
  node "$portkey_js" --port="$portkey_port" --headless >"$tmp/portkey.log" 2>&1 &
  pid_portkey=$!
  pids+=($pid_portkey)
  for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$portkey_port/" && break; sleep 0.1; done
  contenders+=(portkey)
else
  echo "portkey: not installed (scripts/setup bench installs it); left out" >&2
fi

target() {  # contender -> url key model headers pids
  case $1 in
    direct) echo "http://127.0.0.1:$sim_port/v1/chat/completions|-|sim-small|-|${pids[0]}" ;;
    nginx) echo "http://127.0.0.1:$nginx_port/v1/chat/completions|-|sim-small|-|$nginx_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')" ;;
    purser_batch) echo "http://127.0.0.1:$port_purser_batch/v1/chat/completions|$key_purser_batch|bench|-|$pid_purser_batch" ;;
    purser_always) echo "http://127.0.0.1:$port_purser_always/v1/chat/completions|$key_purser_always|bench|-|$pid_purser_always" ;;
    portkey) echo "http://127.0.0.1:$portkey_port/v1/chat/completions|sk-bench|sim-small|x-portkey-provider: openai|x-portkey-custom-host: http://127.0.0.1:$sim_port/v1|$pid_portkey" ;;
  esac
}

measure() {  # round kind contender connections duration
  local line url key model headers procs before after requests
  line=$(target "$3")
  url=${line%%|*}; line=${line#*|}
  key=${line%%|*}; line=${line#*|}
  model=${line%%|*}; line=${line#*|}
  procs=${line##*|}; headers=${line%|*}
  [ "$key" = - ] && key=""
  [ "$headers" = - ] && headers=""
  before=$(cpu_ticks $procs)
  BENCH_KEY=$key BENCH_MODEL=$model BENCH_HEADERS=$headers wrk -t1 -c"$4" -d"$5" --latency -s bench/gateway/post.lua "$url" >"$tmp/wrk.txt"
  after=$(cpu_ticks $procs)
  requests=$(awk '/requests in/ {print $1}' "$tmp/wrk.txt")
  echo "$1 $2 $3 $(awk '/Requests\/sec:/ {print $2}' "$tmp/wrk.txt") $(to_us "$(awk '$1 == "50%" {print $2}' "$tmp/wrk.txt")") $(to_us "$(awk '$1 == "99%" {print $2}' "$tmp/wrk.txt")") $(( (after - before) * tick_us * 1000 / (requests > 0 ? requests : 1) )) $(awk '/Non-2xx/ {print $NF}' "$tmp/wrk.txt" | grep . || echo 0)"
}

# Warm every path once.
for c in "${contenders[@]}"; do measure 0 warm "$c" "$connections" 2s >/dev/null; done
: >"$tmp/results.txt"
for r in $(seq "$rounds"); do
  for c in "${contenders[@]}"; do measure "$r" load "$c" "$connections" "$duration" >>"$tmp/results.txt"; done
  for c in "${contenders[@]}"; do measure "$r" low "$c" 1 "$low_duration" >>"$tmp/results.txt"; done
  node bench/gateway/ttft.mjs "http://127.0.0.1:$stream_port/v1/chat/completions" "" sim-small 20 >"$tmp/ttft-direct-$r.json"
  node bench/gateway/ttft.mjs "http://127.0.0.1:$nginx_stream_port/v1/chat/completions" "" sim-small 20 >"$tmp/ttft-nginx-$r.json"
  node bench/gateway/ttft.mjs "http://127.0.0.1:$port_purser_batch/v1/chat/completions" "$key_purser_batch" stream 20 >"$tmp/ttft-purser_batch-$r.json"
  node bench/gateway/ttft.mjs "http://127.0.0.1:$port_purser_always/v1/chat/completions" "$key_purser_always" stream 20 >"$tmp/ttft-purser_always-$r.json"
  echo "round $r of $rounds done" >&2
done
mkdir -p bench/results
node bench/gateway/summary.mjs "$tmp" "$rounds" "$(nproc)" "$connections" "$duration" >bench/results/gateway.json
node -e 'const r=require("./bench/results/gateway.json"); console.log(r.text)'
