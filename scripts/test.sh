#!/usr/bin/env bash
# The README's test command. Installs everything the tests need on a fresh machine
# (pip packages; docker.io, dockerd and the locally built test images), then runs
# lint, type checks and the test suite.
#
#   ACX_REQUIRE_DOCKER=1  a missing Docker engine fails the run instead of skipping
#                         the Docker tests (set by .ci/run).
#   ACX_REQUIRE_BROWSER=1 a missing headless Chromium (Debian's `chromium`, driven through the
#                         playwright package; no browser download) fails the run instead of
#                         skipping the browser tests (set by .ci/run).
#   ray (acx-eval[cluster]) is installed here; the cluster tests start their own local Ray clusters
#                         (scripts/ray-local-cluster.sh) and stop them.
#   ACX_REQUIRE_BWRAP=1   a missing or unusable bubblewrap fails the run instead of
#                         skipping the bwrap tests (set by .ci/run).
#   ACX_REQUIRE_CODEX=1   a failed install of the real Codex CLI (npm @openai/codex, pinned in
#                         tests/agents/test_codex_real.py, into .pytest_cache/acx-npm/) fails the run
#                         instead of skipping its end-to-end tests (set by .ci/run).
#   ACX_REQUIRE_OPENCODE=1  the same for the real OpenCode CLI (npm opencode-ai, pinned in
#                         tests/agents/test_opencode_real.py; set by .ci/run).
#   ACX_REQUIRE_AIDER=1   a failed install of the real aider (PyPI aider-chat, pinned in
#                         tests/agents/test_aider_real.py, which installs it) fails its tests
#                         instead of skipping them (set by .ci/run).
#   ACX_REQUIRE_AGENTS=1  a failed host-side fetch of the agent compatibility suite's packages (the
#                         pinned Claude Code, Codex and OpenCode npm packages, mini-swe-agent's,
#                         aider's, OpenHands' (built with python3.12) and pip's wheels; versions in
#                         tests/docker/test_agent_compat.py; into .pytest_cache/)
#                         fails the run instead of skipping tests/docker/test_agent_compat.py (set by .ci/run).
#   ACX_REQUIRE_EDITORS=1 a failed install of the VS Code extension's npm tooling (vscode-textmate,
#                         vscode-oniguruma, esbuild, @vscode/vsce, vscode-languageclient; pinned by
#                         editors/vscode/package-lock.json, `npm ci` into editors/vscode/node_modules)
#                         fails the run instead of skipping tests/editors (set by .ci/run).
#   ACX_REQUIRE_OPENHANDS=1  a failed install of the real OpenHands (PyPI openhands, pinned in
#                         tests/agents/test_openhands_real.py, into a venv of ACX_OPENHANDS_PYTHON, by
#                         default pyenv's 3.12.1) fails its tests instead of skipping them (set by .ci/run).
#   ACX_TEST_STRESS=1     run pytest while one CPU burner per core keeps the machine busy (every
#                         bound in the tests must hold under load; not part of every CI run).
set -euo pipefail
# Each step says when it starts (seconds since this script began): CI's 90 minutes are read there.
step() { echo "==> $* [+${SECONDS}s]"; }
cd "$(dirname "$0")/.."

step "C compiler and Python headers (acx.drivers._cspawn: commands start straight into their cgroup)"
if ! command -v cc >/dev/null 2>&1 || ! python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    SUDO=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc python3-dev; } \
        >/tmp/acx-gcc-install.log 2>&1 || cat /tmp/acx-gcc-install.log >&2
fi

if command -v cc >/dev/null 2>&1; then
    export ACX_REQUIRE_CSPAWN=1  # tests fail, not skip, when the helper did not build
fi

step "tmux (the terminus harness's host tests type into the host's tmux; they skip without it)"
if ! command -v tmux >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq tmux; } \
        >/tmp/acx-tmux-install.log 2>&1 || cat /tmp/acx-tmux-install.log >&2
fi

step "installing acx-eval with test and cluster extras"
python3 -m pip install -q --disable-pip-version-check -e '.[test,cluster]'
export ACX_REQUIRE_RAY=1  # the cluster tests fail, not skip, without ray

# Harbor's own models validate `acx results export --format harbor|atif` (tests/interop); harbor
# needs Python >= 3.12, so it goes into python3.12 (pyenv 3.12.1 here) and runs in a subprocess.
if PYENV_VERSION=3.12.1 python3.12 -m pip install -q --disable-pip-version-check 'harbor>=0.26' 2>/dev/null; then
    export ACX_REQUIRE_PEERS=1  # the interop tests fail, not skip, without harbor
