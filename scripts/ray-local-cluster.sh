#!/usr/bin/env bash
# A Ray cluster on this machine, for trying `acx run --cluster` and for the tests.
#
#   scripts/ray-local-cluster.sh start [DIR] [--workers N] [--slots S] [--head-slots H]
#                                      [--drivers wI=ID[,ID…]]… [--engine auto|own|shared] [--images "IMAGE …"]
#       A head and N worker nodes (N = 2 by default), each worker advertising S acx_slots (default 8)
#       and its own label resource acx_node_w<i>. The head holds H slots (label acx_node_head):
#       by default none when N > 0, S when N = 0 (then the head is the one node).
#       --drivers w1=docker,host_process: worker w1 declares it serves only those providers
#       (resources acx_driver_<id>; a node that declares none serves any). Repeatable.
#       Prints the address to pass as `--cluster ray://ADDRESS` (also written to DIR/address).
#       --engine own: every node with slots gets its own Docker engine: a dockerd with its own data
#         root, exec root, socket and pid file under DIR/e<i> (e0: the head), started by this script,
#         and the node is started with DOCKER_HOST pointing at it, so its acx worker (and everything
#         the worker runs: docker sandboxes, bwrap's image exports) uses that engine, never the
#         default one. The images named by --images (default acx-test/busybox:latest) are copied
#         into it from the default engine (docker save | docker load). Needs dockerd and root (or
#         passwordless sudo). --engine shared: the nodes use the engine of the calling environment
#         (DOCKER_HOST or the default socket). --engine auto (default): own when dockerd and root
#         are available, else shared (said on stderr). DIR/engines lists "NAME DOCKER_HOST" for
#         every node with its own engine.
#   scripts/ray-local-cluster.sh stop [DIR]
#       stops exactly this cluster's processes (found by DIR in their command line), never others,
#       then its node engines (their containers and networks removed first), unmounts what they
#       left under DIR and removes DIR.
#   scripts/ray-local-cluster.sh kill-node DIR NAME    SIGKILL one worker node (w1, w2, …): tests.
#       Its raylet, workers and agents die; its Docker engine keeps running with whatever sandboxes
#       the node had open (a node whose Ray processes crashed: what `acx gc --cluster` reclaims
#       once the node is back).
#   scripts/ray-local-cluster.sh start-node DIR NAME   start a killed worker node again (same name,
#       slots and engine; a new Ray node id).
#
# Node engines run with --iptables=false (a second dockerd managing iptables would rewrite the
# default engine's chains and the acxi+ rules' neighbours), a default bridge of their own
# (acxe<hash><i>, created here: --bridge=none would make dockerd DELETE the machine's docker0 at start,
# breaking the default engine's containers) and an address pool of their own (a /16 of 10.128.0.0/9), so they never touch the default engine's
# networks or firewall rules. Without Docker's forwarding rules their sandboxes reach this machine
# but nothing beyond it (public, allowlist and denylist network modes are not for node engines).
#
# DIR defaults to /tmp/acxr-$USER (keep it short: Ray puts Unix sockets under it). Kept small for a
# shared 2-core machine: 1 CPU per node, 80 MB object store, no dashboard, no usage stats.
# Use the `ray` of the environment acx is installed in (pip install 'acx-eval[cluster]'): the
# workers import acx.
set -euo pipefail

cmd="${1:-}"; shift || true
DIR="/tmp/acxr-${USER:-$(id -u)}"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then DIR="$1"; shift; fi
WORKERS=2
SLOTS=8
HEAD_SLOTS=""
DRIVERS=" "
ENGINE=auto
IMAGES="acx-test/busybox:latest"
while [ $# -gt 0 ]; do
    case "$1" in
        --workers) WORKERS="$2"; shift 2 ;;
        --slots) SLOTS="$2"; shift 2 ;;
        --head-slots) HEAD_SLOTS="$2"; shift 2 ;;
        --drivers) DRIVERS="$DRIVERS$2 "; shift 2 ;;
        --engine) ENGINE="$2"; shift 2 ;;
        --images) IMAGES="$2"; shift 2 ;;
        *) case "$cmd" in kill-node | start-node) NODE="$1"; shift; continue ;; esac
           echo "ray-local-cluster: unknown argument $1" >&2; exit 2 ;;
    esac
done
export RAY_USAGE_STATS_ENABLED=0
RAY="${RAY:-$(command -v ray || true)}"
PY="$(dirname "$RAY")/python"
[ -x "$PY" ] || PY=python3

