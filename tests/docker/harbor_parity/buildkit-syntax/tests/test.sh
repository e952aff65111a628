#!/bin/bash
# The image was built as BuildKit builds it: every heredoc ran, the cache mount left nothing behind.
ok=1
[ "$(cat /app/tool-name)" = tally ] || ok=0
grep -qx 'input = /app/data/numbers.txt' /app/config.ini || ok=0
[ -x /usr/local/bin/tally ] || ok=0
[ ! -e /var/cache/acx-parity/probe ] || ok=0
[ -f /app/sum.txt ] && [ "$(cat /app/sum.txt)" = "$(cat /app/data/expected.txt)" ] || ok=0
echo $ok > /logs/verifier/reward.txt
