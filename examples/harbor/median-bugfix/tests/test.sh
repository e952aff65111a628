#!/bin/bash
# Partial credit: the share of even-length cases answered right (the bug fails every one of
# them); 0 when the fix broke what worked (mean, odd lengths) or the module no longer imports.
mkdir -p /logs/verifier
python3 - <<'PY'
import json, statistics, sys

sys.path.insert(0, "/app")
even = [[5, 1], [1, 2, 3, 4], [10, -3, 7, 0, 2, 8], [0.5, 2.5, 9.0, 4.0]]
kept = [[3], [1, 2, 3], [9, 1, 5, 7, 3], [2.0, 4.0, 8.0, 16.0]]
try:
    import stats

    guard = all(stats.median(xs) == statistics.median(xs) for xs in kept if len(xs) % 2) and all(
        abs(stats.mean(xs) - statistics.mean(xs)) < 1e-9 for xs in kept
    )
except Exception as exc:  # a module that no longer imports
    print(f"stats.py: {exc!r}", file=sys.stderr)
    guard = False
passed = 0
for xs in even:
    try:
        passed += guard and stats.median(xs) == statistics.median(xs)
    except Exception as exc:
        print(f"median({xs}): {exc!r}", file=sys.stderr)
reward = {"reward": passed / len(even), "even_cases_passed": passed, "regressions": int(not guard)}
json.dump(reward, open("/logs/verifier/reward.json", "w"))
PY
