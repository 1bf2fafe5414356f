#!/usr/bin/env bash
# bench/observe: what scraping costs. Purser scrapes TARGETS providers' metrics every INTERVAL
# (4 simulated vLLM servers, each behind TARGETS/4 provider names, so every target is a
# separate series set of a real /metrics text), for DURATION seconds; reported: Purser's CPU per
# second and per scrape, its resident memory against a baseline Purser with the same providers
# and no scraping, and the series store's own count of series and bytes. Results:
# bench/results/observe.json.
#   bench/observe/run.sh BUILD_DIR   (env: TARGETS=100 INTERVAL=1s DURATION=60)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
targets=${TARGETS:-100}
interval=${INTERVAL:-1s}
duration=${DURATION:-60}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT
tick_us=$((1000000 / $(getconf CLK_TCK)))

sims=()
for i in 1 2 3 4; do
  p=$(free_port)
  "$purser" sim llm --listen "127.0.0.1:$p" --models m --ttft-ms 0 --tokens-per-s 0 >/dev/null 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$p/health"
  # One answer, so that its latency histograms have series.
  curl -sf "http://127.0.0.1:$p/v1/chat/completions" -d '{"model":"m","messages":[{"role":"user","content":"hi"}]}' >/dev/null
  sims+=("$p")
done

# run_purser NAME SCRAPE(yes|no): starts Purser; sets $pid and $url
run_purser() {
  local name=$1 scrape=$2 port
  port=$(free_port)
  {
    echo "listen: 127.0.0.1:$port"
    echo "threads: 1"
    echo "log: {level: error}"
    echo "providers:"
    for i in $(seq "$targets"); do
      local sp=${sims[$(( (i - 1) % 4 ))]}
      if [ "$scrape" = yes ]; then
        echo "  - {name: p$i, kind: openai, base_url: http://127.0.0.1:$sp/v1, metrics_url: http://127.0.0.1:$sp/metrics}"
      else
        echo "  - {name: p$i, kind: openai, base_url: http://127.0.0.1:$sp/v1}"
      fi
    done
    echo "routes:"
    echo "  - model: chat"
    echo "    strategy: slo"
    echo "    targets:"
    for i in $(seq "$targets"); do echo "      - {provider: p$i, model: m}"; done
    echo "observe: {interval: $interval}"
  } >"$tmp/$name.yaml"
  PURSER_ADMIN_KEY=observe-bench-admin-key-0123456789 "$purser" serve --config "$tmp/$name.yaml" --data "$tmp/$name-var" >"$tmp/$name.log" 2>&1 &
  pid=$!
  pids+=($pid)
  url="http://127.0.0.1:$port"
  wait_for "$url/healthz"
}

measure() {  # NAME SCRAPE -> "cpu_ms_per_s rss_kib series bytes"
  run_purser "$1" "$2"
  sleep 5  # let the rings and connections settle before measuring
  local t0 t1
  t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  sleep "$duration"
  t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  local rss series bytes
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  series=$(curl -sf "$url/metrics" | awk '$1 == "purser_observe_series" {print $2}')
  bytes=$(curl -sf "$url/metrics" | awk '$1 == "purser_observe_memory_bytes" {print $2}')
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$(( (t1 - t0) * tick_us / 1000 / duration )) $rss ${series:-0} ${bytes:-0}"
}

read -r base_cpu base_rss _ _ < <(measure base no)
read -r cpu rss series bytes < <(measure scrape yes)
secs=${interval%s}
scrapes_per_s=$(awk -v t="$targets" -v s="$secs" 'BEGIN {print t / s}')
us_per_scrape=$(awk -v c="$cpu" -v b="$base_cpu" -v r="$scrapes_per_s" 'BEGIN {printf "%.0f", (c - b) * 1000 / r}')
echo "observe ($(nproc) cores; $targets targets every $interval for ${duration}s)"
echo "  Purser CPU: ${cpu} ms/s scraping vs ${base_cpu} ms/s not (${us_per_scrape} us per scrape, parsing and judging included)"
echo "  Purser memory: RSS $((rss / 1024)) MiB vs $((base_rss / 1024)) MiB; series store ${series} series, $((${bytes%.*} / 1024)) KiB"
mkdir -p bench/results
cat >bench/results/observe.json <<JSON
{"targets": $targets, "interval": "$interval", "duration_s": $duration, "cpu_ms_per_s": $cpu,
 "baseline_cpu_ms_per_s": $base_cpu, "us_per_scrape": $us_per_scrape, "rss_kib": $rss,
 "baseline_rss_kib": $base_rss, "series": $series, "series_bytes": ${bytes%.*}}
JSON
