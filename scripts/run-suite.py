#!/usr/bin/env python3
"""Runs the workspace's test binaries, the waiting ones beside the rest.

`cargo test` runs one test binary at a time. A few binaries spend most of their time waiting on
real processes (faults that must land on running work, Sentinel failovers, deployments,
containers), using a fraction of a core; run one after another they made up half of the suite's
time. This builds every test binary with cargo, then runs each group in `BESIDE` in a lane of
its own while the other binaries run one at a time in front, as cargo would run them. The
lanes' output is kept and printed whole once they end, so no two binaries' output interleave.
Doc tests run last, through cargo. Every binary runs even after one fails (as
`--no-fail-fast`); the exit code is non-zero if any failed, and the failures are listed at the
end.

Called by `scripts/test.sh` with no arguments; with arguments, that script runs plain
`cargo test --workspace ARGS` instead.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Groups of test targets (by name) that wait more than they compute, each run in a lane of its
# own beside the others. Binaries in one group run one after another.
BESIDE = [
    ["faults"],
    ["worker_e2e", "deploy", "redis_failover"],
    # Real podman containers: their boots and verifiers wait on the runtime; run in front,
    # this binary alone was the longest part of the suite's critical path.
    ["container_driver"],
]


class Binary:
    def __init__(self, msg):
        target = msg["target"]
        self.name = target["name"]
        self.kind = target["kind"][0]
        self.exe = msg["executable"]
        self.package = msg["package_id"]
        self.cwd = str(Path(msg["manifest_path"]).parent)
        self.src = target["src_path"]

    def title(self):
        what = "unittests" if self.kind in ("lib", "bin") else self.kind
        return f"{what} {os.path.relpath(self.src, self.cwd)} ({os.path.relpath(self.exe)})"

    def env(self):
        env = dict(os.environ)
        env["CARGO_MANIFEST_DIR"] = self.cwd
        return env


def build():
    """Builds every test binary; returns them in cargo's order."""
    cmd = ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit(out.returncode)
    binaries = []
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if (
            msg.get("reason") == "compiler-artifact"
            and msg["profile"]["test"]
            and msg.get("executable")
        ):
            binaries.append(Binary(msg))
    return binaries


def run(binary, out, err):
    """Runs one binary, its output to `out` and `err`; returns whether it passed and its
    seconds."""
    out.write(f"     Running {binary.title()}\n")
    out.flush()
    start = time.monotonic()
    rc = subprocess.call([binary.exe], cwd=binary.cwd, env=binary.env(), stdout=out, stderr=err)
    return rc == 0, time.monotonic() - start


def main():
    binaries = build()
    by_name = {}
    for b in binaries:
        if b.kind == "test":
            by_name.setdefault(b.name, []).append(b)
    lanes = []
    for group in BESIDE:
        missing = [name for name in group if name not in by_name]
        if missing:
            sys.exit(f"run-suite.py: no test binary named {', '.join(missing)}: update BESIDE")
        lanes.append([b for name in group for b in by_name[name]])
    beside = {id(b) for lane in lanes for b in lane}
    failed = []

    results = [None] * len(lanes)

    def run_lane(i, lane, log):
        passed = []
        for b in lane:
            ok, secs = run(b, log, subprocess.STDOUT)
            passed.append((b, ok, secs))
        results[i] = passed

    threads, logs = [], []
    for i, lane in enumerate(lanes):
        log = tempfile.TemporaryFile(mode="w+")
        logs.append(log)
        t = threading.Thread(target=run_lane, args=(i, lane, log))
        t.start()
        threads.append(t)

    sys.stdout.flush()
    for b in binaries:
        if id(b) in beside:
            continue
        ok, _ = run(b, sys.stdout, None)
        if not ok:
            failed.append(b)

    for t in threads:
        t.join()
    for log, passed in zip(logs, results):
        log.seek(0)
        sys.stdout.write(log.read())
        failed.extend(b for b, ok, _ in passed if not ok)
    sys.stdout.flush()

    doc = subprocess.call(["cargo", "test", "--workspace", "--doc"])
    if failed or doc != 0:
        print("\nrun-suite.py: failed:", file=sys.stderr)
        for b in failed:
            print(f"  {b.title()}", file=sys.stderr)
        if doc != 0:
            print("  doc tests", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
