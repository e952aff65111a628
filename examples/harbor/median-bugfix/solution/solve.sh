#!/bin/bash
set -eu
# A one-line edit of the existing file (the middle pair of an even-length list is mid-1, mid).
python3 - <<'PY'
path = "/app/stats.py"
text = open(path).read()
fixed = text.replace("(s[mid] + s[mid + 1]) / 2", "(s[mid - 1] + s[mid]) / 2")
assert fixed != text, "the buggy line was not found"
open(path, "w").write(fixed)
PY
python3 -c "import sys; sys.path.insert(0, '/app'); import stats; print(stats.median([1, 2, 3, 4]))"
