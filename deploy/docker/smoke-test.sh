#!/usr/bin/env bash
# docker-compose smoke test: builds the image, starts the compose file with 2 workers, scales
# the running cluster to 3 (the new worker joins and takes its share, state and all), then
# stops one worker (SIGTERM: it drains and exits 0), kills another (SIGKILL: it fails over),
# and checks summary.json (processed ==
# sent, nothing lost, the two rescales) and that outputs.csv equals the standalone engine's
# outputs over the recorded input, row for row. The cluster runs secure (the compose file's
# default: CURVE on every socket): an injector with a key nobody listed is refused and counted,
# each service container mounts its own role's key only, and the operator's commands run in
# the `ops` service. Tears everything down even when a step fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

compose() {
    if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}
files=(-f docker-compose.yml -f deploy/docker/smoke-rescale.yml)
image=${CEP_IMAGE:-cep:local}

results=$(mktemp -d)
stranger=$(mktemp -d)
export COMPOSE_PROJECT_NAME=cep-smoke CEP_RESULTS="$results" CEP_RATE=50000 CEP_DURATION=75s CEP_WARMUP=500ms \
    CEP_CSV=all CEP_SETTLE=2s
cleanup() {
    status=$?
    if [ "$status" -ne 0 ]; then compose "${files[@]}" logs --tail=20 >&2 || true; fi
    compose "${files[@]}" down --volumes --remove-orphans >/dev/null 2>&1 || true
    rm -rf "$results" "$stranger"
}
trap cleanup EXIT

fail() { echo "compose smoke test failed: $*" >&2; exit 1; }
# What the compose file's `ops` service runs, started by docker itself: docker-compose v1 is a
# Python program, seconds per `run`, and the status is polled while the stream goes.
ops() {
    docker run --rm --network "${COMPOSE_PROJECT_NAME}_default" \
        -v "${COMPOSE_PROJECT_NAME}_operator-key:/keys/operator:ro" -v "${COMPOSE_PROJECT_NAME}_public-keys:/keys/public:ro" \
        -e CEP_KEY=/keys/operator/operator.key -e CEP_KEYS=/keys/public -e CEP_ROUTER=tcp://router:5556 "$image" "$@"
}
status() {
    ops cluster status --interval 0 2>/dev/null || true
}
# Polls `cep cluster status` (with the operator's key) until `check` accepts it.
wait_until() {
    local what=$1 check=$2 text=""
    # docker-compose v1 is a Python program: each exec costs CPU the cluster shares, so poll gently.
    for _ in $(seq 1 120); do
        text=$(status)
        if $check "$text"; then echo "$text"; return 0; fi
        sleep 0.5
    done
    echo "compose smoke test failed: gave up waiting for $what; last status:" >&2
    echo "$text" >&2
    exit 1
}
active() { grep -c ' active ' <<<"$1" || true; }
running_with_two() { grep -q "streams ended: 0 of" <<<"$1" && [ "$(active "$1")" = 2 ]; }
three_settled() { [ "$(active "$1")" = 3 ] && grep -q "moving: nothing" <<<"$1"; }
one_left() { grep -q " left " <<<"$1" && grep -q "moving: nothing" <<<"$1"; }
one_failed() { grep -q " failed " <<<"$1" && [ "$(active "$1")" = 1 ]; }

deploy/docker/build-image.sh
docker run --rm -v "$stranger":/stranger "$image" keys generate /stranger/stranger.key >/dev/null
compose "${files[@]}" up -d --scale worker=2
wait_until "the run to start with 2 workers" running_with_two
# (Read whole first: `grep -q` leaving early would fail the pipe under pipefail.)
router_log=$(compose "${files[@]}" logs router)
grep -q "secure: CURVE on every socket" <<<"$router_log" || fail "the router does not run CURVE"
# The operator's service answers as docs/DEPLOY.md says.
ops_status=$(compose "${files[@]}" run --rm -T ops cluster status --interval 0 2>&1) ||
    fail "docker compose run --rm ops cluster status: $ops_status"
