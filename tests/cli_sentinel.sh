#!/usr/bin/env bash
# cli_sentinel.sh - the directory survives the loss of its Redis: one master, one replica and
# three real redis-sentinel processes on loopback, two ferryd nodes with
# --directory redis-sentinel://...; the master is killed (-9) while node a puts objects and
# node b fetches them. After the failover every object sealed before, during and after is
# fetchable (fetches started during the failover wait for the directory and succeed), and the
# new master lists every one of them (counted), held by a.
#
# Needs FERRY_BIN_DIR, redis-server, redis-sentinel, redis-cli and python3.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

LOGS_ON_FAILURE=1
MASTER=ferrym
# How many objects a puts before the kill, and after the failover.
BEFORE=100
AFTER=100

# start_redis_on PORT NAME [ARGS...]: a redis-server, its pid in RPID[NAME].
declare -A RPID
start_redis_on() {
    local port=$1 name=$2
    shift 2
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" \
        --dbfilename "$name.rdb" "$@" >"$DIR/$name.log" 2>&1 &
    PIDS+=($!)
    RPID[$name]=$!
    wait_for "$name" $! redis-cli -p "$port" ping
}

start_sentinel() {
    local port=$1 name=sentinel$1
    cat >"$DIR/$name.conf" <<EOF
port $port
bind 127.0.0.1
dir $DIR
sentinel monitor $MASTER 127.0.0.1 $MASTER_PORT 2
sentinel down-after-milliseconds $MASTER 1000
sentinel failover-timeout $MASTER 10000
EOF
    redis-sentinel "$DIR/$name.conf" >"$DIR/$name.log" 2>&1 &
    PIDS+=($!)
    wait_for "$name" $! redis-cli -p "$port" ping
}

sentinel_q() { redis-cli -p "${SENTINEL_PORTS[0]}" sentinel "$@" 2>/dev/null; }
# True once the first sentinel knows the replica and the two other sentinels.
sentinels_ready() {
    [ "$(sentinel_q replicas "$MASTER" | grep -c '^name$')" -ge 1 ] &&
        [ "$(sentinel_q sentinels "$MASTER" | grep -c '^name$')" -ge 2 ]
}
master_is_replica() {
    [ "$(sentinel_q get-master-addr-by-name "$MASTER" | tail -1)" = "$REPLICA_PORT" ]
}
replica_is_master() { redis-cli -p "$REPLICA_PORT" role 2>/dev/null | head -1 | grep -qx master; }

start_cluster_node() {
    local name=$1 port url s
    port=$(free_port) || return 1
    url="redis-sentinel://"
    for s in "${SENTINEL_PORTS[@]}"; do url+="127.0.0.1:$s,"; done
    url="${url%,}/$MASTER"
    start_node "$name" --node-id "node-$name" --listen "127.0.0.1:$port" --directory "$url"
}

# put_range PREFIX FIRST LAST: puts PREFIX-i on a; appends the ids put to $DIR/put.ids.
put_range() {
    local i
    for ((i = $2; i <= $3; i++)); do
        printf '%s-%d' "$1" "$i" >"$DIR/obj.bin"
        fy a put "$1-$i" "$DIR/obj.bin" 2>>"$DIR/put.err" && echo "$1-$i" >>"$DIR/put.ids"
    done
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# a puts, and b fetches what a put, until $DIR/stop exists (at most 2000 each); each fetch
# that succeeds is noted with the times it started and ended.
churn() {
    local i t
    for ((i = 1; i <= 2000; i++)); do
        [ -e "$DIR/stop" ] && break
        put_range during "$i" "$i"
        t=$(now_ms)
        fy b fetch "during-$i" --timeout 20000 2>>"$DIR/churn.err" &&
            echo "$t $(now_ms) during-$i" >>"$DIR/churn.fetched"
    done
}

# True when a fetch that succeeded was under way while the directory had no master (it
# started before the promotion and ended after the kill: it waited, or started, in between).
fetched_during_outage() {
    awk -v a="$KILLED_MS" -v b="$PROMOTED_MS" '$1 < b && $2 > a { n++ } END { exit !n }' \
        "$DIR/churn.fetched"
}

# Counts on the master now in charge.
obj_keys() { redis-cli -p "$REPLICA_PORT" --scan --pattern 'ferry:obj:*' | wc -l; }
held_by_a() { redis-cli -p "$REPLICA_PORT" scard ferry:held:node-a; }
directory_complete() {
    [ "$(obj_keys)" -eq "$(wc -l <"$DIR/put.ids")" ] &&
        [ "$(held_by_a)" -eq "$(wc -l <"$DIR/put.ids")" ]
}

# every_object_fetchable NODE: b fetches (then gets and compares) every id a put.
every_object_fetchable() {
    local id bad=0
    while read -r id; do
        if ! fy b fetch "$id" --timeout 20000 2>>"$DIR/final.err" ||
            [ "$(fy b get "$id" 2>/dev/null)" != "$id" ]; then
            bad=$((bad + 1))
        fi
    done <"$DIR/put.ids"
    [ "$bad" -eq 0 ] || echo "$bad objects not fetchable" >&2
    [ "$bad" -eq 0 ]
}

main() {
    local churner
    MASTER_PORT=$(free_port) && REPLICA_PORT=$(free_port) || exit 1
    start_redis_on "$MASTER_PORT" master || exit 1
    start_redis_on "$REPLICA_PORT" replica --replicaof 127.0.0.1 "$MASTER_PORT" || exit 1
    SENTINEL_PORTS=("$(free_port)" "$(free_port)" "$(free_port)")
    for p in "${SENTINEL_PORTS[@]}"; do start_sentinel "$p" || exit 1; done
    POLLS=600 eventually "the sentinels know the replica and each other" sentinels_ready
    start_cluster_node a || exit 1
    start_cluster_node b || exit 1
    : >"$DIR/put.ids"
    put_range before 1 "$BEFORE"
    ok "a put every object before the failover" test "$(wc -l <"$DIR/put.ids")" -eq "$BEFORE"
    churn &
    churner=$!
    sleep 1
    KILLED_MS=$(now_ms)
    kill -KILL "${RPID[master]}"
    POLLS=600 eventually "the sentinels promote the replica" master_is_replica
    PROMOTED_MS=$(now_ms)
    ok "the replica is the master now" replica_is_master
    sleep 1
    touch "$DIR/stop"
    wait "$churner"
    put_range after 1 "$AFTER"
    ok "a put every object (nothing refused during the failover)" test ! -s "$DIR/put.err"
    POLLS=600 eventually "the new master lists every object a put, held by a" directory_complete
    ok "the churn put objects during the failover" test -s "$DIR/churn.fetched"
    ok "every fetch during the failover waited for the directory and succeeded" \
        test ! -s "$DIR/churn.err"
    ok "every object put before, during and after is fetchable from b" every_object_fetchable
    ok "a fetch under way while there was no master succeeded" fetched_during_outage
    ok "a lost its directory" grep -q "lost Redis" "$DIR/a.log"
    ok "a registered on the new master" \
        grep -q "registered as node-a at Redis 127.0.0.1:$REPLICA_PORT/0 (master $MASTER)" "$DIR/a.log"
    ok "b registered on the new master" \
        grep -q "registered as node-b at Redis 127.0.0.1:$REPLICA_PORT/0 (master $MASTER)" "$DIR/b.log"
    echo "objects: $(wc -l <"$DIR/put.ids") put, $(obj_keys) in the new master's directory"
    summary
}

main
