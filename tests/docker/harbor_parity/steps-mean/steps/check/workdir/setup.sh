#!/bin/bash
# runs in the working directory before the step's agent
touch /app/from-setup.txt