grep -q ' active ' <<<"$ops_status" || fail "the ops service's status shows no worker: $ops_status"
# No service container holds a key of another role than its own (the operator's is in none);
# only workers mount the checkpoint store.
check_mounts() {
    local service container volume
    for service in router collector worker injector; do
        for container in $(compose "${files[@]}" ps -q "$service"); do
            for volume in $(docker inspect --format '{{range .Mounts}}{{if .Name}}{{.Name}} {{end}}{{end}}' "$container"); do
                case $volume in
                    "${COMPOSE_PROJECT_NAME}_${service}-key" | "${COMPOSE_PROJECT_NAME}_public-keys") ;;
                    # The checkpoint store holds state, no key: every worker mounts it.
                    "${COMPOSE_PROJECT_NAME}_checkpoints") [ "$service" = worker ] || fail "the $service container mounts $volume" ;;
                    *) fail "the $service container mounts $volume" ;;
                esac
            done
        done
    done
}
check_mounts
# An injector whose key is in no list, meanwhile (docker-compose v1 takes seconds to start it):
# the router turns it away in the handshake. Its verdict is read at the end.
(
    ! compose -f docker-compose.yml run --rm --no-deps -v "$stranger":/stranger \
        -e CEP_KEY=/stranger/stranger.key -e CEP_START_TIMEOUT=3s injector >/dev/null 2>&1
) &
stranger_refused=$!
compose "${files[@]}" up -d --scale worker=3 --no-recreate
wait_until "the third worker to join" three_settled
check_mounts   # the worker that joined too
# SIGTERM to one worker: it asks to leave, its symbols move to the other two, it exits 0.
# (Lists are read whole before one is picked: `head` exiting early would fail the pipe with
# SIGPIPE under pipefail, as docker-compose v1 writes its lines one by one.)
leaving=$(compose "${files[@]}" ps -q worker | sed -n 1p)
docker stop "$leaving" >/dev/null   # the compose file's stop_grace_period
[ "$(docker inspect --format '{{.State.ExitCode}}' "$leaving")" = 0 ] ||
    { echo "compose smoke test failed: the stopped worker did not exit 0" >&2; exit 1; }
wait_until "the stopped worker to have left" one_left
# SIGKILL to one of the two left, once a checkpoint has followed the leave (every second):
# the router notices, and its symbols fail over to the last one, restored and replayed.
sleep 3
workers_now=$(compose "${files[@]}" ps -q worker | xargs docker inspect --format '{{.State.Running}} {{.Id}}')
victim=$(awk '$1 == "true" { print $2 }' <<<"$workers_now" | sed -n 1p)
docker kill "$victim" >/dev/null
wait_until "the killed worker to have failed over" one_failed

wait "$stranger_refused" ||
    { echo "compose smoke test failed: an injector with an unlisted key was let in" >&2; exit 1; }
collector=$(compose "${files[@]}" ps -q collector)
[ "$(docker wait "$collector")" = 0 ] || { echo "compose smoke test failed: the collector exited non-zero" >&2; exit 1; }
docker run --rm -v "$results":/results "$image" engine --input /results/input.csv --output /results/standalone.csv >/dev/null

python3 - "$results" <<'CHECK'
import json, sys
results = sys.argv[1]
summary = json.load(open(f"{results}/summary.json"))
workers = summary["workers"]
problems = []
if not summary["secure"]:
    problems.append("summary.json says the run was not secure")
if not summary["complete"]:
    problems.append("run incomplete")
if summary["events_sent"] == 0 or summary["events_processed"] != summary["events_sent"]:
    problems.append(f"processed {summary['events_processed']} of {summary['events_sent']} sent")
if sorted(summary["outputs"]) != ["perc", "trend", "volatility"] or summary["rules"][0]["origin"] != "/rules/reference.rules":
    problems.append(f"rules: {summary['rules']}, outputs {summary['outputs']}")
if summary["events_lost"] or summary["duplicates"] or summary["out_of_order"]:
    problems.append(f"lost {summary['events_lost']}, duplicates {summary['duplicates']}, out of order {summary['out_of_order']}")
if len(workers) != 3 or any(w["events"] == 0 for w in workers):
    problems.append(f"expected 3 workers with events, got {workers}")
failovers = [(f["recovered"], f["state_lost"]) for f in summary["failovers"]]
if failovers != [(True, [])] or sum(w["failed"] for w in workers) != 1:
    problems.append(f"expected one worker failed over from its checkpoint, got {summary['failovers']}")
refused = {cause: n for cause, n in summary["rejected"].get("router", {}).items() if cause.startswith("unauthenticated")}
if not refused:
    problems.append(f"the stranger's connection was not counted: {summary['rejected']}")
kinds = [(r["kind"], r["finished"]) for r in summary["rescales"]]
if kinds != [("join", True), ("leave", True)] or any(r["symbols"] == 0 for r in summary["rescales"]):
    problems.append(f"expected a join then a leave, got {summary['rescales']}")

def rows(path):
    with open(path) as f:
        next(f)
        return sorted(",".join(line.rstrip("\n").split(",")[:6]) for line in f)
cluster, standalone = rows(f"{results}/outputs.csv"), rows(f"{results}/standalone.csv")
if not standalone or cluster != standalone:
    problems.append(f"outputs.csv ({len(cluster)} rows) differs from the standalone engine's ({len(standalone)} rows)")
if problems:
    sys.exit("compose smoke test failed: " + "; ".join(problems))
print(f"compose smoke test passed: {summary['events_processed']} events, 2 -> 3 -> 2 workers live, one killed "
      f"and failed over ({summary['failovers'][0]['replayed']} ticks replayed), "
      f"{len(cluster)} outputs identical to the standalone engine's, "
      f"end-to-end p99 {summary['latency_us']['end_to_end']['p99']:.0f} us")
CHECK
for file in report.txt; do
    [ -s "$results/$file" ] || { echo "compose smoke test failed: $file missing"; exit 1; }
done
