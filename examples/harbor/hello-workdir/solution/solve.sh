#!/bin/bash
set -eu
# Runs in the task workdir (/app); relative paths land there (H5).
printf '%s, world!\n' "$GREETING" > hello.txt
