#!/usr/bin/env bash
# End-to-end check of the Prefect deployments on real servers.
#
# Starts a real MLflow tracking server and a real Prefect server on free 127.0.0.1 ports
# (state in a temp dir), creates the process work pool, deploys deployments/prefect.yaml,
# runs the audit deployment and the retrain deployment three times (promote, keep, demote)
# through a worker, checks the results through MlflowClient, relogs the demoted champion's
# folder with --force --promote (the demotion holds), and runs the MLflow "fairness"
# evaluator plugin against the server (tests/e2e/e2e_checks.py), then the fairness gate
# (tests/e2e/gate_e2e.py, with servers of its own). Every process it starts
# is stopped by PID (process group) on exit, also when a step fails.
#
# Usage:  bash deployments/ci_e2e.sh
# Env:    PYTHON            interpreter (default: <repo>/.venv/bin/python if present, else python)
#         FAIRPCA_REPO_DIR  checkout the worker runs the flows from (default: this repo)
#         E2E_KEEP=1        keep the temp dir (logs, databases) after a successful run
#         E2E_RUN_TIMEOUT   seconds allowed per deployment run (default 240)
set -Eeuo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "${FAIRPCA_REPO_DIR:-$SCRIPT_DIR/..}" && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO_DIR/.venv/bin/python" ]]; then PYTHON="$REPO_DIR/.venv/bin/python"; else PYTHON=python; fi
fi
PYTHON="$(command -v "$PYTHON")"
# `prefect`/`mlflow` entry points and the worker's flow-run processes use this interpreter.
export PATH="$(dirname "$PYTHON"):$PATH"
RUN_TIMEOUT="${E2E_RUN_TIMEOUT:-240}"
POOL="fairpca-process"
PREFECT_FILE="$REPO_DIR/deployments/prefect.yaml"
CHECKS="$REPO_DIR/tests/e2e/e2e_checks.py"

WORK="$("$PYTHON" -c 'import tempfile; print(tempfile.mkdtemp(prefix="fairpca-e2e."))')"
T0=$(date +%s.%N)
PIDS=()
PID_NAMES=()
CHILD=""
CURRENT_STEP="setup"
STEP_LOGS=""
STEP_T0=$T0
TIMINGS=()

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

step() {  # step "title" [log files whose tail is shown if the step fails]
    CURRENT_STEP="$1"
    shift
    STEP_LOGS="$*"
    STEP_T0=$(date +%s.%N)
    echo
    echo "==> [$(elapsed "$T0")s] $CURRENT_STEP"
}

step_ok() {
    local sec
    sec=$(elapsed "$STEP_T0")
    TIMINGS+=("$(printf '%6ss  %s' "$sec" "$CURRENT_STEP")")
    echo "    ok (${sec}s)"
}

fail() {
    echo "ERROR: $*" >&2
    exit 1
}

start_bg() {  # start_bg name logfile command... ; runs in its own process group
    local name="$1" log="$2"
    shift 2
    if command -v setsid >/dev/null; then
        setsid "$@" >"$log" 2>&1 < /dev/null &
    else
        "$@" >"$log" 2>&1 < /dev/null &
    fi
    disown "$!"  # stopped and reaped by cleanup; keeps bash from reporting "Killed" jobs
    PIDS+=("$!")
    PID_NAMES+=("$name")
    echo "    started $name (pid $!, log $log)"
}

signal_tree() {  # signal_tree SIG pid : the process group if it is one, else the pid
    kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null || true
}

stop_pid() {  # TERM; a second TERM after 3 s (the Prefect worker then kills
    # itself; its graceful shutdown after one TERM can hang); KILL after 15 s
    local pid="$1" name="$2" i
    kill -0 "$pid" 2>/dev/null || return 0
    signal_tree TERM "$pid"
    for i in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        [[ $i -eq 30 ]] && signal_tree TERM "$pid"
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "    $name (pid $pid) ignored SIGTERM; sending SIGKILL"
        signal_tree KILL "$pid"
    fi
    # anything left in the group (e.g. a flow-run process of the worker) goes too
    signal_tree KILL "$pid"
}

run_fg() {  # run_fg [--log FILE] command... : a waited-for child, so TERM/INT reach the
    # trap at once (the redirection stays on the child, never on the trap's own output)
    if [[ "$1" == --log ]]; then
        local log="$2"
        shift 2
        "$@" >>"$log" 2>&1 &
    else
        "$@" &
    fi
    CHILD=$!
    local rc=0
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}

