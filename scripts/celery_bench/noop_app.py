"""The Celery side of `scripts/bench-vs-celery.sh`: an app with one no-op task.

The task does nothing but count itself done (one INCR on the broker's Redis), so the driver
(`run.py`) knows when every task has run without a result backend. That is the least a
Celery task can cost while still being observable, which makes it a fair baseline for Lanes,
whose trials each also end in one durable write.
"""

import os

import redis
from celery import Celery

BROKER = os.environ["LANES_CELERY_BROKER"]

app = Celery("lanes_celery_bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    # `run.py --acks-late --prefetch 1`: a task is acknowledged after it ran, and a worker
    # process reserves one task at a time, the at-least-once setting a benchmark harness
    # would pick (Celery's defaults: acknowledged on receipt, 4 reserved per process).
    task_acks_late=os.environ.get("LANES_CELERY_ACKS_LATE") == "1",
    worker_prefetch_multiplier=int(os.environ.get("LANES_CELERY_PREFETCH", "4")),
)

# One client per worker process (prefork) or shared by its threads (redis-py pools
# connections), made lazily so a forked child never reuses its parent's sockets.
_done = None


@app.task(name="lanes_bench.noop")
def noop(counter_key):
    global _done
    if _done is None:
        _done = redis.Redis.from_url(BROKER)
    _done.incr(counter_key)
