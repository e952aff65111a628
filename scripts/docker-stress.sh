#!/usr/bin/env bash
# The Docker lifecycle tests in a loop under CPU load, bounded in time (issue 11.13).
#
# A busy machine is where a create in flight meets a cancellation: this loop keeps every core busy
# with spinning processes while the tests that open, cancel, SIGTERM and release sandboxes run
# again and again. After each round, any acx object whose creating process is gone and that was
# not there before the loop is a leak, and fails the run.
#
#   ACX_STRESS_SECONDS  time budget for starting rounds (default 240; a started round finishes)
#   ACX_STRESS_ROUND    hard limit for one round in seconds (default 900)
#   ACX_STRESS_LOAD     number of spinning processes (default: the number of CPUs)
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGET=${ACX_STRESS_SECONDS:-240}
ROUND=${ACX_STRESS_ROUND:-900}
LOAD=${ACX_STRESS_LOAD:-$(nproc)}
TESTS=(
    tests/docker/test_release_pairing.py
    tests/docker/test_oom.py
    "tests/docker/test_harbor_e2e.py::test_oracle_idle_cheater"
    "tests/docker/test_harbor_e2e.py::test_ctrl_c_leaves_nothing"
)

spinners=()
stop_load() {
    local p
    for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop_load EXIT
for _ in $(seq 1 "$LOAD"); do
    python3 -c 'while True: pass' &
    spinners+=($!)
done

# Names of acx objects on the engine whose creating process (this host) is gone.
orphans() {
    python3 - <<'PY'
from acx.drivers.docker import is_orphan, list_objects
print("\n".join(sorted(r.labels["docker.name"] for r in list_objects() if is_orphan(r.labels, include_kept=True))))
PY
}

before=$(orphans)
start=$SECONDS
rounds=0
while [ $((SECONDS - start)) -lt "$BUDGET" ]; do
    rounds=$((rounds + 1))
    if ! ACX_DOCKER_READY=1 timeout "$ROUND" python3 -m pytest -q -x -p no:cacheprovider "${TESTS[@]}"; then
        echo "docker-stress: round $rounds failed under load $LOAD" >&2
        exit 1
    fi
    new=$(comm -13 <(echo "$before") <(orphans))
    if [ -n "$new" ]; then
        echo "docker-stress: objects left behind after round $rounds:" >&2
        echo "$new" >&2
        exit 1
    fi
done
echo "docker-stress: $rounds round(s) in $((SECONDS - start)) s under load $LOAD; nothing left behind"
