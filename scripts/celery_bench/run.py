"""Measures Celery's no-op task rate on a given Redis, for `scripts/bench-vs-celery.sh`.

It starts `--workers` Celery worker processes (`--pool`, `--concurrency` each) on a queue of
its own, warms them up with a batch of tasks, then publishes `--tasks` no-op tasks and times
from the first publish until the last task counted itself done. It prints one JSON object and
removes its keys. Workers are killed on every exit path.
"""

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_count(r, key, n, deadline):
    while int(r.get(key) or 0) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"celery: only {int(r.get(key) or 0)}/{n} tasks ran in time")
        time.sleep(0.01)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--redis", required=True, help="redis://host:port/db (the broker)")
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--pool", choices=["prefork", "threads"], default="prefork")
    p.add_argument("--publishers", type=int, default=1,
                   help="threads publishing the tasks (one broker connection each)")
    p.add_argument("--acks-late", action="store_true",
                   help="acknowledge each task after it ran (task_acks_late)")
    p.add_argument("--prefetch", type=int, default=4,
                   help="tasks each worker process reserves (worker_prefetch_multiplier)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before giving up")
    a = p.parse_args()
    if min(a.tasks, a.workers, a.concurrency, a.publishers, a.prefetch) < 1:
        p.error("--tasks, --workers, --concurrency, --publishers and --prefetch must be positive")

    tag = secrets.token_hex(6)
    queue = f"lanes-celery-bench-{tag}"
    counter = f"lanes-celery-bench-{tag}:done"
    warm = f"lanes-celery-bench-{tag}:warm"
    # Running as root makes Celery warn on every start; the warning says nothing here.
    settings = {
        "LANES_CELERY_BROKER": a.redis,
        "LANES_CELERY_ACKS_LATE": "1" if a.acks_late else "0",
        "LANES_CELERY_PREFETCH": str(a.prefetch),
    }
    env = dict(os.environ, PYTHONWARNINGS="ignore", **settings)
    sys.path.insert(0, HERE)
    os.environ.update(settings)
    from noop_app import noop  # noqa: E402 (needs the broker in the env)

    r = redis.Redis.from_url(a.redis)
    workers = []
    try:
        for i in range(a.workers):
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "noop_app", "worker",
                     "--pool", a.pool, "--concurrency", str(a.concurrency),
                     "--queues", queue, "--hostname", f"bench{i}-{tag}@%h",
                     "--without-gossip", "--without-mingle", "--without-heartbeat",
                     "--loglevel", "WARNING"],
                    cwd=HERE, env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, start_new_session=True,
                )
            )
        # Warm up: the workers have started and run tasks before the clock starts.
        n_warm = 2 * a.workers * a.concurrency
        for _ in range(n_warm):
            noop.apply_async(args=(warm,), queue=queue)
        wait_count(r, warm, n_warm, time.monotonic() + a.timeout)

        def publish(n):
            for _ in range(n):
                noop.apply_async(args=(counter,), queue=queue)

        shares = [a.tasks // a.publishers + (i < a.tasks % a.publishers)
                  for i in range(a.publishers)]
        threads = [threading.Thread(target=publish, args=(n,)) for n in shares]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        published = time.monotonic() - start
        wait_count(r, counter, a.tasks, start + a.timeout)
        elapsed = time.monotonic() - start
    finally:
        for w in workers:
            try:
                os.killpg(w.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            w.wait()
        # The queue's keys (kombu adds priority variants) and the counters.
        keys = [counter, warm, *r.scan_iter(match=f"{queue}*")]
        r.delete(*keys)

    print(json.dumps({
        "tasks": a.tasks,
        "workers": a.workers,
        "concurrency": a.concurrency,
        "pool": a.pool,
        "publishers": a.publishers,
        "acks_late": a.acks_late,
        "prefetch": a.prefetch,
        "publish_s": round(published, 3),
        "elapsed_s": round(elapsed, 3),
        "tasks_per_s": round(a.tasks / elapsed, 1),
    }))


if __name__ == "__main__":
    main()
