#!/usr/bin/env bash
# bench/http: Purser's bare HTTP server (one trivial handler) against nginx returning the same
# 13-byte body, side by side in one run, loaded by wrk over loopback keep-alive connections.
# Both servers get the same number of worker threads; wrk gets one thread. Each server is
# measured in alternating rounds and the median is reported with the ratio purser/nginx.
#
#   bench/http/run.sh BUILD_DIR     (env: WORKERS=1 CONNECTIONS=64 DURATION=10s ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
workers=${WORKERS:-1}
connections=${CONNECTIONS:-64}
duration=${DURATION:-10s}
rounds=${ROUNDS:-3}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT

nginx_port=$(free_port)
purser_port=$(free_port)
cat >"$tmp/nginx.conf" <<CONF
worker_processes $workers;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  client_body_temp_path $tmp/body;
  proxy_temp_path $tmp/proxy;
  fastcgi_temp_path $tmp/fastcgi;
  uwsgi_temp_path $tmp/uwsgi;
  scgi_temp_path $tmp/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    location / { default_type text/plain; return 200 "hello, world\n"; }
  }
}
CONF
nginx -c "$tmp/nginx.conf" -p "$tmp" &
pids+=($!)
"$build/bench/bare_server" "$purser_port" "$workers" >"$tmp/purser.out" &
pids+=($!)
for port in "$nginx_port" "$purser_port"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
  [ "$(curl -s "http://127.0.0.1:$port/")" = "hello, world" ] || { echo "server on $port did not answer" >&2; exit 1; }
done

measure() {  # port -> requests/s and p99 latency
  wrk -t1 -c"$connections" -d"$duration" --latency "http://127.0.0.1:$1/" >"$tmp/wrk.txt"
  local rps p99
  rps=$(awk '/Requests\/sec:/ {print $2}' "$tmp/wrk.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$tmp/wrk.txt")
  echo "$rps $p99"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Warm both up, then alternate rounds so drift on a shared machine hits both alike.
wrk -t1 -c"$connections" -d2s "http://127.0.0.1:$nginx_port/" >/dev/null
wrk -t1 -c"$connections" -d2s "http://127.0.0.1:$purser_port/" >/dev/null
: >"$tmp/nginx.rps"; : >"$tmp/purser.rps"; : >"$tmp/nginx.p99"; : >"$tmp/purser.p99"
for r in $(seq "$rounds"); do
  read -r rps p99 < <(measure "$nginx_port"); echo "$rps" >>"$tmp/nginx.rps"; echo "$p99" >>"$tmp/nginx.p99"
  read -r rps p99 < <(measure "$purser_port"); echo "$rps" >>"$tmp/purser.rps"; echo "$p99" >>"$tmp/purser.p99"
done
nginx_rps=$(median <"$tmp/nginx.rps")
purser_rps=$(median <"$tmp/purser.rps")
ratio=$(awk -v a="$purser_rps" -v b="$nginx_rps" 'BEGIN {printf "%.2f", a / b}')
cores=$(nproc)
echo "http ($cores cores; $workers worker thread(s) each; wrk -t1 -c$connections -d$duration; median of $rounds rounds)"
printf '  %-8s %12s req/s   p99 %s\n' nginx "$nginx_rps" "$(tr '\n' ' ' <"$tmp/nginx.p99")"
printf '  %-8s %12s req/s   p99 %s\n' purser "$purser_rps" "$(tr '\n' ' ' <"$tmp/purser.p99")"
echo "  ratio purser/nginx: $ratio"
mkdir -p bench/results
cat >bench/results/http.json <<JSON
{"cores": $cores, "workers": $workers, "connections": $connections, "duration": "$duration",
 "rounds": $rounds, "nginx_rps": $nginx_rps, "purser_rps": $purser_rps, "ratio": $ratio,
 "nginx_rps_all": [$(paste -sd, "$tmp/nginx.rps")], "purser_rps_all": [$(paste -sd, "$tmp/purser.rps")]}
JSON
