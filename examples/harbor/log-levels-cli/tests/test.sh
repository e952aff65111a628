#!/bin/bash
# Runs the agent's program on a log it has never seen and compares its output (reward 1 or 0).
mkdir -p /logs/verifier
log=$(mktemp)
python3 - "$log" <<'PY'
import random, sys
rng = random.Random(20240501)
levels = ["DEBUG"] * 7 + ["INFO"] * 5 + ["WARN"] * 5 + ["ERROR"] * 2 + ["FATAL"]
rng.shuffle(levels)
with open(sys.argv[1], "w") as fh:
    for i, level in enumerate(levels):
        fh.write(f"2024-05-02T09:{i:02d}:00 {level} event {rng.randrange(1000)}\n")
PY
expected=$(printf 'DEBUG 7\nINFO 5\nWARN 5\nERROR 2\nFATAL 1')
if [ -x /app/bin/loglevels ] && got=$(timeout 10 /app/bin/loglevels "$log") && [ "$got" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    printf 'expected:\n%s\ngot:\n%s\n' "$expected" "${got:-<no output>}" >&2
    echo 0 > /logs/verifier/reward.txt
fi
