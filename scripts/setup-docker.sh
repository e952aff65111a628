#!/usr/bin/env bash
# Make a Docker engine and the acx test images available (idempotent).
# Exit 0 when `docker info` works and the images exist; non-zero otherwise.
set -euo pipefail
docker info >/dev/null 2>&1
