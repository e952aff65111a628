#!/bin/bash
. /tests/lib.sh
if notes_are alpha; then
  echo '{"reward": 1.0, "style": 1.0}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.0, "style": 1.0}' > /logs/verifier/reward.json
fi
