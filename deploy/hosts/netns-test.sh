#!/usr/bin/env bash
# Hosts, simulated: router, collector, two workers and the injector each run in a network
# namespace of their own with their own address, joined by a bridge in a further namespace,
# configured by the same cluster file format an operator writes (deploy/hosts/cluster.toml).
# Checks the run is complete and correct; removes everything it made, also on failure.
# Needs root (ip netns). The host's own network is not touched.
set -euo pipefail
cd "$(dirname "$0")/../.."
cep=$(realpath "${CEP_BIN:-target/release/cep}")
[ -x "$cep" ] || { cargo build --release -p cep; cep=$(realpath target/release/cep); }

tag="cep$$"
switch="$tag-sw"
nodes=(router collector worker0 worker1 injector)
declare -A address=([router]=10.231.0.10 [collector]=10.231.0.11 [worker0]=10.231.0.12 [worker1]=10.231.0.13 [injector]=10.231.0.14)
work=$(mktemp -d)
pids=()

cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for node in "${nodes[@]}"; do ip netns delete "$tag-$node" 2>/dev/null || true; done
    ip netns delete "$switch" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$switch"
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
index=0
for node in "${nodes[@]}"; do
    ns="$tag-$node"
    ip netns add "$ns"
    ip -n "$ns" link add eth0 type veth peer name "p$index" netns "$switch"
    ip -n "$ns" addr add "${address[$node]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$switch" link set "p$index" master br0 up
    index=$((index + 1))
done

# Secure, as the hosts run by default: a key pair per host (each worker its own), one public
# keys folder (on real hosts each gets only its own key pair, and the public folder).
"$cep" keys init "$work/keys" --worker worker-0 --worker worker-1 >/dev/null

cat > "$work/cluster.toml" <<TOML
[security]
keys = "$work/keys"

[router]
host = "${address[router]}"
metrics_port = 9100

[collector]
host = "${address[collector]}"
out = "$work/results"
csv = "all"
metrics_port = 9100

[[workers]]
id = "worker-0"
host = "${address[worker0]}"
metrics_port = 9100

[[workers]]
id = "worker-1"
host = "${address[worker1]}"

[injector]
host = "${address[injector]}"
rate = 100000
count = 200000
warmup = "0s"
metrics_port = 9100
TOML

start() { # node, then cep node arguments
    local node=$1
    shift
    ip netns exec "$tag-$node" "$cep" node --config "$work/cluster.toml" "$@" >"$work/$node.log" 2>&1 &
    pids+=($!)
}
start router --role router
start collector --role collector
collector_pid=${pids[-1]}
start worker0 --role worker --id worker-0
start worker1 --role worker --id worker-1
start injector --role injector

status=0
timeout 120 tail --pid="$collector_pid" -f /dev/null || status=$?
wait "$collector_pid" || status=$?
if [ "$status" -ne 0 ] || [ ! -f "$work/results/summary.json" ]; then
    for node in "${nodes[@]}"; do echo "--- $node"; tail -5 "$work/$node.log"; done
    echo "namespace test failed: the collector did not finish cleanly (status $status)"
    exit 1
fi

python3 - "$work/results/summary.json" "$work/collector.log" "${address[collector]}" <<'CHECK'
import json, sys
summary = json.load(open(sys.argv[1]))
problems = []
# What the hosts guide promises in the collector's journal: progress lines and the report.
log = open(sys.argv[2]).read()
if "[progress]" not in log or "[OVERALL], Throughput(ops/sec)," not in log:
    problems.append("the collector's output lacks its progress lines or the report")
if not summary["secure"]:
    problems.append("summary.json says the run was not secure")
if not summary["complete"]:
    problems.append("run incomplete")
if summary["events_sent"] != 200000 or summary["events_processed"] != 200000:
    problems.append(f"processed {summary['events_processed']} of {summary['events_sent']} (expected 200000)")
if summary["events_lost"] or summary["duplicates"] or summary["out_of_order"]:
    problems.append(f"lost {summary['events_lost']}, duplicates {summary['duplicates']}, out of order {summary['out_of_order']}")
if summary["outputs"]["volatility"] != 200000:
    problems.append(f"{summary['outputs']['volatility']} volatility outputs, expected one per tick")
ids = sorted(w["id"] for w in summary["workers"])
if ids != ["worker-0", "worker-1"] or any(w["events"] == 0 for w in summary["workers"]):
    problems.append(f"workers: {summary['workers']}")
clocks = sorted(c["node"] for c in summary["clock_offsets"])
if clocks != ["injector-0", "router", "worker-0", "worker-1"]:
    problems.append(f"clock offsets measured for {clocks}")
if "secure: CURVE on every socket" not in open(sys.argv[2]).read():
    problems.append("the collector did not run CURVE")
if problems:
    sys.exit("namespace test failed: " + "; ".join(problems))
print(f"namespace test passed: 200000 events over {ids} on 5 hosts, end-to-end p50 "
      f"{summary['latency_us']['end_to_end']['p50']:.0f} us")
CHECK
