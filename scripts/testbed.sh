#!/bin/bash
# testbed.sh - a ferry cluster on one machine: N ferryd nodes, each in a network namespace of
# its own with a veth to a bridge, links shaped to a rate and a round trip (netem), a Redis
# directory on the bridge. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), iproute2 and tc.
#
#   testbed.sh run [OPTIONS] -- COMMAND...   bring a testbed up, run COMMAND with
#                                            FERRY_TESTBED=its state directory, take it down
#                                            (on exit, Ctrl-C and TERM alike)
#   testbed.sh up [OPTIONS]                  bring one up; print its state directory
#   testbed.sh down STATE_DIR | --all        take one down (--all: every testbed, of crashed
#                                            runs too: what carries the prefix "ftb")
#   testbed.sh exec STATE_DIR NODE CMD...    run CMD in node NODE's namespace (1..N), with
#                                            FERRY_SOCKET set to that node's daemon
#   testbed.sh link STATE_DIR NODE up|down   take node NODE's link down (a partition of the node
#                                            from everyone), or bring it back
#   testbed.sh flap STATE_DIR NODE MS COUNT  COUNT times: the link down for MS ms, up for MS ms
#   testbed.sh cut STATE_DIR NODE PEER       refuse, in NODE's namespace, what goes to PEER (a
#   testbed.sh uncut STATE_DIR NODE PEER     node's number, or "directory"), or let it through
#                                            again: a partition of one path
# OPTIONS: -n NODES (default 8, at most 200), -r RATE per link each way (tc units, default
#          1gbit), -d RTT between two nodes (default 100us), -l LOSS percent per hop (default
#          0), -m ARENA per node (default 512M), -t TRANSPORT of ferryd (tcp; rxm: libfabric's
#          tcp;ofi_rxm over the veths; fabric; auto; default tcp), -b BIN_DIR (default
#          build/bin beside this script), -a "ARGS" more arguments for every ferryd (split at
#          spaces: "--verbose --verify"), -L: the delay line even with netem (to compare them).
#          Delay and loss come from the kernel's netem (sch_netem) when it has it; without it
#          (this project's machine: tc has tbf and pfifo only), -d or -l (or -L) put a delay line
#          in user space on every link (ferry-delayline, TAP devices: tools/delayline.c) and tbf
#          shapes the rate; with neither, no delay is added (the default round trip is dropped,
#          with a message).
#
# The path between two nodes crosses two shaped queues: the sender's link (its uplink) and
# the receiver's bridge-side end (its downlink), each with the rate and a quarter of the round
# trip, so that each node's link has RATE each way and two nodes see RTT. A link is a veth
# pair, or with the delay line two TAP devices it forwards between (a quarter of the round trip
# and the loss each way, one process for all links). Names carry a
# run id (ftb + 5 hex digits; interfaces ftbXXXXX-b for the bridge, ftbXXXXX-N on the bridge
# side): `down --all` finds what a crashed run left. Addresses are 10.A.B.0/24, from the run
# id, on the bridge alone: nothing is routed out. The state directory holds the nodes' sockets,
# logs and pids, and an env file (NODES, RATE, RTT_US, LOSS, NETEM, DELAYLINE, SUBNET, REDIS,
# TRANSPORT).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=ftb

die() {
    echo "testbed: $*" >&2
    exit 1
}

# Whether this process may make namespaces and links; says why not.
check_allowed() {
    [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth links, tc): run as root"
    command -v ip >/dev/null || die "needs iproute2 (ip): apt-get install iproute2"
    command -v tc >/dev/null || die "needs tc (iproute2)"
    command -v redis-server >/dev/null || die "needs redis-server: apt-get install redis-server"
    local probe="${PREFIX}probe$$"
    ip netns add "$probe" 2>/dev/null || die "cannot make a network namespace here (ip netns add" \
        "failed: a container without CAP_SYS_ADMIN, or netns not mounted)"
    ip netns del "$probe"
}

# Whether the kernel has netem (sch_netem): delay and loss need it; rate alone is tbf's.
have_netem() {
    local dev="${PREFIX}nt$$" ok=0
    ip link add "$dev" type veth peer name "${dev}p" || return 1
    tc qdisc add dev "$dev" root netem delay 1us 2>/dev/null && ok=1
    ip link del "$dev"
    [ $ok = 1 ]
}

