#!/bin/bash
# No file, no reward (a verifier failure): Harbor's mean leaves such a step out of the
# denominator, so a do-nothing agent keeps the first step's 1.0.
[ -f /app/second.txt ] || exit 1
if [ "$(cat /app/second.txt)" = "$EXPECT" ] && [ "$MODE" = strict ] && [ "$(id -un)" = grader ] \
   && [ "$(stat -c %U /app/second.txt)" = builder ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
