#!/bin/bash
# Writes the reward itself; an agent-planted /logs/verifier/reward.* is wiped before this runs.
mkdir -p /logs/verifier
expected="${GREETING}, world!"
if [ -f /app/hello.txt ] && [ "$(cat /app/hello.txt)" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "expected '$expected' in /app/hello.txt" >&2
    echo 0 > /logs/verifier/reward.txt
fi