ours() {  # PIDs of processes whose command line names the pattern (this cluster's, and only them)
    local pid
    for pid in $(grep -laF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
        # not this script, nor the grep that found the pattern in its own command line
        [ "$pid" != "$$" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != grep ] && echo "$pid"
    done
    return 0
}

driver_resources() {  # ', "acx_driver_a": 1, …' for worker $1 from --drivers $1=a,b
    local spec out="" d
    spec="$(echo "$DRIVERS" | tr ' ' '\n' | sed -n "s/^$1=//p" | tail -1)"
    for d in $(echo "$spec" | tr ',' ' '); do out="$out, \"acx_driver_$d\": 1"; done
    echo "$out"
}

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

node_ports() {
    # All six held open together while they are picked: ports picked one at a time (each socket
    # closed before the next bind) can repeat, and Ray refuses a port given to two components.
    "$PY" -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
names = ["node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent", "metrics-export"]
print(" ".join(f"--{n}-port={s.getsockname()[1]}" for n, s in zip(names, socks)))
'
}

# Ray starts its worker processes at niceness 15 by default: the acx worker (and every sandbox
# process it starts) would then get a sliver of a busy machine's CPU. acx workers are the node's
# sandbox service, not background compute: nice 0 like the driver.
export RAY_worker_niceness=0
# Ray waits 30 s for the GCS to bind its port: a loaded machine (load ~30) can take longer.
export RAY_gcs_server_port_wait_time_s="${RAY_gcs_server_port_wait_time_s:-120}"
COMMON="--node-ip-address=127.0.0.1 --num-cpus=1 --object-store-memory=80000000 --disable-usage-stats"

say() { echo "ray-local-cluster: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"; else
        say "need root for: $*"; return 1; fi
}

can_own_engine() {  # why a node cannot have its own engine (empty: it can)
    command -v dockerd >/dev/null || { echo "dockerd is not installed (bash scripts/setup-docker.sh)"; return; }
    command -v docker >/dev/null || { echo "the docker CLI is not installed"; return; }
    [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null; } \
        || { echo "starting a dockerd needs root or passwordless sudo"; return; }
    docker info >/dev/null 2>&1 || echo "the default Docker engine does not answer (its images are copied to the nodes)"
}

# ---- per-node Docker engines ---------------------------------------------------------------------
# Node i's engine lives in DIR/e<i>: data root d/, exec root x/ (containerd's state and sockets,
# network namespaces), socket docker.sock, pid file docker.pid, log dockerd.log.

engine_host() { echo "unix://$DIR/e$1/docker.sock"; }

# Node i's default bridge: a name of at most 15 characters, unique per DIR and node, never docker0.
# dockerd started with --bridge=none removes an existing docker0 (the default engine's bridge) on
# start, so each node engine gets a bridge of its own, created before the engine starts.
engine_bridge() {
    local h
    h="$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)"
    printf 'acxe%06x%d' "$((h % 16777216))" "$1"
}

# Node i's address pool: a /16 of 10.128.0.0/9 picked from DIR and i, so the engines of clusters
# started side by side (tests in parallel) rarely share one; the default engine's pools (172.17+,
# 192.168) are never used.
engine_pool() {
    local h
    h="$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)"
    echo "10.$((128 + (h + $1) % 128)).0.0/16"
}

start_engine() {  # engine i for node NAME
    local i="$1" name="$2" e="$DIR/e$1" host
    host="$(engine_host "$i")"
    mkdir -p "$e/d" "$e/x"
    echo '{}' >"$e/daemon.json"  # never the machine's /etc/docker/daemon.json (its hosts, its pools)
    # the bridge gets the last /24 of the node's pool: the engine allocates its networks from the
    # pool's start, so they never overlap it
    local br pool
    br="$(engine_bridge "$i")"
    pool="$(engine_pool "$i")"
    as_root ip link del "$br" 2>/dev/null || true
    as_root ip link add "$br" type bridge \
        && as_root ip addr add "${pool%.0.0/16}.255.1/24" dev "$br" \
        && as_root ip link set "$br" up \
        || { say "could not create bridge $br for node $name's engine (needs root and iproute2)"; return 1; }
    echo "$br" >"$e/bridge"
    local group=()
    [ "$(id -u)" = 0 ] || group=(--group "$(id -gn)")
    # shellcheck disable=SC2024  # the log is ours, written by this shell
    as_root nohup dockerd --config-file "$e/daemon.json" --data-root "$e/d" --exec-root "$e/x" \
        -H "$host" --pidfile "$e/docker.pid" --iptables=false --ip6tables=false --ip-masq=false \
        --bridge="$br" --default-address-pool "base=$pool,size=24" "${group[@]}" \
        >"$e/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 1 120); do
        DOCKER_HOST="$host" docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    DOCKER_HOST="$host" docker info >/dev/null 2>&1 || {
        say "the engine of node $name did not answer within 60 s; its log:"; tail -n 20 "$e/dockerd.log" >&2; return 1; }
    local image
    for image in $IMAGES; do
        if ! docker image inspect "$image" >/dev/null 2>&1; then
            say "WARNING: $image is not in the default engine; node $name's engine does not get it"
            continue
        fi
        docker save "$image" | DOCKER_HOST="$host" docker load -q >/dev/null \
            || { say "could not load $image into node $name's engine"; return 1; }
    done
    echo "$name $host" >>"$DIR/engines"
}

stop_engine() {  # containers first (their processes are not the engine's children), then the daemon
    local e="$1" host="unix://$1/docker.sock" pid=""
    if [ -S "$e/docker.sock" ] && DOCKER_HOST="$host" timeout 10 docker info >/dev/null 2>&1; then
        # shellcheck disable=SC2046
        DOCKER_HOST="$host" timeout 60 docker rm -f -v $(DOCKER_HOST="$host" docker ps -aq) >/dev/null 2>&1 || true
        DOCKER_HOST="$host" timeout 30 docker network prune -f >/dev/null 2>&1 || true
    fi
    [ -f "$e/docker.pid" ] && pid="$(cat "$e/docker.pid" 2>/dev/null || true)"
    if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
        as_root kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 60); do [ -d "/proc/$pid" ] || break; sleep 0.25; done
    fi
    # whatever is left of it (dockerd, its containerd and shims all name the engine's directory)
    local left
    left="$(ours "$e/" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    [ -z "$left" ] || as_root kill -KILL $left 2>/dev/null || true
    # mounts it left (overlays, network namespaces, shm): deepest first, lazily
    local m
    for m in $(awk -v p="$e/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
        as_root umount -l "$m" 2>/dev/null || true
    done
    # the engine's own default bridge (never docker0: engine_bridge names it acxe…)
    local br=""
    [ -f "$e/bridge" ] && br="$(cat "$e/bridge" 2>/dev/null || true)"
    case "$br" in acxe*) as_root ip link del "$br" 2>/dev/null || true ;; esac
}

