#!/usr/bin/env bash
# Make bubblewrap usable for the bwrap driver and its tests (idempotent).
#
#   1. install bubblewrap (and util-linux for nsenter/unshare) with apt when missing;
#   2. check that a sandbox with its own user, pid and network namespaces starts.
#
# The bookworm root filesystem the tests use comes from scripts/setup-docker.sh
# (/var/cache/acx/bookworm-rootfs). Exit 0 only when `bwrap --unshare-all` works.
set -euo pipefail

say() { echo "setup-bwrap: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
        say "need root for: $*"; return 1; fi
}

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v nsenter >/dev/null && command -v unshare >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

if ! out=$(bwrap --unshare-all --uid 0 --gid 0 --ro-bind / / true 2>&1); then
    say "bwrap cannot create namespaces here: $out"
    say "(unprivileged user namespaces may be disabled: sysctl kernel.unprivileged_userns_clone=1)"
    exit 1
fi
say "bwrap $(bwrap --version | awk '{print $2}') ready"
