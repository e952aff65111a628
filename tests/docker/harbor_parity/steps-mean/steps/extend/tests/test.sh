#!/bin/bash
# the step's own test over the shared tests/: both were uploaded (lib.sh is the task's)
. /tests/lib.sh
echo marker > /tests/step-extend.txt  # the next step's agent and verifier must not see it
if notes_are alpha beta && [ "$(cat /app/seen.txt 2>/dev/null)" = staged ] && [ ! -e /app/leak.txt ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