else
    echo "WARNING: harbor could not be installed under python3.12: its interop tests will skip" >&2
fi

# The real OpenHands (tests/agents/test_openhands_real.py, tests/docker/test_agent_compat.py) needs
# Python >= 3.12: pyenv's 3.12.1 here, named by its path so no pyenv shim has to pick it.
if [ -z "${ACX_OPENHANDS_PYTHON:-}" ]; then
    if py312="$(PYENV_VERSION=3.12.1 python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null)"; then
        export ACX_OPENHANDS_PYTHON="$py312"
    fi
fi

step "Docker engine and test images"
if bash scripts/setup-docker.sh; then
    export ACX_DOCKER_READY=1
else
    if [ "${ACX_REQUIRE_DOCKER:-0}" = "1" ]; then
        echo "ERROR: Docker engine set-up failed and ACX_REQUIRE_DOCKER=1" >&2
        exit 1
    fi
    echo "!!! WARNING: no Docker engine could be set up: Docker tests will be SKIPPED !!!" >&2
fi

step "headless Chromium (report and viewer tests)"
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } \
        >/tmp/acx-chromium-install.log 2>&1 || cat /tmp/acx-chromium-install.log >&2
fi
if command -v chromium >/dev/null 2>&1; then
    export ACX_CHROMIUM="$(command -v chromium)"
elif [ "${ACX_REQUIRE_BROWSER:-0}" = "1" ]; then
    echo "ERROR: Debian's chromium could not be installed and ACX_REQUIRE_BROWSER=1" >&2
    exit 1
else
    echo "!!! WARNING: no chromium: browser tests will be SKIPPED !!!" >&2
fi