cleanup() {
    local rc=$? i log
    trap - EXIT INT TERM
    set +e
    if [[ -n "${CHILD:-}" ]]; then
        signal_tree TERM "$CHILD"
        sleep 1
        signal_tree KILL "$CHILD"
    fi
    if [[ $rc -ne 0 ]]; then
        echo
        echo "E2E FAILED in step: $CURRENT_STEP (exit code $rc)" >&2
        for log in $STEP_LOGS; do
            [[ -f "$log" ]] || continue
            echo "---- last 40 lines of $log ----" >&2
            tail -n 40 "$log" >&2
        done
    fi
    echo
    echo "==> cleanup: stopping ${#PIDS[@]} process(es)"
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        stop_pid "${PIDS[$i]}" "${PID_NAMES[$i]}"
        echo "    stopped ${PID_NAMES[$i]} (pid ${PIDS[$i]})"
    done
    if [[ ${#TIMINGS[@]} -gt 0 ]]; then
        echo
        echo "==> step timings"
        printf '  %s\n' "${TIMINGS[@]}"
    fi
    echo "==> total $(elapsed "$T0")s"
    if [[ $rc -eq 0 && "${E2E_KEEP:-0}" != 1 ]]; then
        rm -rf "$WORK"
    else
        echo "    logs and databases kept in $WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

http_ok() {  # http_ok url : 2xx within 2 s (curl, else the Python standard library)
    if command -v curl >/dev/null; then
        curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null
    else
        "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
            "$1" 2>/dev/null
    fi
}

wait_healthy() {  # wait_healthy name url pid timeout_s
    local name="$1" url="$2" pid="$3" timeout="$4" t_end
    t_end=$(($(date +%s) + timeout))
    while true; do
        kill -0 "$pid" 2>/dev/null || fail "$name exited before it became healthy"
        if http_ok "$url"; then
            return 0
        fi
        [[ $(date +%s) -lt $t_end ]] || fail "$name not healthy at $url after ${timeout}s"
        sleep 0.5
    done
}

run_deployment() {  # run_deployment name param_set log ; sets FLOW_RUN_ID
    local name="$1" params log="$3"
    params=$("$PYTHON" "$CHECKS" params "$2")
    if ! run_fg --log "$log" timeout $((RUN_TIMEOUT + 30)) prefect deployment run "$name" \
        --params "$params" --watch --watch-timeout "$RUN_TIMEOUT"; then
        cat "$log" >&2
        fail "deployment run '$name' did not complete (see the worker log below)"
    fi
    FLOW_RUN_ID=$(sed -n 's/.*UUID: *\([0-9a-f-]\{36\}\).*/\1/p' "$log" | head -n 1)
    [[ -n "$FLOW_RUN_ID" ]] || fail "could not read the flow run id from $log"
    echo "    flow run $FLOW_RUN_ID completed"
}

check() {  # check subcommand [arg] : tests/e2e/e2e_checks.py against the live servers
    run_fg "$PYTHON" "$CHECKS" "$@"
}


# ---- isolated configuration: nothing of the caller's Prefect/MLflow state is used ----------
export PREFECT_HOME="$WORK/prefect-home"
export PREFECT_PROFILES_PATH="$PREFECT_HOME/profiles.toml"
export PREFECT_SERVER_DATABASE_CONNECTION_URL="sqlite+aiosqlite:///$WORK/prefect.db"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# No automatic runs from the cron schedule while the test runs (the schedule itself is checked).
export PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED=false
# The flow runs' logs reach `prefect deployment run --watch` (as the deployments page sets up).
export PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED=true
export PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED=true
export PREFECT_WORKER_QUERY_SECONDS=2
export PREFECT_CLI_COLORS=false
export COLUMNS=200
export FAIRPCA_REPO_DIR="$REPO_DIR"
if [[ -z "${FAIRPCA_DATA_DIR:-}" && -d "$REPO_DIR/../shared/datasets" ]]; then
    export FAIRPCA_DATA_DIR="$(cd "$REPO_DIR/../shared/datasets" && pwd)"
fi
unset MLFLOW_REGISTRY_URI MLFLOW_EXPERIMENT_NAME MLFLOW_EXPERIMENT_ID MLFLOW_RUN_ID
mkdir -p "$PREFECT_HOME" "$WORK/mlartifacts" "$WORK/flow-output"
# the flows keep their local results (reports, matrices, models) here, not in the checkout
export E2E_OUTPUT_DIR="$WORK/flow-output"

MLFLOW_LOG="$WORK/mlflow-server.log"
PREFECT_LOG="$WORK/prefect-server.log"
WORKER_LOG="$WORK/worker.log"
echo "e2e: repo $REPO_DIR, python $PYTHON, work dir $WORK"

step "start MLflow tracking server (in the background)" "$MLFLOW_LOG"
MLFLOW_PORT=$(free_port)
export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
# fairpca uses no MLflow server jobs: skip the job runner and its 7 huey consumer processes
start_bg mlflow-server "$MLFLOW_LOG" env MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false \
    "$PYTHON" -m mlflow server \
    --backend-store-uri "sqlite:///$WORK/mlflow.db" \
    --artifacts-destination "$WORK/mlartifacts" \
    --workers 1 --host 127.0.0.1 --port "$MLFLOW_PORT"
MLFLOW_PID=${PIDS[-1]}
step_ok

step "start Prefect server (in the background)" "$PREFECT_LOG"
PREFECT_PORT=$(free_port)
export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api"
start_bg prefect-server "$PREFECT_LOG" "$PYTHON" -m prefect server start \
    --host 127.0.0.1 --port "$PREFECT_PORT" --no-ui
PREFECT_PID=${PIDS[-1]}
step_ok

step "wait for Prefect health ($PREFECT_API_URL/health)" "$PREFECT_LOG"
wait_healthy "Prefect server" "$PREFECT_API_URL/health" "$PREFECT_PID" 150
step_ok

step "create process work pool '$POOL'" "$WORK/work-pool.log $PREFECT_LOG"
run_fg --log "$WORK/work-pool.log" prefect work-pool create "$POOL" --type process --overwrite
grep -m1 -i "created" "$WORK/work-pool.log" | sed 's/^/    /' || true
step_ok

step "prefect deploy --all (deployments/prefect.yaml)" "$WORK/deploy.log $PREFECT_LOG"
pushd "$REPO_DIR" >/dev/null
run_fg --log "$WORK/deploy.log" \
    prefect --no-prompt deploy --all --prefect-file "$PREFECT_FILE" ||
    fail "prefect deploy failed (log: $WORK/deploy.log)"
popd >/dev/null
grep -o "Deployment '[^']*' successfully created[^.]*" "$WORK/deploy.log" | sed 's/^/    /' || true
check deployments
step_ok

step "start worker on pool '$POOL'" "$WORKER_LOG"
# started outside the checkout: the deployment's pull step, not the worker's cwd, finds the code
pushd "$WORK" >/dev/null
start_bg prefect-worker "$WORKER_LOG" "$PYTHON" -m prefect worker start \
    --pool "$POOL" --type process --limit 2
popd >/dev/null
step_ok

step "wait for MLflow health ($MLFLOW_TRACKING_URI/health)" "$MLFLOW_LOG"
wait_healthy "MLflow server" "$MLFLOW_TRACKING_URI/health" "$MLFLOW_PID" 150
step_ok

step "run deployment fairness-audit/on-demand (--watch) while the worker executes it" \
    "$WORK/run-audit.log $WORKER_LOG $MLFLOW_LOG"
run_deployment "fairness-audit/on-demand" audit "$WORK/run-audit.log"
AUDIT_RUN=$FLOW_RUN_ID
grep -q "Verdict: " "$WORK/run-audit.log" || fail "--watch did not show the flow run's verdict line"
step_ok

step "check the audit run through MlflowClient" "$WORKER_LOG $MLFLOW_LOG"
check audit "$AUDIT_RUN"
step_ok

step "run deployment fairness-retrain/scheduled (lenient gates: becomes champion)" \
    "$WORK/run-retrain-1.log $WORKER_LOG $MLFLOW_LOG"
run_deployment "fairness-retrain/scheduled" retrain-promote "$WORK/run-retrain-1.log"
check retrain-promote "$FLOW_RUN_ID"
step_ok

step "run deployment fairness-retrain/scheduled (no eligible challenger: champion stays)" \
    "$WORK/run-retrain-2.log $WORKER_LOG $MLFLOW_LOG"
run_deployment "fairness-retrain/scheduled" retrain-keep "$WORK/run-retrain-2.log"
check retrain-keep "$FLOW_RUN_ID"
step_ok

step "run deployment fairness-retrain/scheduled (champion fails the gate: needs-review)" \
    "$WORK/run-retrain-3.log $WORKER_LOG $MLFLOW_LOG"
run_deployment "fairness-retrain/scheduled" retrain-demote "$WORK/run-retrain-3.log"
check retrain-demote "$FLOW_RUN_ID"
step_ok

step "relog --force --promote of the demoted champion's folder: the demotion holds" \
    "$MLFLOW_LOG"
check relog-demoted
step_ok

step "MLflow evaluator 'fairness': mlflow.models.evaluate and a MetricThreshold gate" "$MLFLOW_LOG"
check plugin
step_ok

step "bad deployment parameters fail at validation, before any work" "$WORKER_LOG $PREFECT_LOG"
check bad-params
step_ok

step "fairness gate on the model registry (its own servers: tests/e2e/gate_e2e.py)"
# MLflow webhooks -> signed receiver -> fairness-gate/on-registration on a worker; refusals
# (forged, stale, replayed, 300 MB), champion undone, a hand-set pass tag, an alias moved
# while the receiver was down, gate parameters pointing elsewhere, a Prefect outage, model
# files changed behind a valid attestation; prints the time from registration to the tag
run_fg "$PYTHON" "$REPO_DIR/tests/e2e/gate_e2e.py"
step_ok

echo
echo "E2E PASSED"
