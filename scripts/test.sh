#!/usr/bin/env bash
# The README's test command. Installs everything the tests need on a fresh machine
# (pip packages; docker.io, dockerd and the locally built test images), then runs
# lint, type checks and the test suite.
#
#   ACX_REQUIRE_DOCKER=1  a missing Docker engine fails the run instead of skipping
#                         the Docker tests (set by .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> installing acx-eval with test extras"
python3 -m pip install -q --disable-pip-version-check -e '.[test]'

echo "==> Docker engine and test images"
if bash scripts/setup-docker.sh; then
    export ACX_DOCKER_READY=1
else
    if [ "${ACX_REQUIRE_DOCKER:-0}" = "1" ]; then
        echo "ERROR: Docker engine set-up failed and ACX_REQUIRE_DOCKER=1" >&2
        exit 1
    fi
    echo "!!! WARNING: no Docker engine could be set up: Docker tests will be SKIPPED !!!" >&2
fi

echo "==> ruff"
python3 -m ruff check src tests bench
python3 -m ruff format --check src tests bench
echo "==> mypy"
python3 -m mypy
echo "==> pytest"
python3 -m pytest -n "${ACX_TEST_WORKERS:-auto}" "$@"
