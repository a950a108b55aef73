#!/usr/bin/env bash
# Lanes beside Celery, in one run, on one Redis: the figures of docs/PERFORMANCE.md, "Lanes
# beside Celery". It starts its own durable redis-server (AOF, fsync on every write) on a free
# loopback port in a temp directory, then runs on it, one after the other:
#   1. `lanes bench --redis` with simulated lanes (the scheduler alone: real gRPC sessions and
#      a real coordinator process, no driver), RUNS times;
#   2. `lanes bench --redis --workers 2` (2 real `lanes worker` processes x 32 lanes running the
#      built-in sim driver with zero durations: the whole path, no-op trials), RUNS times;
#   3. Celery no-op tasks (scripts/celery_bench/run.py) measured two ways:
#      - the harness baseline: one worker, prefork pool of 2, acks_late, prefetch 1, 5,000
#        tasks from one publisher (how a benchmark harness would run trials on Celery);
#      - Celery's best: 2 workers x 32 with the prefork and the threads pool, default acks
#        and prefetch, TRIALS tasks from 8 publishing threads;
# and prints each figure, the median of the Lanes runs and its ratio to both Celery figures.
# Each `lanes bench` deletes its campaign from the Redis when it ends, so every run (and
# Celery's) starts on a store without the debris of the runs before it.
# Celery is installed into a venv under the cargo target directory.
# Usage: scripts/bench-vs-celery.sh [TRIALS] [RUNS] (defaults 20000 and 3).
# COORDINATOR_THREADS=N in the environment runs the coordinator of both Lanes runs on N
# runtime threads (`lanes bench --coordinator-threads N`; default: one per CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS="${1:-20000}"
RUNS="${2:-3}"
TARGET="${CARGO_TARGET_DIR:-target}"
VENV="$TARGET/bench-venv"
THREADS=()
if [ -n "${COORDINATOR_THREADS:-}" ]; then
  THREADS=(--coordinator-threads "$COORDINATOR_THREADS")
fi

command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/test.sh installs it)" >&2; exit 1; }
if [ ! -x "$VENV/bin/celery" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'celery[redis]>=5.4,<6'
fi
cargo build --release -q -p lanes
LANES="$TARGET/release/lanes"

DIR="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --appendonly yes --appendfsync always \
  --save "" --daemonize yes --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log"
trap 'kill "$(cat "$DIR/redis.pid")" 2>/dev/null || true; rm -rf "$DIR"' EXIT
URL="redis://127.0.0.1:$PORT/"
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

for run in $(seq "$RUNS"); do
  echo "== lanes bench, simulated lanes (64 lanes in 4 sessions), $TRIALS trials, run $run" >&2
  "$LANES" bench --redis "$URL" --lanes 64 --trials "$TRIALS" --duration 120 "${THREADS[@]}" --json >"$DIR/sim-$run.json"
  echo "== lanes bench, 2 lanes workers x 32 lanes, sim driver, $TRIALS trials, run $run" >&2
  # The workers' files stay until the end (see `lanes bench --work-dir`).
  mkdir -p "$DIR/work"
  "$LANES" bench --redis "$URL" --workers 2 --lanes 64 --trials "$TRIALS" --duration 120 \
    --work-dir "$DIR/work" "${THREADS[@]}" --json >"$DIR/workers-$run.json"
done
echo "== celery harness baseline: 1 worker, prefork 2, acks_late, prefetch 1, 5000 tasks" >&2
"$VENV/bin/python" scripts/celery_bench/run.py --redis "$URL" --tasks 5000 --workers 1 \
  --concurrency 2 --pool prefork --publishers 1 --acks-late --prefetch 1 >"$DIR/celery-harness.json"
for pool in prefork threads; do
  echo "== celery, 2 workers x 32 ($pool), $TRIALS tasks" >&2
  "$VENV/bin/python" scripts/celery_bench/run.py --redis "$URL" --tasks "$TRIALS" --workers 2 \
    --concurrency 32 --pool "$pool" --publishers 8 >"$DIR/celery-$pool.json"
done

python3 - "$DIR" "$RUNS" <<'PY'
import json, os, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
load = lambda n: json.load(open(os.path.join(d, n)))
harness = load("celery-harness.json")
best = max((load("celery-prefork.json"), load("celery-threads.json")), key=lambda c: c["tasks_per_s"])
for c in (harness, load("celery-prefork.json"), load("celery-threads.json")):
    print(f"celery {c['workers']}x{c['concurrency']} {c['pool']:>8} acks_late={c['acks_late']} prefetch={c['prefetch']}: "
          f"{c['tasks_per_s']:8.1f} tasks/s ({c['tasks']} no-op tasks in {c['elapsed_s']} s)")
for name, kind in (("lanes sim lanes", "sim"), ("lanes 2 workers", "workers")):
    rs = [load(f"{kind}-{i}.json") for i in range(1, runs + 1)]
    for r in rs:
        print(f"{name}: {r['attempts_per_s']:8.1f} attempts/s ({r['trials_final']}/{r['trials']} trials final, {r['ending']})")
        print(f"  {r['summary']}")
    med = statistics.median(r["attempts_per_s"] for r in rs)
    print(f"{name}, median of {runs}: {med:.1f} attempts/s = {med / harness['tasks_per_s']:.1f}x the celery harness baseline, "
          f"{med / best['tasks_per_s']:.1f}x celery's best ({best['workers']}x{best['concurrency']} {best['pool']})")
PY
