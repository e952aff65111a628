#!/bin/bash
# the gated step's test: it rewards any agent that got past the step's healthcheck
echo 1 > /logs/verifier/reward.txt