# shape DEV NS: DEV's queue (in namespace NS, or the root one when NS is empty): netem with the
# rate, a quarter of the round trip and the loss; without netem (or with the delay line, which
# adds those), tbf with the rate alone.
shape() {
    local dev=$1 ns=$2 quarter_us=$((RTT_US / 4)) loss=()
    [ "$LOSS" = 0 ] || loss=(loss "${LOSS}%")
    if [ "$NETEM" = 1 ] && [ "$DELAYLINE" = 0 ]; then
        ${ns:+ip netns exec "$ns"} tc qdisc replace dev "$dev" root netem delay "${quarter_us}us" \
            rate "$RATE" "${loss[@]}" limit 10000
    else
        ${ns:+ip netns exec "$ns"} tc qdisc replace dev "$dev" root tbf rate "$RATE" \
            burst 256kb latency 20ms
    fi
}

# wait_for CHECK... : runs CHECK every 50 ms until it succeeds, at most 10 s (WAIT_S).
wait_for() {
    local i
    for ((i = 0; i < ${WAIT_S:-10} * 20; i++)); do
        "$@" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

node_up() {
    local i=$1 ns="${RUN}-$1" host="${RUN}-$1" dir="$STATE/node$1"
    mkdir -p "$dir"
    ip netns add "$ns"
    if [ "$DELAYLINE" = 1 ]; then # the delay line's two devices: host, and host-n for the node
        ip link set "$host-n" netns "$ns"
        ip -n "$ns" link set "$host-n" name eth0
    else
        ip link add "$host" type veth peer name eth0 netns "$ns"
    fi
    ip link set "$host" master "${RUN}-b" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$SUBNET.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    shape eth0 "$ns"
    shape "$host" ""
    ip netns exec "$ns" "$BIN/ferryd" --socket "$dir/ferry.sock" --memory "$MEM" \
        --node-id "node$i" --listen "$SUBNET.$i:7000" "${TRANSPORT_ARGS[@]}" "${EXTRA_ARGS[@]}" \
        --directory "redis://$SUBNET.254:6379" >"$dir/ferryd.log" 2>&1 &
    echo $! >"$dir/pid"
    disown
}

# The run's /24 (its first three parts), from its id: known again after a crash.
subnet_of() {
    echo "10.$((16#${1:3:2} % 200 + 20)).$((16#${1:5:2}))"
}

# Starts the delay line with a device pair per node (delayline.pid, delayline.log: its counters
# at the end) and waits until it has made them.
delayline_up() {
    local names=() i
    [ -x "$BIN/ferry-delayline" ] || die "no ferry-delayline in $BIN: make build"
    for ((i = 1; i <= NODES; i++)); do
        names+=("${RUN}-$i")
    done
    "$BIN/ferry-delayline" --delay-us $((RTT_US / 4)) --loss "$LOSS" "${names[@]}" \
        >"$STATE/delayline.out" 2>"$STATE/delayline.log" &
    echo $! >"$STATE/delayline.pid"
    disown
    wait_for grep -q ready "$STATE/delayline.out" ||
        die "the delay line did not start (see $STATE/delayline.log)"
}

up() {
    check_allowed
    NETEM=0
    if have_netem; then
        NETEM=1
    elif [ -n "$RTT_GIVEN$LOSS_GIVEN" ]; then
        DELAYLINE=1
        echo "testbed: no netem in this kernel: a delay line in user space adds the round trip" \
            "and the loss, tbf shapes the rate" >&2
    elif [ "$DELAYLINE" = 0 ]; then
        RTT_US=0 # the veths' own round trip, measured by whoever needs it
        echo "testbed: no netem in this kernel: links shaped to $RATE by tbf, no added delay" >&2
    fi
    [ -x "$BIN/ferryd" ] || die "no ferryd in $BIN: make build"
    [ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || die "-n $NODES: 1 to 200 nodes"
    read -ra EXTRA_ARGS <<<"$EXTRA" # split at spaces, no globbing
    case $TRANSPORT in
    rxm) TRANSPORT_ARGS=(--transport fabric --fabric-provider "tcp;ofi_rxm") ;;
    tcp | fabric | auto) TRANSPORT_ARGS=(--transport "$TRANSPORT") ;;
    *) die "-t $TRANSPORT: tcp, rxm, fabric or auto" ;;
    esac
    RUN="$PREFIX$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n' | cut -c1-5)"
    SUBNET=$(subnet_of "$RUN")
    STATE=$(mktemp -d "/tmp/ferry-testbed-$RUN.XXXX")
    echo "$RUN" >"$STATE/run"
    # A bridge takes its lowest port's MAC unless given one: pinned, for the static neighbours.
    ip link add "${RUN}-b" address "02:${RUN:3:2}:${RUN:5:2}:00:00:fe" type bridge
    ip addr add "$SUBNET.254/24" dev "${RUN}-b"
    ip link set "${RUN}-b" up
    [ "$DELAYLINE" = 0 ] || delayline_up
    redis-server --bind "$SUBNET.254" --port 6379 --save '' --appendonly no \
        --protected-mode no --daemonize no >"$STATE/redis.log" 2>&1 &
    echo $! >"$STATE/redis.pid"
    disown
    wait_for redis-cli -h "$SUBNET.254" -p 6379 ping >/dev/null ||
        die "redis did not answer on $SUBNET.254:6379 (see $STATE/redis.log)"
    for ((i = 1; i <= NODES; i++)); do
        node_up "$i"
    done
    cat >"$STATE/env" <<EOF
