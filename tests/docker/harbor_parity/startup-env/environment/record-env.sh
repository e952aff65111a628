#!/bin/sh
# The image's entrypoint: record what it received, then run the command it was given.
printf '%s' "${PARITY_STARTUP_TOKEN-missing}" > /var/tmp/startup-token
exec "$@"
