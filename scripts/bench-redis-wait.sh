#!/usr/bin/env bash
# What `--redis-wait 1` costs, in one run: the figures of docs/PERFORMANCE.md, "Replicated
# acknowledgements". It starts a durable master (AOF, fsync on every write,
# min-replicas-to-write 1) and one replica on free loopback ports in a temp directory, then
# runs `lanes bench --redis` against the master without and with `--redis-wait 1`, alternated,
# PAIRS times, each on an emptied store, and prints each run's throughput, latencies and the
# coordinator's CPU, then the ratios.
# Usage: scripts/bench-redis-wait.sh [TRIALS] [PAIRS] (defaults 20000 and 3).
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS="${1:-20000}"
PAIRS="${2:-3}"
TARGET="${CARGO_TARGET_DIR:-target}"
command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/test.sh installs it)" >&2; exit 1; }
cargo build --release -q -p lanes
LANES="$TARGET/release/lanes"

DIR=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MASTER=$(port)
REPLICA=$(port)
cleanup() {
  redis-cli -p "$REPLICA" shutdown nosave >/dev/null 2>&1 || true
  redis-cli -p "$MASTER" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
mkdir -p "$DIR/master" "$DIR/replica"
common=(--bind 127.0.0.1 --save "" --appendonly yes --appendfsync always --daemonize yes)
redis-server --port "$MASTER" --dir "$DIR/master" --min-replicas-to-write 1 \
  --logfile "$DIR/master.log" "${common[@]}"
redis-server --port "$REPLICA" --dir "$DIR/replica" --replicaof 127.0.0.1 "$MASTER" \
  --logfile "$DIR/replica.log" "${common[@]}"
until redis-cli -p "$REPLICA" info replication | grep -q master_link_status:up; do sleep 0.2; done

summary='import json, sys
r = json.load(sys.stdin)
print("%.0f attempts/s, claim p50 %.2f ms, outcome ack p50 %.2f ms p99 %.2f ms, coordinator CPU %.2f s, %d/%d final"
      % (r["attempts_per_s"], r["claim"]["p50_ms"], r["outcome_ack"]["p50_ms"],
         r["outcome_ack"]["p99_ms"], r["coordinator"]["cpu_s"], r["trials_final"], r["trials"]))'
declare -a NONE WAIT
for pair in $(seq "$PAIRS"); do
  for mode in none wait; do
    redis-cli -p "$MASTER" flushall >/dev/null
    redis-cli -p "$MASTER" wait 1 5000 >/dev/null
    extra=()
    [ "$mode" = wait ] && extra=(--redis-wait 1)
    out=$("$LANES" bench --redis "redis://127.0.0.1:$MASTER/" "${extra[@]}" --lanes 64 \
      --trials "$TRIALS" --duration 120 --json 2>"$DIR/bench.err") || { cat "$DIR/bench.err" >&2; exit 1; }
    rate=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["attempts_per_s"])')
    if [ "$mode" = none ]; then NONE+=("$rate"); else WAIT+=("$rate"); fi
    printf 'pair %s, %-4s: %s\n' "$pair" "$mode" "$(printf '%s' "$out" | python3 -c "$summary")"
  done
done
for i in "${!NONE[@]}"; do
  python3 -c "print('pair %d: --redis-wait 1 / none = %.3f' % ($i + 1, ${WAIT[$i]} / ${NONE[$i]}))"
done
