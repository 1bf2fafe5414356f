#!/usr/bin/env bash
# bench/gateway: the same simulated upstream (purser sim llm, instant answers) loaded by wrk
#   (a) directly, (b) through nginx proxy_pass with upstream keep-alive, (c) through Purser with
#   authentication, rate limits, a budget reservation, metering and routing on
# in one run; then a streaming variant (time to first byte and tokens/s, direct vs Purser) and
# the median x-purser-overhead-us. Results: bench/results/gateway.json.
#   bench/gateway/run.sh BUILD_DIR   (env: CONNECTIONS=64 DURATION=10s)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
connections=${CONNECTIONS:-64}
duration=${DURATION:-10s}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT

sim_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$sim_port" --ttft-ms 0 --tokens-per-s 0 --threads 1 >"$tmp/sim.log" 2>&1 &
pids+=($!)
stream_port=$(free_port)
"$purser" sim llm --listen "127.0.0.1:$stream_port" --ttft-ms 20 --tokens-per-s 500 --threads 1 >"$tmp/stream.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$sim_port/healthz"
wait_for "http://127.0.0.1:$stream_port/healthz"

nginx_port=$(free_port)
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
}
CONF
nginx -c "$tmp/nginx.conf" -p "$tmp" &
pids+=($!)

purser_port=$(free_port)
admin=bench-admin-key-0123456789abcdef
cat >"$tmp/purser.yaml" <<CONF
listen: 127.0.0.1:$purser_port
threads: 1
log: {level: warn}
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
PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/purser.yaml" --data "$tmp/var" >"$tmp/purser.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$purser_port/healthz"
wait_for "http://127.0.0.1:$nginx_port/v1/models"
api() { curl -sf -X POST "http://127.0.0.1:$purser_port$1" -H "Authorization: Bearer $admin" -d "$2"; }
bench_member "http://127.0.0.1:$purser_port" "$admin" ',"rpm":100000000'
api /api/v1/wallets "{\"scope\":{\"kind\":\"tenant\",\"id\":\"$tenant\"},\"limit\":\"1000000\"}" >/dev/null

run_wrk() {  # name url key model
  BENCH_KEY=$3 BENCH_MODEL=$4 wrk -t1 -c"$connections" -d"$duration" --latency -s bench/gateway/post.lua "$2" >"$tmp/$1.txt"
  local rps p50 p99
  rps=$(awk '/Requests\/sec:/ {print $2}' "$tmp/$1.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$tmp/$1.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$tmp/$1.txt")
  errors=$(awk '/Non-2xx/ {print $NF}' "$tmp/$1.txt")
  echo "$1 $rps $p50 $p99 ${errors:-0}"
}
# Warm up every path, then measure each once.
for url in "http://127.0.0.1:$sim_port/v1/chat/completions" "http://127.0.0.1:$nginx_port/v1/chat/completions" "http://127.0.0.1:$purser_port/v1/chat/completions"; do
  BENCH_KEY=$key BENCH_MODEL=bench wrk -t1 -c"$connections" -d2s -s bench/gateway/post.lua "$url" >/dev/null
done
read -r _ d_rps d_p50 d_p99 d_err < <(run_wrk direct "http://127.0.0.1:$sim_port/v1/chat/completions" "" bench)
read -r _ n_rps n_p50 n_p99 n_err < <(run_wrk nginx "http://127.0.0.1:$nginx_port/v1/chat/completions" "" bench)
read -r _ p_rps p_p50 p_p99 p_err < <(run_wrk purser "http://127.0.0.1:$purser_port/v1/chat/completions" "$key" bench)

# Overhead reported by Purser itself over 200 sequential requests: all of it, the part spent
# waiting for the ledger's durable commits (the disk's flushes), and the rest (processing).
for _ in $(seq 200); do
  curl -s -o /dev/null -D - "http://127.0.0.1:$purser_port/v1/chat/completions" -H "Authorization: Bearer $key" \
    -d '{"model":"bench","messages":[{"role":"user","content":"hi"}],"max_tokens":16}' |
    awk -F': ' 'tolower($1) == "x-purser-overhead-us" {o=$2+0} tolower($1) == "x-purser-commit-us" {c=$2+0} END {print o, c, o-c}'
