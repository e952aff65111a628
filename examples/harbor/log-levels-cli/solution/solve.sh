#!/bin/bash
set -eu
mkdir -p /app/bin
cat > /app/bin/loglevels <<'SH'
#!/bin/sh
# Count the second field; most frequent first, ties by name.
awk '{print $2}' "$1" | sort | uniq -c | sort -k1,1nr -k2,2 | awk '{print $2, $1}'
SH
chmod +x /app/bin/loglevels
/app/bin/loglevels /app/sample.log
