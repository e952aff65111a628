#!/bin/bash
id -un > /srv/work/owner.txt
echo ready > /srv/work/state.txt
# the agent's log directory is writable by the agent's user
echo "solved as $(id -un)" > /logs/agent/solve.log
