#!/bin/bash
# final: the task's reward is this step's, whatever the earlier steps scored
[ -f /app/last.txt ] && echo 0.5 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
