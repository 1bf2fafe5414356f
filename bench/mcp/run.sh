#!/usr/bin/env bash
# bench/mcp: what Purser adds to one MCP tool call. A minimal MCP server (bench/mcp/upstream.mjs,
# answers at once) called directly and through Purser's /mcp (1 thread; a key with the tool in
# its allow-list, a wallet chain of 3, a price per call: the call held, settled and metered as in
# production), sequentially on one keep-alive connection, in interleaved rounds. Results:
# bench/results/mcp.json (p50/p99 per path, the added latency and the p50 ratio).
#   bench/mcp/run.sh BUILD_DIR   (env: CALLS=4000 ROUNDS=5)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT

node bench/mcp/upstream.mjs >"$tmp/upstream.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q 'listening on' "$tmp/upstream.log" && break; sleep 0.05; done
upstream=$(sed -n 's/^listening on //p' "$tmp/upstream.log")

admin=bench-admin-key-0123456789abcdef0123
port=$(free_port)
cat >"$tmp/purser.yaml" <<CONF
listen: 127.0.0.1:$port
threads: 1
log: {level: warn}
ledger: {sync: batch}
mcp:
  servers: [{name: bench, url: $upstream}]
  prices: [{server: bench, tool: echo, per_call: "0.001"}]
CONF
PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/purser.yaml" --data "$tmp/var" >"$tmp/purser.log" 2>&1 &
pids+=($!)
url="http://127.0.0.1:$port"
wait_for "$url/healthz"
bench_member "$url" "$admin" ',"tools":["bench/echo"]'
bench_wallets "$url" "$admin"

node bench/mcp/latency.mjs "$upstream" "$url" "$key" "${CALLS:-4000}" "${ROUNDS:-5}" | tee bench/results/mcp.json