NODES=$NODES
RATE=$RATE
RTT_US=$RTT_US
LOSS=$LOSS
NETEM=$NETEM
DELAYLINE=$DELAYLINE
SUBNET=$SUBNET
REDIS=$SUBNET.254:6379
TRANSPORT=$TRANSPORT
EOF
    static_neighbours
    for ((i = 1; i <= NODES; i++)); do
        wait_for test -S "$STATE/node$i/ferry.sock" ||
            die "node $i did not start (see $STATE/node$i/ferryd.log)"
    done
    WAIT_S=$((10 + NODES)) wait_for listed ||
        die "the nodes did not all register in the directory within $((10 + NODES)) s" \
            "($STATE/node*/ferryd.log)"
    # Each ferryd maps its arena in the background at start (all of it, at idle priority):
    # what is measured on the testbed must not share the CPU with that.
    for ((i = 1; i <= NODES; i++)); do
        WAIT_S=120 wait_for mapped_or_dead "$i" ||
            die "node $i did not map its arena within 120 s (see $STATE/node$i/ferryd.log)"
        kill -0 "$(cat "$STATE/node$i/pid")" 2>/dev/null ||
            die "node $i exited (see $STATE/node$i/ferryd.log)"
    done
}

# Every node knows every other's MAC, and the bridge (Redis) knows theirs, for good: the shaped
# links drop ARP as they drop data, and 32 nodes opening 992 connections at once into links
# the first ones filled had connects fail "No route to host" when resolution gave up.
static_neighbours() {
    local i j macs=() bridge
    for ((i = 1; i <= NODES; i++)); do
        macs[i]=$(ip netns exec "$RUN-$i" cat /sys/class/net/eth0/address)
    done
    bridge=$(cat "/sys/class/net/$RUN-b/address")
    for ((i = 1; i <= NODES; i++)); do
        {
            echo "neigh replace $SUBNET.254 lladdr $bridge dev eth0 nud permanent"
            for ((j = 1; j <= NODES; j++)); do
                [ "$j" = "$i" ] || echo "neigh replace $SUBNET.$j lladdr ${macs[j]} dev eth0 nud permanent"
            done
        } | ip -n "$RUN-$i" -batch -
        ip neigh replace "$SUBNET.$i" lladdr "${macs[i]}" dev "$RUN-b" nud permanent
    done
}

# Whether node I logged its arena mapped (or at first touch), or is gone.
mapped_or_dead() {
    grep -q "arena mapped" "$STATE/node$1/ferryd.log" || ! kill -0 "$(cat "$STATE/node$1/pid")"
}

# Whether node 1 lists every node.
listed() {
    [ "$(FERRY_SOCKET="$STATE/node1/ferry.sock" "$BIN/ferry" nodes | grep -c node)" -eq "$NODES" ]
}

