#!/usr/bin/env bash
# A Ray cluster on this machine, for trying `acx run --cluster` and for the tests.
#
#   scripts/ray-local-cluster.sh start [DIR] [--workers N] [--slots S] [--drivers wI=ID[,ID…]]…
#       N = 2 (default): a head (no acx slots) + N worker nodes, each advertising S acx_slots
#       (default 8) and its own label resource acx_node_w<i>; N = 0: one node (the head) with S slots.
#       --drivers w1=docker,host_process: worker w1 declares it serves only those providers
#       (resources acx_driver_<id>; a node that declares none serves any). Repeatable.
#       Prints the address to pass as `--cluster ray://ADDRESS` (also written to DIR/address).
#   scripts/ray-local-cluster.sh stop [DIR]
#       stops exactly this cluster's processes (found by DIR in their command line), never others.
#   scripts/ray-local-cluster.sh kill-node DIR NAME    SIGKILL one worker node (w1, w2, …): tests.
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
DRIVERS=" "
while [ $# -gt 0 ]; do
    case "$1" in
        --workers) WORKERS="$2"; shift 2 ;;
        --slots) SLOTS="$2"; shift 2 ;;
        --drivers) DRIVERS="$DRIVERS$2 "; shift 2 ;;
        *) [ "$cmd" = "kill-node" ] && { NODE="$1"; shift; continue; }
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
    echo "--node-manager-port=$(free_port) --object-manager-port=$(free_port) \
--dashboard-agent-listen-port=$(free_port) --dashboard-agent-grpc-port=$(free_port) \
--runtime-env-agent-port=$(free_port) --metrics-export-port=$(free_port)"
}

COMMON="--node-ip-address=127.0.0.1 --num-cpus=1 --object-store-memory=80000000 --disable-usage-stats"

case "$cmd" in
    start)
        [ -n "$RAY" ] || { echo "ray-local-cluster: ray is not installed (pip install 'acx-eval[cluster]')" >&2; exit 2; }
        mkdir -p "$DIR"
        PORT="$(free_port)"
        if [ "$WORKERS" = "0" ]; then HEAD_RES="{\"acx_slots\": $SLOTS, \"acx_node_head\": 1}"; else HEAD_RES='{}'; fi
        # shellcheck disable=SC2046
        "$RAY" start --head --port="$PORT" --temp-dir="$DIR/t" --include-dashboard=false \
            $COMMON $(node_ports) \
            --resources="$HEAD_RES" >"$DIR/head.log" 2>&1 || { cat "$DIR/head.log" >&2; exit 1; }
        for i in $(seq 1 "$WORKERS"); do
            # shellcheck disable=SC2046
            "$RAY" start --address="127.0.0.1:$PORT" $COMMON $(node_ports) \
                --resources="{\"acx_slots\": $SLOTS, \"acx_node_w$i\": 1$(driver_resources "w$i")}" >"$DIR/w$i.log" 2>&1 \
                || { cat "$DIR/w$i.log" >&2; exit 1; }
        done
        echo "127.0.0.1:$PORT" > "$DIR/address"
        echo "127.0.0.1:$PORT"
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
        rm -rf "$DIR"
        ;;
    kill-node)
        [ -n "${NODE:-}" ] || { echo "usage: $0 kill-node DIR NAME" >&2; exit 2; }
        # A worker node's processes: its raylet (whose command line names acx_node_NAME), every
        # process the raylet started (its workers, the acx worker actor among them) and the
        # node's agents (their command lines name its node id).
        raylet="$(for p in $(ours "acx_node_$NODE"); do { tr '\0' ' ' < /proc/$p/cmdline; } 2>/dev/null | grep -q raylet && echo $p; done | head -1 || true)"
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
        echo "usage: $0 start [DIR] [--workers N] [--slots S] | stop [DIR] | kill-node DIR NAME" >&2
        exit 2
        ;;
esac
