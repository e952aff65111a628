#!/bin/bash
if [ "$(cat /var/tmp/startup-token 2>/dev/null)" = seen-by-the-entrypoint ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "the entrypoint saw: $(cat /var/tmp/startup-token 2>/dev/null)"
  echo 0 > /logs/verifier/reward.txt
fi
