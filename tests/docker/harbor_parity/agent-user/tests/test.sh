#!/bin/bash
# 1 only when the agent ran as `builder` (not root) and its files are its own
if [ "$(cat /srv/work/owner.txt 2>/dev/null)" = builder ] && grep -qx ready /srv/work/state.txt 2>/dev/null \
   && [ "$(stat -c %U /srv/work/state.txt)" = builder ] && [ -s /logs/agent/solve.log ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
