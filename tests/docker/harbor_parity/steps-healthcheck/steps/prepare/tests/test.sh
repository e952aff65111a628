#!/bin/bash
[ -f /app/go ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