# down_run RUN [STATE]: kills what the run started, removes its namespaces, links and state.
down_run() {
    local run=$1 state=${2:-} ns pidf
    if [ -n "$state" ] && [ -d "$state" ]; then
        for pidf in "$state"/node*/pid "$state/redis.pid" "$state/delayline.pid"; do
            [ -f "$pidf" ] && kill -9 "$(cat "$pidf")" 2>/dev/null || true
        done
    fi
    for ns in $(ip netns list | awk '{print $1}' | grep "^$run-" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$run-" |
        while read -r dev; do ip link del "$dev" 2>/dev/null || true; done
    pkill -9 -f "^redis-server $(subnet_of "$run" | sed 's/\./\\./g')\.254:6379" || true
    pkill -9 -f "ferry-delayline .* $run-1( |\$)" || true
    [ -z "$state" ] || rm -rf "$state"
}

down() {
    local arg=${1:-}
    if [ "$arg" = --all ]; then
        local runs
        runs=$( (ip netns list | awk '{print $1}'; ip -o link show | awk -F': ' '{print $2}') |
            grep -o "^$PREFIX[0-9a-f]\{5\}" | sort -u || true)
        for run in $runs; do
            down_run "$run" "$(ls -d /tmp/ferry-testbed-"$run".* 2>/dev/null | head -1)"
        done
        rm -rf /tmp/ferry-testbed-"$PREFIX"*
        return
    fi
    [ -f "$arg/run" ] || die "$arg: not a testbed's state directory"
    down_run "$(cat "$arg/run")" "$arg"
}

options() {
    NODES=8 RATE=1gbit RTT=100us LOSS=0 MEM=512M TRANSPORT=tcp BIN="$ROOT/build/bin" EXTRA=""
    RTT_GIVEN="" LOSS_GIVEN="" DELAYLINE=0
    while getopts "n:r:d:l:m:t:b:a:L" o; do
        case $o in
        n) NODES=$OPTARG ;;
        r) RATE=$OPTARG ;;
        d) RTT=$OPTARG RTT_GIVEN=1 ;;
        l) LOSS=$OPTARG LOSS_GIVEN=1 ;;
        m) MEM=$OPTARG ;;
        t) TRANSPORT=$OPTARG ;;
        b) BIN=$OPTARG ;;
        a) EXTRA=$OPTARG ;;
        L) DELAYLINE=1 ;;
        *) die "unknown option (see the head of $0)" ;;
        esac
    done
    case $RTT in
    *us) RTT_US=${RTT%us} ;;
    *ms) RTT_US=$((${RTT%ms} * 1000)) ;;
    *) die "-d $RTT: give us or ms (100us, 2ms)" ;;
    esac
    SHIFT=$((OPTIND - 1))
}

cmd=${1:-}
shift || true
case $cmd in
up)
    options "$@"
    trap '[ "${UP_OK:-}" = 1 ] || [ -z "${RUN:-}" ] || down_run "$RUN" "${STATE:-}"' EXIT # a failed up leaves nothing
    trap 'exit 130' INT TERM
    up
    UP_OK=1
    echo "$STATE"
    ;;
run)
    options "$@"
    shift "$SHIFT"
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "run: no command after --"
    trap '[ -z "${RUN:-}" ] || down_run "$RUN" "${STATE:-}"' EXIT
    trap 'exit 130' INT TERM
    up
    FERRY_TESTBED=$STATE "$@"
    ;;
down) down "${1:-}" ;;
exec)
    [ $# -ge 3 ] || die "usage: exec STATE_DIR NODE CMD..."
    state=$1 node=$2
    shift 2
    [ -f "$state/run" ] || die "$state: not a testbed's state directory"
    FERRY_SOCKET="$state/node$node/ferry.sock" exec ip netns exec "$(cat "$state/run")-$node" "$@"
    ;;
link)
    [ $# -eq 3 ] && { [ "$3" = up ] || [ "$3" = down ]; } || die "usage: link STATE_DIR NODE up|down"
    [ -f "$1/run" ] || die "$1: not a testbed's state directory"
    ip link set "$(cat "$1/run")-$2" "$3"
    ;;
flap)
    [ $# -eq 4 ] || die "usage: flap STATE_DIR NODE MS COUNT"
    [ -f "$1/run" ] || die "$1: not a testbed's state directory"
    half=$(awk "BEGIN { print $3 / 1000 }")
    for ((k = 0; k < $4; k++)); do
        ip link set "$(cat "$1/run")-$2" down
        sleep "$half"
        ip link set "$(cat "$1/run")-$2" up
        sleep "$half"
    done
    ;;
cut | uncut)
    [ $# -eq 3 ] || die "usage: $cmd STATE_DIR NODE PEER (a node's number, or directory)"
    [ -f "$1/run" ] || die "$1: not a testbed's state directory"
    subnet=$(sed -n 's/^SUBNET=//p' "$1/env")
    peer=$3
    [ "$peer" = directory ] && peer=254
    ip -n "$(cat "$1/run")-$2" route "$([ "$cmd" = cut ] && echo add || echo del)" \
        prohibit "$subnet.$peer/32"
    ;;
*) sed -n '2,30p' "$0" >&2 && exit 2 ;;
esac
