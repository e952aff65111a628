#!/bin/bash
if grep -qx done /app/status.txt 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