start_node() {  # worker node NAME (w<i>) joins the cluster of DIR; with its engine when it has one
    local name="$1" node_env=()
    [ -f "$DIR/drivers" ] && DRIVERS="$(cat "$DIR/drivers")"
    if [ -S "$DIR/e${name#w}/docker.sock" ]; then node_env=(env "DOCKER_HOST=$(engine_host "${name#w}")"); fi
    # shellcheck disable=SC2046
    "${node_env[@]}" "$RAY" start --address="$(cat "$DIR/address")" $COMMON $(node_ports) \
        --resources="{\"acx_slots\": $(cat "$DIR/slots"), \"acx_node_$name\": 1$(driver_resources "$name")}" \
        >"$DIR/$name.log" 2>&1 \
        || { cat "$DIR/$name.log" >&2; exit 1; }
}

start_cluster() {  # one try; exit status 2: bad arguments, 1: a node did not start
    [ -n "$RAY" ] || { echo "ray-local-cluster: ray is not installed (pip install 'acx-eval[cluster]')" >&2; exit 2; }
    case "$ENGINE" in auto | own | shared) ;; *) say "--engine must be auto, own or shared, not $ENGINE"; exit 2 ;; esac
    if [ -z "$HEAD_SLOTS" ]; then if [ "$WORKERS" = 0 ]; then HEAD_SLOTS="$SLOTS"; else HEAD_SLOTS=0; fi; fi
    if [ "$ENGINE" != shared ]; then
        why="$(can_own_engine)"
        if [ -n "$why" ] && [ "$ENGINE" = own ]; then say "--engine own: $why"; exit 2; fi
        if [ -n "$why" ]; then say "the nodes share the default Docker engine: $why"; ENGINE=shared; else ENGINE=own; fi
    fi
    mkdir -p "$DIR"
    : >"$DIR/engines"
    echo "$SLOTS" >"$DIR/slots"
    echo "$DRIVERS" >"$DIR/drivers"  # start-node declares the same providers again
    PORT="$(free_port)"
    HEAD_PORTS="$(node_ports)"
    while [[ " $HEAD_PORTS " == *"=$PORT "* ]]; do HEAD_PORTS="$(node_ports)"; done
    head_env=()
    if [ "$HEAD_SLOTS" != 0 ]; then
        HEAD_RES="{\"acx_slots\": $HEAD_SLOTS, \"acx_node_head\": 1}"
        if [ "$ENGINE" = own ]; then
            start_engine 0 head || exit 1
            head_env=(env "DOCKER_HOST=$(engine_host 0)")
        fi
    else
        HEAD_RES='{}'
    fi
    # shellcheck disable=SC2046
    "${head_env[@]}" "$RAY" start --head --port="$PORT" --temp-dir="$DIR/t" --include-dashboard=false \
        $COMMON $HEAD_PORTS \
        --resources="$HEAD_RES" >"$DIR/head.log" 2>&1 || { cat "$DIR/head.log" >&2; exit 1; }
    echo "127.0.0.1:$PORT" > "$DIR/address"
    for i in $(seq 1 "$WORKERS"); do
        if [ "$ENGINE" = own ]; then start_engine "$i" "w$i" || exit 1; fi
        start_node "w$i"
    done
    echo "127.0.0.1:$PORT"
}

