#!/bin/bash
echo "cannot stage the step" >&2
exit 3
