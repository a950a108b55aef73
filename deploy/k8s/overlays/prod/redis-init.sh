# The init container of each lanes-redis pod (prod overlay): writes the config files its
# `redis` and `sentinel` containers run with (deploy/README.md, "Redis with Sentinel").
#
# The master is, in this order:
#   1. the node a running Sentinel names (each of $SENTINELS is asked);
#   2. else the node this pod's Sentinel named when it last ran: its config is on the data
#      volume, so after all pods were down at once the last master is master again;
#   3. else the node sentinel.conf names, lanes-redis-0: the very first start.
# This node starts as the master if it is the one named, else as its replica.
#
# A node the running Sentinels name as master while its data volume holds no append-only
# file lost its disk: started as an empty master, its replicas would copy the empty data set.
# It exits 1 instead (the kubelet runs it again) until the Sentinels have failed over to a
# replica, and then starts as the new master's replica.
#
# Environment: REDIS_ADDRESS and SENTINEL_ADDRESS (this node and its Sentinel, HOST:PORT, as
# the others reach them), SENTINELS (every Sentinel, HOST:PORT, space-separated),
# PASSWORD_FILE, DATA_DIR, and REDIS_CONFIG and SENTINEL_CONFIG (the files written).
# Nothing it prints holds the password.
set -eu
umask 077
templates=$(dirname "$0")

password=$(cat "$PASSWORD_FILE")
# redis-cli takes the password from the environment, never from its command line.
export REDISCLI_AUTH="$password"

# HOST:PORT of `sentinel monitor NAME HOST PORT QUORUM` in file $1 (nothing if none).
monitored() {
    sed -n 's/^sentinel monitor [^ ]* \([^ ]*\) \([0-9]*\) .*$/\1:\2/p' "$1" | head -n 1
}
name=$(sed -n 's/^sentinel monitor \([^ ]*\) .*$/\1/p' "$templates/sentinel.conf")

# HOST:PORT of the master the first Sentinel that answers names (nothing if none does).
asked() {
    for sentinel in $SENTINELS; do
        reply=$(timeout 3 redis-cli -h "${sentinel%:*}" -p "${sentinel##*:}" --raw \
            SENTINEL get-master-addr-by-name "$name" 2>/dev/null) || continue
        host=$(printf '%s\n' "$reply" | sed -n 1p)
        port=$(printf '%s\n' "$reply" | sed -n 2p)
        case "$port" in
            '' | *[!0-9]*) continue ;;
        esac
        [ -n "$host" ] || continue
        echo "$host:$port"
        return 0
    done
    return 0
}

master=$(asked)
from="the Sentinels"
if [ -z "$master" ] && [ -f "$SENTINEL_CONFIG" ]; then
    master=$(monitored "$SENTINEL_CONFIG")
    from="this pod's Sentinel when it last ran"
fi
if [ -z "$master" ]; then
    master=$(monitored "$templates/sentinel.conf")
    from="sentinel.conf (a first start)"
fi

# Redis 7 keeps its append-only files in <dir>/appendonlydir, and makes it when it starts.
if [ "$master" = "$REDIS_ADDRESS" ] && [ "$from" = "the Sentinels" ] &&
    [ ! -d "$DATA_DIR/appendonlydir" ]; then
    echo "redis-init: the Sentinels name this node ($REDIS_ADDRESS) as the master, but its" \
        "data volume holds no append-only file (a lost disk): not starting as an empty" \
        "master; waiting for them to fail over to a replica" >&2
    exit 1
fi

if [ "$master" = "$REDIS_ADDRESS" ]; then
    echo "redis-init: $REDIS_ADDRESS starts as the master (named by $from)"
else
    echo "redis-init: $REDIS_ADDRESS starts as a replica of $master (named by $from)"
fi

{
    cat "$templates/redis.conf" "$templates/redis-replication.conf"
    echo "# Written by redis-init.sh for $REDIS_ADDRESS."
    printf 'masterauth %s\n' "$password"
    echo "replica-announce-ip ${REDIS_ADDRESS%:*}"
    echo "replica-announce-port ${REDIS_ADDRESS##*:}"
    if [ "$master" != "$REDIS_ADDRESS" ]; then
        echo "replicaof ${master%:*} ${master##*:}"
    fi
} >"$REDIS_CONFIG.new"
mv "$REDIS_CONFIG.new" "$REDIS_CONFIG"

# The Sentinel's id follows from its address, so a restarted Sentinel is the same one to the
# others: a new id would leave the old one counted among the voters, and two Sentinels would
# no longer be a majority.
id=$(printf '%s' "$SENTINEL_ADDRESS" | sha1sum | cut -c 1-40)
mkdir -p "$(dirname "$SENTINEL_CONFIG")"
{
    sed "s/^sentinel monitor $name [^ ]* [0-9]* /sentinel monitor $name ${master%:*} ${master##*:} /" \
        "$templates/sentinel.conf"
    echo "# Written by redis-init.sh for $SENTINEL_ADDRESS."
    echo "sentinel myid $id"
    echo "sentinel announce-ip ${SENTINEL_ADDRESS%:*}"
    echo "sentinel announce-port ${SENTINEL_ADDRESS##*:}"
    printf 'sentinel auth-pass %s %s\n' "$name" "$password"
    # Clients (the coordinators) and the other Sentinels must give it too.
    printf 'requirepass %s\n' "$password"
} >"$SENTINEL_CONFIG.new"
mv "$SENTINEL_CONFIG.new" "$SENTINEL_CONFIG"
