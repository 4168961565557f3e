#!/usr/bin/env bash
# docker-compose smoke test: builds the image, runs the compose file with 3 workers at a modest
# rate, checks summary.json (processed == sent, nothing lost, 3 workers each with events), and
# tears everything down even when a step fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

compose() {
    if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

results=$(mktemp -d)
export COMPOSE_PROJECT_NAME=cep-smoke CEP_RESULTS="$results" CEP_RATE=50000 CEP_DURATION=3s CEP_WARMUP=500ms
cleanup() {
    compose down --volumes --remove-orphans >/dev/null 2>&1 || true
    rm -rf "$results"
}
trap cleanup EXIT

deploy/docker/build-image.sh
compose up --scale worker=3 --exit-code-from collector

python3 - "$results/summary.json" <<'CHECK'
import json, sys
summary = json.load(open(sys.argv[1]))
workers = summary["workers"]
problems = []
if not summary["complete"]:
    problems.append("run incomplete")
if summary["events_sent"] == 0 or summary["events_processed"] != summary["events_sent"]:
    problems.append(f"processed {summary['events_processed']} of {summary['events_sent']} sent")
if sorted(summary["outputs"]) != ["perc", "trend", "volatility"] or summary["rules"][0]["origin"] != "/rules/reference.rules":
    problems.append(f"rules: {summary['rules']}, outputs {summary['outputs']}")
if summary["events_lost"] or summary["duplicates"]:
    problems.append(f"lost {summary['events_lost']}, duplicates {summary['duplicates']}")
if len(workers) != 3 or any(w["events"] == 0 for w in workers):
    problems.append(f"expected 3 workers with events, got {workers}")
if problems:
    sys.exit("compose smoke test failed: " + "; ".join(problems))
print(f"compose smoke test passed: {summary['events_processed']} events over {len(workers)} workers, "
      f"end-to-end p99 {summary['latency_us']['end_to_end']['p99']:.0f} us")
CHECK
for file in outputs.csv report.txt; do
    [ -s "$results/$file" ] || { echo "compose smoke test failed: $file missing"; exit 1; }
done
