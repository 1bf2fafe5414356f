#!/usr/bin/env bash
# bench/fleet_run: 1,000 short workloads (each runs `true`) submitted to `purser serve` with one
# ClusterQueue of 16 CPUs (each workload asks for 1, so 16 run at a time), run by the local
# executor and waited for until every one has ended. Reported: wall time and workloads per
# second, and — from the server's timestamps — admission to process start and submission to end
# (p50/p99). Baseline in the same run: the same processes started directly by node, 16 at a time.
# Results: bench/results/fleet_run.json.   bench/fleet_run/run.sh BUILD_DIR   (env: COUNT=1000)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
purser="$build/purser"
count=${COUNT:-1000}
tmp=$(mktemp -d)
pids=()
. bench/lib.sh
trap cleanup EXIT

cat >"$tmp/fleet.yaml" <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: cpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: batch}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [cpu]
      flavors: [{name: cpu, resources: [{name: cpu, nominalQuota: 16}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: t, name: batch}
spec: {clusterQueue: batch}
YAML
port=$(free_port)
admin=bench-admin-key-0123456789abcdef
cat >"$tmp/purser.yaml" <<CONF
listen: 127.0.0.1:$port
log: {level: error}
fleet: {manifests: [fleet.yaml]}
CONF
PURSER_ADMIN_KEY=$admin "$purser" serve --config "$tmp/purser.yaml" --data "$tmp/var" >"$tmp/purser.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$port/healthz"
bench_member "http://127.0.0.1:$port" "$admin"

fleet=$(node bench/fleet_run/load.mjs --url "http://127.0.0.1:$port" --key "$key" --count "$count" \
  --concurrency 8 --command '["true"]')
direct=$(node bench/fleet_run/baseline.mjs --count "$count" --concurrency 16 --command '["true"]')
field() { node -e "const v=JSON.parse(process.argv[1]);console.log(process.argv[2].split('.').reduce((o,k)=>o[k],v))" "$1" "$2"; }
cores=$(nproc)
echo "fleet_run ($cores cores; $count workloads of one \`true\` each, 16 at a time)"
printf '  purser   %6s workloads/s  wall %6s s  succeeded %s/%s  admission->start p50 %s ms p99 %s ms  submit->end p50 %s ms p99 %s ms\n' \
  "$(field "$fleet" per_s)" "$(field "$fleet" wall_s)" "$(field "$fleet" succeeded)" "$count" \
  "$(field "$fleet" admission_to_start_ms.p50)" "$(field "$fleet" admission_to_start_ms.p99)" \
  "$(field "$fleet" submit_to_end_ms.p50)" "$(field "$fleet" submit_to_end_ms.p99)"
printf '  direct   %6s processes/s  wall %6s s\n' "$(field "$direct" per_s)" "$(field "$direct" wall_s)"
echo "  purser vs direct: $(awk -v a="$(field "$fleet" per_s)" -v b="$(field "$direct" per_s)" 'BEGIN {printf "%.2f", a / b}')x the throughput"
mkdir -p bench/results
printf '{"cores": %s, "purser": "%s", "fleet": %s, "direct": %s}\n' "$cores" \
  "$("$purser" version | head -1)" "$fleet" "$direct" >"${RESULT:-bench/results/fleet_run.json}"
