#!/bin/bash
set -eu
mkdir -p /app/out
python3 - <<'PY'
import csv, collections
rows = list(csv.DictReader(open("/app/data/sales.csv")))
totals = collections.Counter()
for r in rows:
    totals[r["region"]] += int(r["amount"])
open("/app/out/total.txt", "w").write(f"{sum(totals.values())}\n")
open("/app/out/regions.txt", "w").write("\n".join(sorted(totals)) + "\n")
open("/app/out/max.txt", "w").write(totals.most_common(1)[0][0] + "\n")
PY
touch /app/out/scratch.tmp