case "$cmd" in
    start)
        # A try that fails stops what it started (the head's gcs_server, monitor, log_monitor, the
        # nodes' raylets and engines: nothing is left running), then starts again: on a loaded
        # machine a raylet can miss Ray's fixed 30 s registration wait ("The current node timed
        # out during startup"). ACX_RAY_START_TRIES tries (default 3); bad arguments are not retried.
        tries="${ACX_RAY_START_TRIES:-3}"
        for try in $(seq 1 "$tries"); do
            # Not `( … ) || rc=$?`: errexit is off inside a command whose status is tested.
            set +e
            ( set -e; start_cluster )
            rc=$?
            set -e
            [ "$rc" = 0 ] && exit 0
            say "start failed (try $try of $tries): stopping what it started"
            bash "$0" stop "$DIR" >/dev/null 2>&1 || true
            [ "$rc" = 2 ] && exit 2
        done
        exit 1
        ;;
    start-node)
        [ -n "${NODE:-}" ] && [ -f "$DIR/address" ] || { echo "usage: $0 start-node DIR NAME (of a started cluster)" >&2; exit 2; }
        start_node "$NODE"
        ;;
    stop)
        # TERM, then KILL whatever is left; rescanned each round (Ray may start a process late).
        for round in 1 2 3; do
            pids="$(ours "$DIR/t" | tr '\n' ' ')"
            [ -z "$pids" ] && break
            if [ "$round" = 1 ]; then sig=TERM; else sig=KILL; fi
            # shellcheck disable=SC2086
            kill -$sig $pids 2>/dev/null || true
            for _ in $(seq 1 20); do
                left=""
                for p in $pids; do
                    if [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then left="$left $p"; fi
                done
                [ -z "$left" ] && break
                sleep 0.25
            done
        done
        for e in "$DIR"/e[0-9]*; do
            [ -d "$e" ] && stop_engine "$e"
        done
        # never follows a mount that survived the unmounts into another file system
        if [ -d "$DIR" ]; then as_root rm -rf --one-file-system "$DIR" 2>/dev/null || rm -rf --one-file-system "$DIR"; fi
        ;;
    kill-node)
        [ -n "${NODE:-}" ] || { echo "usage: $0 kill-node DIR NAME" >&2; exit 2; }
        # A worker node's processes: its raylet (whose command line names acx_node_NAME), every
        # process the raylet started (its workers, the acx worker actor among them) and the
        # node's agents (their command lines name its node id).
        # (this cluster's: its socket lives under DIR; every cluster has a w1, so the name alone
        # would pick another cluster's node; "acx_node_w1," never matches w10)
        raylet="$(for p in $(ours "acx_node_$NODE,"); do { tr '\0' ' ' < /proc/$p/cmdline; } 2>/dev/null \
            | grep -F -- "--raylet_socket_name=$DIR/t/" | grep -q raylet && echo $p; done | head -1 || true)"
        [ -n "$raylet" ] || { echo "no node $NODE" >&2; exit 1; }
        node_id="$({ tr '\0' '\n' < /proc/$raylet/cmdline; } 2>/dev/null | sed -n 's/^--node_id=//p' || true)"
        victims="$raylet $(ours "$node_id" | tr '\n' ' ')"
        table="$(ps -eo pid=,ppid=)"
        for _ in 1 2 3; do  # children of children (a worker's own subprocesses)
            for pid in $(echo "$table" | awk -v v=" $victims " 'index(v, " " $2 " ") { print $1 }'); do
                case " $victims " in *" $pid "*) ;; *) victims="$victims $pid" ;; esac
            done
        done
        # shellcheck disable=SC2086
        kill -KILL $victims 2>/dev/null || true
        ;;
    *)
        echo "usage: $0 start [DIR] [--workers N] [--slots S] [--engine auto|own|shared] [--images LIST] | stop [DIR] | kill-node DIR NAME | start-node DIR NAME" >&2
        exit 2
        ;;
esac
