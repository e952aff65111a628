#!/usr/bin/env bash
# The README's main job: install acx if needed, then run the bundled quickstart offline —
# an exact_match QA set answered by a tiny local agent, as host processes, in a few seconds.
#
#   bash scripts/quickstart.sh [extra `acx run` flags, e.g. --progress plain]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c "import acx" >/dev/null 2>&1; then
    echo "==> installing acx-eval"
    python3 -m pip install -q --disable-pip-version-check -e .
fi

echo "==> acx run examples/quickstart.acx"
python3 -m acx run examples/quickstart.acx --results-dir "${ACX_RESULTS_DIR:-results}" "$@"
