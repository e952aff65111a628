#!/usr/bin/env bash
# Make a Docker engine and the acx test images available (idempotent).
#
#   1. install docker.io, busybox-static and debootstrap with apt when they are missing;
#   2. start dockerd in the background when no engine answers (log: $ACX_DOCKERD_LOG);
#   3. install the host firewall rules that keep allowlist/denylist sandboxes off the host
#      (interfaces acxi+; see docs/docker.md "Network policies" and acx/drivers/docker/_firewall.py);
#   4. build the local test images when absent (no registry is reachable, so we never pull):
#        acx-test/busybox:latest   FROM scratch + Debian's busybox-static and its applet links
#        acx-test/bookworm:latest  debootstrap --variant=minbase --include=python3 bookworm,
#                                  piped into `docker import` (the rootfs is cached for reuse)
#
# Exit 0 only when `docker info` works and both images exist.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then LOG=${ACX_DOCKERD_LOG:-/var/log/acx-dockerd.log}; else
    LOG=${ACX_DOCKERD_LOG:-${TMPDIR:-/tmp}/acx-dockerd.log}; fi
CACHE=${ACX_IMAGE_CACHE:-/var/cache/acx}
MIRROR=${ACX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUSYBOX_IMAGE=acx-test/busybox:latest
BOOKWORM_IMAGE=acx-test/bookworm:latest

say() { echo "setup-docker: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
        say "need root for: $*"; return 1; fi
}

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || missing+=(iptables)
    [ -x /bin/busybox ] && file_is_static /bin/busybox || missing+=(busybox-static)
    command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    fi
}

# busybox (dynamic) and busybox-static ship the same path; only the static one runs FROM scratch.
file_is_static() {
    ! ldd "$1" >/dev/null 2>&1
}

engine_up() { docker info >/dev/null 2>&1; }

start_engine() {
    engine_up && return 0
    say "starting dockerd (log: $LOG)"
    mkdir -p "$(dirname "$LOG")"
    # iptables works in this kind of VM; overlay2 is picked automatically on ext4.
    as_root nohup dockerd >>"$LOG" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        engine_up && return 0
        sleep 0.5
    done
    say "dockerd did not answer within 30 s; last log lines:"
    tail -n 20 "$LOG" >&2 || true
    return 1
}

# The same rules as acx.drivers.docker._firewall.RULES, for IPv4 and IPv6 (acx adds any that are
# missing itself when it runs as root; a non-root acx relies on these, and checks them on every
# internal network it creates).
install_firewall() {
    local tool
    for tool in iptables ip6tables; do
        [ "$tool" = ip6tables ] && [ ! -e /proc/net/if_inet6 ] && continue
        as_root "$tool" -w -C FORWARD '!' -i acxi+ -o acxi+ -j DROP 2>/dev/null ||
            as_root "$tool" -w -I FORWARD 1 '!' -i acxi+ -o acxi+ -j DROP
        as_root "$tool" -w -C FORWARD -i acxi+ '!' -o acxi+ -j DROP 2>/dev/null ||
            as_root "$tool" -w -I FORWARD 1 -i acxi+ '!' -o acxi+ -j DROP
        as_root "$tool" -w -C INPUT -i acxi+ -j DROP 2>/dev/null ||
            as_root "$tool" -w -I INPUT 1 -i acxi+ -j DROP
    done
}

image_present() { docker image inspect "$1" >/dev/null 2>&1; }

build_busybox() {
    image_present "$BUSYBOX_IMAGE" && return 0
    say "building $BUSYBOX_IMAGE"
    local ctx
    ctx=$(mktemp -d)
    mkdir -p "$ctx/rootfs/bin" "$ctx/rootfs/tmp" "$ctx/rootfs/etc" "$ctx/rootfs/root"
    chmod 1777 "$ctx/rootfs/tmp"
    cp /bin/busybox "$ctx/rootfs/bin/busybox"
    local applet
    for applet in $("$ctx/rootfs/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$ctx/rootfs/bin/$applet"
    done
    # Debian's busybox-static has no printenv applet; a POSIX sh stand-in keeps scripts portable.
    cat >"$ctx/rootfs/bin/printenv" <<'SH'
#!/bin/sh
[ $# -eq 0 ] && exec env
rc=0
for v in "$@"; do
    eval "isset=\${$v+x}"
    if [ -n "$isset" ]; then eval "printf '%s\n' \"\$$v\""; else rc=1; fi
done
exit $rc
SH
    chmod 755 "$ctx/rootfs/bin/printenv"
    ln -s bin "$ctx/rootfs/sbin"
    mkdir -p "$ctx/rootfs/usr"
    ln -s ../bin "$ctx/rootfs/usr/bin"
    echo 'root:x:0:0:root:/root:/bin/sh' >"$ctx/rootfs/etc/passwd"
    echo 'root:x:0:' >"$ctx/rootfs/etc/group"
    cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
ENV PATH=/bin:/usr/bin:/sbin
CMD ["/bin/sh"]
EOF
    # The legacy builder needs no buildx plugin; its deprecation notice is noise unless it fails.
    if ! DOCKER_BUILDKIT=0 docker build -q -t "$BUSYBOX_IMAGE" "$ctx" >"$ctx/build.log" 2>&1; then
        cat "$ctx/build.log" >&2
        rm -rf "$ctx"
        return 1
    fi
    rm -rf "$ctx"
}

build_bookworm() {
    image_present "$BOOKWORM_IMAGE" && return 0
    local rootfs="$CACHE/bookworm-rootfs"
    if [ ! -x "$rootfs/usr/bin/python3" ]; then
        say "debootstrap bookworm into $rootfs (about a minute)"
        as_root rm -rf "$rootfs"
        as_root mkdir -p "$CACHE"
        as_root debootstrap --variant=minbase --include=python3 bookworm "$rootfs" "$MIRROR" \
            >"$CACHE/debootstrap.log" 2>&1 || {
            say "debootstrap failed; see $CACHE/debootstrap.log"
            tail -n 20 "$CACHE/debootstrap.log" >&2
            return 1
        }
    fi
    say "importing $BOOKWORM_IMAGE"
    as_root tar -C "$rootfs" -c . | docker import \
        -c 'CMD ["/bin/bash"]' \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$BOOKWORM_IMAGE" >/dev/null
}

main() {
    install_packages
    start_engine
    install_firewall || say "WARNING: could not install the acxi+ firewall rules (need root); allowlist/denylist sandboxes will be refused"
    build_busybox
    build_bookworm
    image_present "$BUSYBOX_IMAGE" && image_present "$BOOKWORM_IMAGE"
    say "engine ready; images $BUSYBOX_IMAGE and $BOOKWORM_IMAGE present"
}

main "$@"
