#!/bin/bash
# the previous step's grading harness is gone before this agent runs
[ -e /tests/test.sh ] && echo leaked > /app/leak.txt
echo beta >> /app/notes.txt
cp /app/staged.txt /app/seen.txt
