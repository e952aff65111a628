#!/bin/bash
# final: the task's reward is this step's, whatever the earlier steps scored; the step's collect
# command ran before this verifier
[ -f /app/last.txt ] && [ -f /app/last.collected ] && echo 0.5 > /logs/verifier/reward.txt \
  || echo 0 > /logs/verifier/reward.txt