done >"$tmp/overhead.txt"
median_of() { cut -d' ' -f"$1" "$tmp/overhead.txt" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p99_of() { cut -d' ' -f"$1" "$tmp/overhead.txt" | sort -n | awk '{a[NR]=$1} END {print a[int(NR*0.99)]}'; }
overhead_p50=$(median_of 1)
overhead_p99=$(p99_of 1)
commit_p50=$(median_of 2)
processing_p50=$(median_of 3)
processing_p99=$(p99_of 3)

# Streaming: 100 tokens at 500 tokens/s after a 20 ms first token; direct vs through Purser.
stream_body='{"model":"MODEL","messages":[{"role":"user","content":"stream please"}],"max_tokens":100,"stream":true}'
measure_stream() {  # url key model -> median ttfb_ms, median total_ms
  for _ in $(seq 20); do
    curl -s -o /dev/null -w '%{time_starttransfer} %{time_total}\n' "$1" ${2:+-H "Authorization: Bearer $2"} \
      -d "${stream_body/MODEL/$3}"
  done | sort -n | awk '{t[NR]=$1*1000; s[NR]=$2*1000} END {m=int((NR+1)/2); printf "%.1f %.1f\n", t[m], s[m]}'
}
read -r sd_ttfb sd_total < <(measure_stream "http://127.0.0.1:$stream_port/v1/chat/completions" "" sim-small)
read -r sp_ttfb sp_total < <(measure_stream "http://127.0.0.1:$purser_port/v1/chat/completions" "$key" stream)

ratio=$(awk -v a="$p_rps" -v b="$n_rps" 'BEGIN {printf "%.2f", a / b}')
to_us() { awk -v v="$1" 'BEGIN {n = v + 0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else print n * 1000000}'; }
added_p50=$(awk -v a="$(to_us "$p_p50")" -v b="$(to_us "$d_p50")" 'BEGIN {printf "%.0f", a - b}')
added_p99=$(awk -v a="$(to_us "$p_p99")" -v b="$(to_us "$d_p99")" 'BEGIN {printf "%.0f", a - b}')
cores=$(nproc)
echo "gateway ($cores cores; wrk -t1 -c$connections -d$duration; non-streamed chat, 16 tokens)"
printf '  %-8s %10s req/s   p50 %-9s p99 %-9s non-2xx %s\n' direct "$d_rps" "$d_p50" "$d_p99" "$d_err"
printf '  %-8s %10s req/s   p50 %-9s p99 %-9s non-2xx %s\n' nginx "$n_rps" "$n_p50" "$n_p99" "$n_err"
printf '  %-8s %10s req/s   p50 %-9s p99 %-9s non-2xx %s\n' purser "$p_rps" "$p_p50" "$p_p99" "$p_err"
echo "  ratio purser/nginx: $ratio; purser - direct under load: p50 +$added_p50 us, p99 +$added_p99 us"
echo "  x-purser-overhead-us (sequential requests): median $overhead_p50, p99 $overhead_p99"
echo "    of which waiting for durable commits (median): $commit_p50 us; processing median $processing_p50 us, p99 $processing_p99 us"
echo "  streaming (100 tokens): direct ttfb ${sd_ttfb} ms, total ${sd_total} ms; purser ttfb ${sp_ttfb} ms, total ${sp_total} ms"
mkdir -p bench/results
cat >bench/results/gateway.json <<JSON
{"cores": $cores, "connections": $connections, "duration": "$duration",
 "added_latency_us": {"p50": $added_p50, "p99": $added_p99},
 "direct_rps": $d_rps, "nginx_rps": $n_rps, "purser_rps": $p_rps, "ratio_purser_nginx": $ratio,
 "p50": {"direct": "$d_p50", "nginx": "$n_p50", "purser": "$p_p50"},
 "p99": {"direct": "$d_p99", "nginx": "$n_p99", "purser": "$p_p99"},
 "overhead_us": {"median": $overhead_p50, "p99": $overhead_p99, "commit_median": $commit_p50,
                 "processing_median": $processing_p50, "processing_p99": $processing_p99},
 "stream_ms": {"direct_ttfb": $sd_ttfb, "direct_total": $sd_total, "purser_ttfb": $sp_ttfb, "purser_total": $sp_total}}
JSON
