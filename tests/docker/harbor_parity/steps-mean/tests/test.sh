#!/bin/bash
# The `check` step has no tests of its own: this shared test.sh grades it. `reward`: the step's
# set-up ran in the one environment and the previous verifier's files are gone; `notes`: the work.
. /tests/lib.sh
reward=0; notes=0
[ -f /app/from-setup.txt ] && [ ! -e /tests/step-extend.txt ] && reward=1
notes_are alpha beta gamma && notes=1
echo "{\"reward\": $reward, \"notes\": $notes}" > /logs/verifier/reward.json