step "the real Codex CLI (tests/agents/test_codex_real.py)"
CODEX_VERSION="$(sed -n 's/^CODEX_VERSION = "\(.*\)"$/\1/p' tests/agents/test_codex_real.py)"
CODEX_CACHE=".pytest_cache/acx-npm/codex-${CODEX_VERSION}"
if [ ! -x "$CODEX_CACHE/node_modules/.bin/codex" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        SUDO=""
        if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
        { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm; } \
            >/tmp/acx-npm-install.log 2>&1 || cat /tmp/acx-npm-install.log >&2
    fi
    mkdir -p "$CODEX_CACHE"
    timeout 600 npm install --prefix "$CODEX_CACHE" --no-audit --no-fund "@openai/codex@${CODEX_VERSION}" \
        >/tmp/acx-codex-install.log 2>&1 || cat /tmp/acx-codex-install.log >&2
fi
if ! "$CODEX_CACHE/node_modules/.bin/codex" --version >/dev/null 2>&1; then
    if [ "${ACX_REQUIRE_CODEX:-0}" = "1" ]; then
        echo "ERROR: the Codex CLI ${CODEX_VERSION} could not be installed and ACX_REQUIRE_CODEX=1" >&2
        exit 1
    fi
    echo "!!! WARNING: no Codex CLI: its end-to-end tests will be SKIPPED !!!" >&2
fi

step "the real OpenCode CLI (tests/agents/test_opencode_real.py)"
OPENCODE_VERSION="$(sed -n 's/^OPENCODE_VERSION = "\(.*\)"$/\1/p' tests/agents/test_opencode_real.py)"
OPENCODE_CACHE=".pytest_cache/acx-npm/opencode-${OPENCODE_VERSION}"
if [ ! -x "$OPENCODE_CACHE/node_modules/.bin/opencode" ] && command -v npm >/dev/null 2>&1; then
    mkdir -p "$OPENCODE_CACHE"
    timeout 600 npm install --prefix "$OPENCODE_CACHE" --no-audit --no-fund "opencode-ai@${OPENCODE_VERSION}" \
        >/tmp/acx-opencode-install.log 2>&1 || cat /tmp/acx-opencode-install.log >&2
fi
if ! "$OPENCODE_CACHE/node_modules/.bin/opencode" --version >/dev/null 2>&1; then
    if [ "${ACX_REQUIRE_OPENCODE:-0}" = "1" ]; then
        echo "ERROR: the OpenCode CLI ${OPENCODE_VERSION} could not be installed and ACX_REQUIRE_OPENCODE=1" >&2
        exit 1
    fi
    echo "!!! WARNING: no OpenCode CLI: its end-to-end tests will be SKIPPED !!!" >&2
fi

step "the VS Code extension's npm tooling (tests/editors)"
# Pinned by the lockfile; reinstalled only when it changed. No install scripts: esbuild and vsce
# find their platform binaries through their optional dependencies.
EDITOR_DIR="editors/vscode"
if ! cmp -s "$EDITOR_DIR/package-lock.json" "$EDITOR_DIR/node_modules/.acx-installed-lock" && command -v npm >/dev/null 2>&1; then
    if (cd "$EDITOR_DIR" && timeout 600 npm ci --ignore-scripts --no-audit --no-fund) >/tmp/acx-editors-npm.log 2>&1; then
        cp "$EDITOR_DIR/package-lock.json" "$EDITOR_DIR/node_modules/.acx-installed-lock"
    else
        cat /tmp/acx-editors-npm.log >&2
    fi
fi
if ! cmp -s "$EDITOR_DIR/package-lock.json" "$EDITOR_DIR/node_modules/.acx-installed-lock"; then
    if [ "${ACX_REQUIRE_EDITORS:-0}" = "1" ]; then
        echo "ERROR: the editor tooling could not be installed (npm ci in $EDITOR_DIR) and ACX_REQUIRE_EDITORS=1" >&2
        exit 1
    fi
    echo "!!! WARNING: no editor tooling: tests/editors will be SKIPPED !!!" >&2
fi

step "the agent compatibility suite's packages (tests/docker/test_agent_compat.py)"
# Fetched on the host: inside a docker build npm and PyPI are not reachable. The suite uploads them
# into the sandbox and installs them offline (once per image: the install cache).
compat_version() { sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" tests/docker/test_agent_compat.py; }
COMPAT_CODEX="$(compat_version CODEX_VERSION)"
COMPAT_CLAUDE="$(compat_version CLAUDE_VERSION)"
COMPAT_MINI="$(compat_version MINI_VERSION)"
COMPAT_OPENCODE="$(compat_version OPENCODE_VERSION)"
COMPAT_AIDER="$(compat_version AIDER_VERSION)"
COMPAT_OPENHANDS="$(compat_version OPENHANDS_VERSION)"
compat_ok=1
for spec in "codex-${COMPAT_CODEX}:@openai/codex@${COMPAT_CODEX}:codex" \
            "claude-code-${COMPAT_CLAUDE}:@anthropic-ai/claude-code@${COMPAT_CLAUDE}:claude" \
            "opencode-${COMPAT_OPENCODE}:opencode-ai@${COMPAT_OPENCODE}:opencode"; do
    dir=".pytest_cache/acx-npm/${spec%%:*}"; rest="${spec#*:}"; pkg="${rest%:*}"; bin="${rest##*:}"
    if [ ! -x "$dir/node_modules/.bin/$bin" ] && command -v npm >/dev/null 2>&1; then
        mkdir -p "$dir"
        timeout 600 npm install --prefix "$dir" --no-audit --no-fund "$pkg" >/tmp/acx-compat-npm.log 2>&1 \
            || cat /tmp/acx-compat-npm.log >&2
    fi
    "$dir/node_modules/.bin/$bin" --version >/dev/null 2>&1 || compat_ok=0
done
MINI_WHEELS=".pytest_cache/acx-pypi/mini-swe-agent-${COMPAT_MINI}"
if ! ls "$MINI_WHEELS"/mini_swe_agent-"${COMPAT_MINI}"-*.whl >/dev/null 2>&1; then
    mkdir -p "$MINI_WHEELS"
    timeout 600 python3 -m pip download -q --disable-pip-version-check -d "$MINI_WHEELS" \
        "mini-swe-agent==${COMPAT_MINI}" pip >/tmp/acx-compat-pip.log 2>&1 || cat /tmp/acx-compat-pip.log >&2
fi
ls "$MINI_WHEELS"/mini_swe_agent-"${COMPAT_MINI}"-*.whl "$MINI_WHEELS"/pip-*.whl >/dev/null 2>&1 || compat_ok=0
# aider has compiled dependencies (numpy, scipy, tree-sitter, ...): wheels for the image's Python
# (acx-test/bookworm: CPython 3.11, glibc 2.36, x86_64), whatever the host's Python is.
AIDER_WHEELS=".pytest_cache/acx-pypi/aider-chat-${COMPAT_AIDER}"
if ! ls "$AIDER_WHEELS"/aider_chat-"${COMPAT_AIDER}"-*.whl >/dev/null 2>&1; then
    mkdir -p "$AIDER_WHEELS"
    timeout 900 python3 -m pip download -q --disable-pip-version-check -d "$AIDER_WHEELS" --only-binary=:all: \
        --python-version 3.11 --implementation cp --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 --platform any \
        "aider-chat==${COMPAT_AIDER}" pip >/tmp/acx-compat-aider.log 2>&1 || cat /tmp/acx-compat-aider.log >&2
fi
ls "$AIDER_WHEELS"/aider_chat-"${COMPAT_AIDER}"-*.whl "$AIDER_WHEELS"/pip-*.whl >/dev/null 2>&1 || compat_ok=0
# OpenHands needs Python >= 3.12 and has sdist-only dependencies: `pip wheel` with the host's
# CPython 3.12 (pyenv's 3.12.1, as for harbor above; the suite copies that runtime into its image).
OPENHANDS_WHEELS=".pytest_cache/acx-pypi/openhands-${COMPAT_OPENHANDS}"
if ! ls "$OPENHANDS_WHEELS"/openhands-"${COMPAT_OPENHANDS}"-*.whl >/dev/null 2>&1; then
    mkdir -p "$OPENHANDS_WHEELS"
    PYENV_VERSION=3.12.1 timeout 1200 python3.12 -m pip wheel -q --disable-pip-version-check -w "$OPENHANDS_WHEELS" \
        "openhands==${COMPAT_OPENHANDS}" >/tmp/acx-compat-openhands.log 2>&1 || cat /tmp/acx-compat-openhands.log >&2
fi
ls "$OPENHANDS_WHEELS"/openhands-"${COMPAT_OPENHANDS}"-*.whl >/dev/null 2>&1 || compat_ok=0
# The host-side real-agent tests (tests/agents/test_{real_agents,aider_real,openhands_real}.py) run
# the same pinned versions from venvs in .pytest_cache/acx-pip/: made here, once, from the wheels
# just fetched (offline, under a minute each), so no test installs from PyPI (minutes cold) while
# the suite's clock runs, and no two pytest workers build the same venv at once.
host_venv() {  # name version binary python wheels package
    local venv=".pytest_cache/acx-pip/$1-$2"
    [ -x "$venv/bin/$3" ] && return 0
    rm -rf "$venv"
    if ! { "$4" -m venv "$venv" && timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check \
            --no-index --find-links "$5" "$6==$2"; } >/tmp/acx-host-venv.log 2>&1; then
        cat /tmp/acx-host-venv.log >&2
        rm -rf "$venv"
    fi
}
mkdir -p .pytest_cache/acx-pip
host_venv mini-swe-agent "$COMPAT_MINI" mini python3 "$MINI_WHEELS" mini-swe-agent
host_venv aider "$COMPAT_AIDER" aider python3 "$AIDER_WHEELS" aider-chat
if [ -n "${ACX_OPENHANDS_PYTHON:-}" ]; then
    host_venv openhands "$COMPAT_OPENHANDS" openhands "$ACX_OPENHANDS_PYTHON" "$OPENHANDS_WHEELS" openhands
fi
if [ "$compat_ok" != "1" ]; then
    if [ "${ACX_REQUIRE_AGENTS:-0}" = "1" ]; then
        echo "ERROR: the agent compatibility suite's packages could not be fetched and ACX_REQUIRE_AGENTS=1" >&2
        exit 1
    fi
    echo "!!! WARNING: agent packages missing: the agent compatibility suite will be SKIPPED !!!" >&2
fi

step "bubblewrap"
if ! bash scripts/setup-bwrap.sh; then
    if [ "${ACX_REQUIRE_BWRAP:-0}" = "1" ]; then
        echo "ERROR: bubblewrap set-up failed and ACX_REQUIRE_BWRAP=1" >&2
        exit 1
    fi
    echo "!!! WARNING: bubblewrap is not usable: bwrap tests will be SKIPPED !!!" >&2
fi

step "ruff"
python3 -m ruff check src tests bench
python3 -m ruff format --check src tests bench
step "mypy"
python3 -m mypy
step "pytest"
if [ "${ACX_TEST_STRESS:-0}" = "1" ]; then
    # The suite under load (issue 24): one busy-loop per core for as long as pytest runs, so
    # every bound in the tests must hold on a machine that is fully busy. Not in every CI run.
    burners=()
    for _ in $(seq 1 "$(nproc)"); do
        python3 -c 'while True: pass' &
        burners+=("$!")
    done
    trap 'kill "${burners[@]}" 2>/dev/null || true' EXIT
    echo "    ACX_TEST_STRESS=1: ${#burners[@]} CPU burner(s) running (pids ${burners[*]})"
fi
# --durations: the slowest tests are named in every CI log (the 90-minute budget is watched there).
python3 -m pytest -n "${ACX_TEST_WORKERS:-auto}" --durations=40 "$@"
