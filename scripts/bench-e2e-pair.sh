#!/usr/bin/env bash
# Two builds of `lanes` side by side on the whole path: `lanes bench --redis --workers 2`
# (2 real `lanes worker` processes x 32 lanes, the built-in sim driver with zero durations),
# in ABBA order (A B, then B A, ...) on one durable Redis (AOF, fsync on every write, free
# loopback port). Each run's worker files go on a fresh ext4 filesystem without a journal,
# mounted with `discard` (a loop device made again for every run), so no run inherits the
# freed inodes of another: ext4 without a journal re-checks every inode freed in the last
# minutes at each create, which slows the runs that follow a removal by up to half.
#
# Usage (as root, for the loop mount): scripts/bench-e2e-pair.sh ROUNDS LANES_A LANES_B [TRIALS]
# e.g. build, copy target/release/lanes aside as /tmp/lanes-a, change, build again, then
#   scripts/bench-e2e-pair.sh 3 /tmp/lanes-a target/release/lanes
# Prints one line per run: the build (A or B), attempts per second and the bench's summary.
set -euo pipefail
ROUNDS="$1"; A="$2"; B="$3"; TRIALS="${4:-20000}"
[ "$(id -u)" = 0 ] || { echo "needs root (it mounts a loop filesystem per run)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/test.sh installs it)" >&2; exit 1; }

DIR="$(mktemp -d)"
IMG="$DIR/fs.img"
MNT="$DIR/mnt"
mkdir -p "$MNT"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --appendonly yes --appendfsync always \
  --save "" --daemonize yes --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log"
cleanup() {
  mountpoint -q "$MNT" && umount "$MNT"
  local pid
  pid="$(cat "$DIR/redis.pid" 2>/dev/null)" && kill "$pid" 2>/dev/null || true
  # Redis may still be writing its files: remove them once it is gone.
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -rf "$DIR"
}
trap cleanup EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

run() {
  local bin="$1" name="$2"
  rm -f "$IMG"
  truncate -s 3G "$IMG"
  mkfs.ext4 -q -F -O ^has_journal "$IMG"
  mount -o loop,discard "$IMG" "$MNT"
  mkdir "$MNT/work"
  "$bin" bench --redis "redis://127.0.0.1:$PORT/" --workers 2 --lanes 64 --trials "$TRIALS" \
    --duration 120 --work-dir "$MNT/work" --json >"$DIR/run.json"
  umount "$MNT"
  python3 - "$DIR/run.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]} {r['attempts_per_s']:8.1f} attempts/s  {r['summary']}")
PY
}

for i in $(seq "$ROUNDS"); do
  if [ $((i % 2)) = 1 ]; then run "$A" A; run "$B" B; else run "$B" B; run "$A" A; fi
done
