"""Tests of examples/drivers/lanes_driver.py, the Python driver helper.

Each test starts a small driver built on the helper as a child process and talks JSON-RPC to
it over pipes, as a lane does. Run from the repo root:

    python3 -m unittest discover -s tests/python -v
"""

import json
import os
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ROOT / "examples" / "drivers"

# The driver under test: every method does something a test can observe.
DRIVER_SOURCE = textwrap.dedent("""
    import json
    import os
    import subprocess
    import sys
    sys.dont_write_bytecode = True
    sys.path.insert(0, {drivers!r})
    from lanes_driver import Driver, DriverError

    # With LANES_TEST_SPANS, finished spans are written to that file, one JSON per line.
    if os.environ.get("LANES_TEST_SPANS"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

        class ToFile(SpanExporter):
            def export(self, spans):
                with open(os.environ["LANES_TEST_SPANS"], "a") as f:
                    for s in spans:
                        f.write(json.dumps({{
                            "name": s.name,
                            "trace_id": format(s.context.trace_id, "032x"),
                            "parent": format(s.parent.span_id, "016x") if s.parent else None,
                        }}) + "\\n")
                return 0

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ToFile()))
        trace.set_tracer_provider(provider)

    class Overloaded(Exception):
        failure_kind = "overloaded"      # any exception may name a failure kind

    class TestDriver(Driver):
        name, version, pins = "test-driver", "1.2.3", {{"bench": "unit"}}

        def boot(self, params):
            if params.get("payload", {{}}).get("explode"):
                raise DriverError("boot exploded", failure_kind="boot_failed")
            if params.get("payload", {{}}).get("echo_trace"):
                child = subprocess.run(["sh", "-c", 'printf %s "$TRACEPARENT"'],
                                       capture_output=True, text=True, timeout=5).stdout
                import os
                return {{"env": os.environ.get("TRACEPARENT"), "child": child}}
            return {{}}

        def reset(self, params):
            # A child process inherits fds 0-2: its output must not reach the lane, and
            # `cat` must not swallow the lane's next requests.
            subprocess.run(["sh", "-c", "echo a child wrote this; cat"], timeout=5)
            return {{"verified": True}}

        def gate(self, params):
            print("a stray print must not reach the lane")
            self.log("info", "gate ran")
            return {{"infeasible": False, "turns": 1}}

        def health(self, params):
            raise Overloaded("too busy")

        def evaluate(self, params):
            raise ValueError("evaluator crashed")

        def run_agent(self, params):
            tag = params["attempt"]["tag"]
            cancel = self.cancel_event(tag)
            for turn in range(1, 3001):      # 30 s unless cancelled
                if cancel.wait(0.01):
                    return {{"status": "cancelled", "turns": turn}}
                if turn % 5 == 0:
                    self.progress(tag, turns=turn, message="working")
            return {{"status": "completed", "turns": 3000}}

    if __name__ == "__main__":
        TestDriver.main()
""")

try:
    import opentelemetry.sdk.trace  # noqa: F401  (the driver under test imports it)
    HAS_OTEL_SDK = True
except ImportError:
    HAS_OTEL_SDK = False

WAIT_S = 5.0  # the longest any single answer may take


def attempt(tag):
    return {"campaign": "c", "trial_id": "t", "attempt": 1, "tag": tag}


def env_params(tag, **payload):
    return {"attempt": attempt(tag), "task": "T-1", "arm": "a", "seed": 7, "payload": payload}


class DriverProcess:
    """The driver under test, with a thread reading its stdout into a queue."""

    def __init__(self, script, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=None if env is None else {**os.environ, **env})
        self.lines = queue.Queue()
        self.seen = []  # every message read so far, in order
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # EOF

    def send_raw(self, text):
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def send(self, msg_id, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if msg_id is not None:  # no id: a notification
            msg["id"] = msg_id
        if params is not None:
            msg["params"] = params
        self.send_raw(json.dumps(msg))

    def reply(self, msg_id, within=WAIT_S):
        """The answer to `msg_id`, reading (and keeping) everything before it."""
        for m in self.seen:
            if "method" not in m and m.get("id") == msg_id:
                return m
        deadline = time.monotonic() + within
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer to {msg_id!r} within {within}s: {self.seen}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"driver exited before answering {msg_id!r}: {self.seen}")
            m = json.loads(line)  # every stdout line must be one JSON object
            self.seen.append(m)
            if "method" not in m and m.get("id") == msg_id:
                return m

    def call(self, msg_id, method, params=None):
        self.send(msg_id, method, params)
        return self.reply(msg_id)

    def close(self):
        """Close stdin and wait for the exit; returns (exit code, stderr text)."""
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(WAIT_S)
        return code, self.proc.stderr.read().decode()


class LanesDriverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.script = os.path.join(cls.tmp.name, "test_driver.py")
        with open(cls.script, "w") as f:
            f.write(DRIVER_SOURCE.format(drivers=str(DRIVERS)))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.driver = DriverProcess(self.script)
        self.addCleanup(self._stop)

    def _stop(self):
        if self.driver.proc.poll() is None:
            self.driver.close()
        for f in (self.driver.proc.stdin, self.driver.proc.stdout, self.driver.proc.stderr):
            f.close()

    def initialize(self):
        r = self.driver.call(1, "initialize",
                             {"protocol": "lanes-driver/1", "lane": "lane-1", "host": "h"})
        self.assertEqual(r["result"]["name"], "test-driver")
        return r

    def test_framing_answers_every_request_by_id(self):
        d = self.driver
        # Several requests in one write; ids of any JSON type come back as sent.
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocol": "lanes-driver/1", "lane": "lane-1", "host": "h"}},
            {"jsonrpc": "2.0", "id": "two", "method": "boot", "params": env_params("x")},
            {"jsonrpc": "2.0", "id": 3, "method": "reset", "params": env_params("x")},
            {"jsonrpc": "2.0", "id": 4, "method": "gate", "params": env_params("x")},
            {"jsonrpc": "2.0", "id": 5, "method": "teardown", "params": {"lane": "lane-1"}},
        ]
        d.send_raw("\n".join(json.dumps(m) for m in batch))
        self.assertEqual(d.reply(1)["result"], {
            "name": "test-driver", "version": "1.2.3",
            "pins": {"protocol": "lanes-driver/1", "bench": "unit"}})
        self.assertEqual(d.reply("two")["result"], {})
        self.assertEqual(d.reply(3)["result"], {"verified": True})
        self.assertEqual(d.reply(4)["result"], {"infeasible": False, "turns": 1})
        self.assertEqual(d.reply(5)["result"], {})
        # The gate's log notification arrived; its stray print and the reset's child output
        # went to stderr, not stdout (reply() parses every stdout line as JSON).
        logs = [m for m in d.seen if m.get("method") == "log"]
        self.assertEqual(logs, [{"jsonrpc": "2.0", "method": "log",
                                 "params": {"level": "info", "message": "gate ran"}}])
        for m in d.seen:
            self.assertEqual(m["jsonrpc"], "2.0")
        code, stderr = d.close()
        self.assertEqual(code, 0)
        self.assertIn("a stray print must not reach the lane", stderr)
        self.assertIn("a child wrote this", stderr)

    def test_the_call_traceparent_reaches_the_environment_and_child_processes(self):
        d = self.driver
        self.initialize()
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        params = env_params("x", echo_trace=True)
        params["attempt"]["traceparent"] = tp
        r = d.call(2, "boot", params)
        self.assertEqual(r["result"], {"env": tp, "child": tp})
        # Set only while the call runs: a call without one sees none.
        r = d.call(3, "boot", env_params("x", echo_trace=True))
        self.assertEqual(r["result"], {"env": None, "child": ""})

    @unittest.skipUnless(HAS_OTEL_SDK,
                         "opentelemetry-sdk is not installed (scripts/test.sh runs this "
                         "suite again with the venv that has it)")
    def test_with_opentelemetry_a_method_runs_in_a_child_span_of_the_call(self):
        self._stop()
        spans = os.path.join(self.tmp.name, "spans.jsonl")
        self.driver = DriverProcess(self.script, env={"LANES_TEST_SPANS": spans})
        self.initialize()
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        params = env_params("x")
        params["attempt"]["traceparent"] = tp
        self.assertEqual(self.driver.call(2, "boot", params)["result"], {})
        self.assertEqual(self.driver.call(3, "boot", env_params("x"))["result"], {})
        self.driver.close()
        with open(spans) as f:
            got = [json.loads(line) for line in f]
        # One span, for the call that had a traceparent, and it is that context's child.
        self.assertEqual(got, [{"name": "driver.boot",
                                "trace_id": "0af7651916cd43dd8448eb211c80319c",
                                "parent": "b7ad6b7169203331"}])

    def test_the_helper_run_on_its_own_answers_traced_calls(self):
        # `python3 lanes_driver.py` serves a driver with no benchmark; its tracing helpers
        # must exist by the time it serves (they once came after the `__main__` block).
        self._stop()
        self.driver = DriverProcess(str(DRIVERS / "lanes_driver.py"))
        r = self.driver.call(1, "initialize",
                             {"protocol": "lanes-driver/1", "lane": "lane-1", "host": "h"})
        self.assertEqual(r["result"]["name"], "python-driver")
        params = env_params("x")
        params["attempt"]["traceparent"] = (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        self.assertEqual(self.driver.call(2, "boot", params)["result"], {})
        code, _ = self.driver.close()
        self.assertEqual(code, 0)

    def test_cancel_stops_a_long_agent(self):
        d = self.driver
        self.initialize()
        started = time.monotonic()
        d.send(2, "run_agent", {"attempt": attempt("tok-1"), "task": "T-1", "arm": "a",
                                "arm_config": {}, "payload": {}, "seed": 1,
                                "timeout_s": 30, "max_turns": 10})
        # Other calls are answered while the agent runs.
        self.assertEqual(d.call(3, "boot", env_params("other"))["result"], {})
        time.sleep(0.1)
        d.send(None, "cancel", {"tag": "someone-else"})  # another tag: no effect
        d.send(None, "cancel", {"tag": "tok-1"})
        r = d.reply(2)["result"]
        self.assertEqual(r["status"], "cancelled")
        self.assertLess(r["turns"], 3000)
        self.assertLess(time.monotonic() - started, 5.0)
        progress = [m["params"] for m in d.seen if m.get("method") == "progress"]
        self.assertTrue(progress, "the agent reported progress")
        self.assertTrue(all(p["tag"] == "tok-1" and p["message"] == "working"
                            for p in progress))
        # The cancel notification itself is never answered.
        self.assertEqual([m["id"] for m in d.seen if "method" not in m], [1, 3, 2])

    def test_exceptions_become_errors_with_the_failure_kind(self):
        d = self.driver
        self.initialize()
        e = d.call(2, "boot", env_params("x", explode=True))["error"]
        self.assertEqual(e, {"code": -32000, "message": "boot exploded",
                             "data": {"failure_kind": "boot_failed"}})
        e = d.call(3, "health", {})["error"]
        self.assertEqual(e, {"code": -32000, "message": "too busy",
                             "data": {"failure_kind": "overloaded"}})
        e = d.call(4, "evaluate", env_params("x"))["error"]
        self.assertEqual(e, {"code": -32000, "message": "evaluator crashed"})
        # The driver survives its crashes.
        self.assertEqual(d.call(5, "boot", env_params("x"))["result"], {})
        code, stderr = d.close()
        self.assertEqual(code, 0)
        self.assertIn("ValueError: evaluator crashed", stderr)  # the traceback, on stderr

    def test_declare_infeasible_refuses_unless_implemented(self):
        # A gate verdict without the benchmark's infeasible action cannot be scored: the
        # default answers an error the lane records as harness_error.
        self.initialize()
        e = self.driver.call(2, "declare_infeasible", env_params("x"))["error"]
        self.assertEqual(e["code"], -32000)
        self.assertEqual(e["data"], {"failure_kind": "harness_error"})
        self.assertIn("declare_infeasible", e["message"])

    def test_unknown_method(self):
        e = self.driver.call(7, "frobnicate", {})["error"]
        self.assertEqual(e["code"], -32601)
        self.assertIn("frobnicate", e["message"])

    def test_malformed_lines(self):
        d = self.driver
        d.send_raw("{not json")
        d.send_raw("")  # blank lines are skipped
        d.send_raw("[1, 2]")
        d.send_raw(json.dumps({"id": 2, "method": "boot"}))  # no "jsonrpc": "2.0"
        d.send(3, "boot", [1, 2])
        self.assertEqual(d.call(4, "teardown", {"lane": "l"})["result"], {})
        nulls = [m["error"]["code"] for m in d.seen if m.get("id", 0) is None]
        self.assertEqual(nulls, [-32700, -32600])
        self.assertEqual(d.reply(2)["error"]["code"], -32600)
        self.assertEqual(d.reply(3)["error"]["code"], -32602)

    def test_shutdown_answers_then_exits_0(self):
        d = self.driver
        self.initialize()
        # A running agent is cancelled, and answers, before shutdown does.
        d.send(2, "run_agent", {"attempt": attempt("tok-2"), "task": "T-1", "arm": "a",
                                "arm_config": {}, "payload": {}, "seed": 1,
                                "timeout_s": 30, "max_turns": 10})
        time.sleep(0.05)
        self.assertEqual(d.call(3, "shutdown", {})["result"], {})
        self.assertEqual(d.reply(2)["result"]["status"], "cancelled")
        answers = [m["id"] for m in d.seen if "method" not in m]
        self.assertEqual(answers[-1], 3, "shutdown answers last")
        self.assertEqual(d.proc.wait(WAIT_S), 0)

    def test_eof_exits_0(self):
        self.initialize()
        code, _ = self.driver.close()
        self.assertEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
