#!/bin/bash
# The verifier runs as `grader`; it can read the answer but not write outside /logs/verifier.
if [ "$(id -un)" != grader ]; then echo "verifier ran as $(id -un)"; echo 0 > /logs/verifier/reward.txt; exit 0; fi
if grep -qx graded /opt/box/answer.txt 2>/dev/null; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
