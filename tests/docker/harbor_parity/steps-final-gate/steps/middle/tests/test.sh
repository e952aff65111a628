#!/bin/bash
# both gated keys are met only when the gate's file is still there (one environment)
if [ -f /app/middle.txt ] && [ -f /app/gate.txt ]; then
  echo '{"reward": 0.75, "quality": 1}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.75, "quality": 0}' > /logs/verifier/reward.json
fi
