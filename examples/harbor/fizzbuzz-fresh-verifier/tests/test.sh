#!/bin/bash
# Partial credit: the share of test inputs answered correctly, written as JSON.
mkdir -p /logs/verifier
python3 - <<'PY'
import json, subprocess

def expected(n):
    out = []
    for i in range(1, n + 1):
        out.append("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i))
    return "\n".join(out)

cases = [1, 3, 5, 15, 31]
passed = 0
for n in cases:
    try:
        run = subprocess.run(["python3", "/app/fizzbuzz.py"], input=f"{n}\n", capture_output=True,
                             text=True, timeout=10)
        passed += run.stdout.strip() == expected(n)
    except Exception:
        pass
reward = {"reward": passed / len(cases), "cases_passed": passed, "cases_total": len(cases)}
with open("/logs/verifier/reward.json", "w") as fh:
    json.dump(reward, fh)
PY
