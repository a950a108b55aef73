"""Runs a two-arm campaign built in Python and prints each arm's pass rate.

    python example.py --target localhost:7700 --token-file client.token [--ca-file ca.pem]

The last line printed is a JSON summary (`RESULT {...}`), for scripts and tests.
"""

import argparse
import json
import sys
from collections import Counter

import grpc
from lanes.v1 import types_pb2
from lanes_client import LanesClient, violations


def tasks(n):
    """The task list: plain dicts, with whatever payload the driver needs."""
    return [
        {"id": f"sum-{i:03d}", "group": "arithmetic", "payload": {"a": i, "b": 2 * i}}
        for i in range(n)
    ]


def spec(campaign):
    """The campaign: two arms on the built-in simulator, every other key at its default."""
    return {
        "id": campaign,
        "phase1_runs": 2,
        "schedule_seed": 11,
        "arms": [
            {"id": "baseline", "config": {"model": "small"}},
            {"id": "candidate", "config": {"model": "large"}},
        ],
        "driver": {
            "kind": {
                "sim": {
                    "pass_rate": {"baseline": 0.3, "candidate": 0.8},
                    "agent_s": [0.0, 0.01],
                }
            }
        },
    }


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", default="localhost:7700")
    p.add_argument("--token-file", required=True)
    p.add_argument("--ca-file")
    p.add_argument("--cert-file")
    p.add_argument("--key-file")
    p.add_argument("--campaign", default="python-example")
    p.add_argument("--tasks", type=int, default=12)
    args = p.parse_args()

    token = open(args.token_file).read().strip()
    client = LanesClient(args.target, token, args.ca_file, args.cert_file, args.key_file)
    try:
        submitted = client.submit(spec(args.campaign), tasks(args.tasks))
    except grpc.RpcError as e:
        print(f"submit refused: {e.code().name}: {e.details()}", file=sys.stderr)
        for field, description in violations(e):
            print(f"  {field}: {description}", file=sys.stderr)
        return 1
    print(f"submitted {submitted.id}: {submitted.trials} trials, spec {submitted.spec_hash[:12]}")

    ended = None
    for event in client.watch(submitted.id):
        kind = event.WhichOneof("event")
        if kind == "snapshot":
            total, final = event.snapshot.trials_total, event.snapshot.trials_final
        elif kind == "trial_final":
            final += 1
            print(f"  {final}/{total} trials final")
        elif kind == "campaign_ended":
            ended = event.campaign_ended
            print(f"  campaign ended: {types_pb2.CampaignState.Name(ended.state)}")
    state = client.status(submitted.id)
    print(f"campaign ended: {state.trials_final}/{state.trials_total} final")

    counted, passed = Counter(), Counter()
    rows = 0
    for row in client.rows(submitted.id):
        rows += 1
        if row["counted"]:
            counted[row["arm"]] += 1
            passed[row["arm"]] += bool(row.get("passed"))
    for arm in sorted(counted):
        print(f"  {arm}: {passed[arm]}/{counted[arm]} passed ({passed[arm] / counted[arm]:.0%})")

    report = client.report(submitted.id)
    summary = {
        "campaign": submitted.id,
        "trials": submitted.trials,
        "ended": ended is not None,
        "rows": rows,
        "counted": dict(counted),
        "passed": dict(passed),
        "report": {a["arm"]: [a["passed"], a["counted"]] for a in report["arms"]},
    }
    print("RESULT " + json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
