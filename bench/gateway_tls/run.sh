#!/usr/bin/env bash
# bench/gateway_tls: what HTTPS on Purser's door costs. One simulated upstream (purser sim llm,
# instant 16-token answers, plain HTTP on loopback) behind four contenders, in one run, rounds
# interleaved so that drift in the machine hits them all alike:
#   nginx         proxy_pass, 1 worker, upstream keep-alive, plain HTTP
#   nginx-tls     the same serving HTTPS (TLS 1.3, P-256 ECDSA certificate) — the goal
#   purser        Purser, 1 thread, governance on (key auth, rate limits, a wallet chain of 3,
#                 reservation, metering), ledger.sync: batch, plain HTTP
#   purser-tls    the same serving HTTPS with the same certificate
# Two loads per round and contender: keep-alive (wrk -t1 -cCONNECTIONS: TLS's record cost) and a
# new connection per request (wrk -cCLOSE_CONNECTIONS with Connection: close: the handshake's
# cost, which is what clients without pooling pay). The summary gives medians over the rounds:
# req/s, CPU per request (the contender's own processes, from /proc), p50/p99 latency, and the
# ratios purser-tls/purser and purser-tls/nginx-tls. Results: bench/results/gateway_tls.json.
#   bench/gateway_tls/run.sh BUILD_DIR   (env: ROUNDS=3 CONNECTIONS=64 CLOSE_CONNECTIONS=16
#                                          DURATION=10s)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
rounds=${ROUNDS:-3}
connections=${CONNECTIONS:-64}
close_connections=${CLOSE_CONNECTIONS:-16}
duration=${DURATION:-10s}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT
tick_us=$((1000000 / $(getconf CLK_TCK)))

# One CA and one server certificate for localhost, as an operator would make them.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
  -keyout "$tmp/ca-key.pem" -out "$tmp/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "$tmp/key.pem" -out "$tmp/req.pem" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$tmp/ext.cnf"
openssl x509 -req -in "$tmp/req.pem" -CA "$tmp/ca.pem" -CAkey "$tmp/ca-key.pem" -CAcreateserial \
  -days 2 -extfile "$tmp/ext.cnf" -out "$tmp/cert.pem" 2>/dev/null

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --ttft-ms 0 --tokens-per-s 0 --threads 1 >"$tmp/sim.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"

nginx_port=$(free_port)
nginx_tls_port=$(free_port)
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
  server {
    listen 127.0.0.1:$nginx_port;
    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$nginx_tls_port ssl;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;
    ssl_session_tickets off;
    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -c "$tmp/nginx.conf" -p "$tmp" &
nginx_pid=$!
pids+=($nginx_pid)

admin=bench-admin-key-0123456789abcdef
start_purser() {  # name tls(0|1) -> sets port_<name>, pid_<name>, key_<name>
  local name=$1 tls=$2 port scheme=http
  port=$(free_port)
  cat >"$tmp/$name.yaml" <<CONF
listen: 127.0.0.1:$port
threads: 1
log: {level: warn}
ledger: {sync: batch}
providers:
  - {name: sim, kind: openai, base_url: http://127.0.0.1:$sim_port/v1}
routes:
  - {model: bench, targets: [{provider: sim, model: sim-small}]}
prices:
  - {provider: sim, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
CONF
  if [ "$tls" = 1 ]; then
    printf 'tls: {cert: %s, key: %s}\n' "$tmp/cert.pem" "$tmp/key.pem" >>"$tmp/$name.yaml"
    scheme=https
  fi
  PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/$name.yaml" --data "$tmp/var-$name" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  printf -v "pid_$name" %s $!
  printf -v "port_$name" %s "$port"
  local url="$scheme://localhost:$port"
  for _ in $(seq 200); do curl -sf --cacert "$tmp/ca.pem" "$url/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
  BENCH_CURL="--cacert $tmp/ca.pem" bench_member "$url" "$admin" ',"rpm":100000000,"tpm":1000000000'
  BENCH_CURL="--cacert $tmp/ca.pem" bench_wallets "$url" "$admin"
  printf -v "key_$name" %s "$key"
}
start_purser purser 0
start_purser purser_tls 1

contenders=(nginx nginx_tls purser purser_tls)
target() {  # contender -> url|key|model|pids
  case $1 in
    nginx) echo "http://127.0.0.1:$nginx_port/v1/chat/completions|-|sim-small|$nginx_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')" ;;
    nginx_tls) echo "https://localhost:$nginx_tls_port/v1/chat/completions|-|sim-small|$nginx_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')" ;;
    purser) echo "http://127.0.0.1:$port_purser/v1/chat/completions|$key_purser|bench|$pid_purser" ;;
    purser_tls) echo "https://localhost:$port_purser_tls/v1/chat/completions|$key_purser_tls|bench|$pid_purser_tls" ;;
  esac
}

measure() {  # round kind contender connections duration
  local line url key model procs before after requests headers=""
  line=$(target "$3")
  url=${line%%|*}; line=${line#*|}
  key=${line%%|*}; line=${line#*|}
  model=${line%%|*}; procs=${line#*|}
  [ "$key" = - ] && key=""
  [ "$2" = close ] && headers="Connection: close"
  before=$(cpu_ticks $procs)
  BENCH_KEY=$key BENCH_MODEL=$model BENCH_HEADERS=$headers wrk -t1 -c"$4" -d"$5" --latency -s bench/gateway/post.lua "$url" >"$tmp/wrk.txt"
  after=$(cpu_ticks $procs)
  requests=$(awk '/requests in/ {print $1}' "$tmp/wrk.txt")
  echo "$1 $2 $3 $(awk '/Requests\/sec:/ {print $2}' "$tmp/wrk.txt") $(to_us "$(awk '$1 == "50%" {print $2}' "$tmp/wrk.txt")") $(to_us "$(awk '$1 == "99%" {print $2}' "$tmp/wrk.txt")") $(( (after - before) * tick_us * 1000 / (requests > 0 ? requests : 1) )) $(awk '/Non-2xx/ {print $NF}' "$tmp/wrk.txt" | grep . || echo 0) $(awk '/Socket errors/ {print $4 + $6 + $8 + $10}' "$tmp/wrk.txt" | grep . || echo 0)"
}

for c in "${contenders[@]}"; do measure 0 warm "$c" "$connections" 2s >/dev/null; done
: >"$tmp/results.txt"
for r in $(seq "$rounds"); do
  for c in "${contenders[@]}"; do measure "$r" keepalive "$c" "$connections" "$duration" >>"$tmp/results.txt"; done
  for c in "${contenders[@]}"; do measure "$r" close "$c" "$close_connections" "$duration" >>"$tmp/results.txt"; done
  echo "round $r of $rounds done" >&2
done
mkdir -p bench/results
node bench/gateway_tls/summary.mjs "$tmp/results.txt" "$rounds" "$(nproc)" "$connections" "$close_connections" "$duration" >bench/results/gateway_tls.json
node -e 'const r=require("./bench/results/gateway_tls.json"); console.log(r.text)'
