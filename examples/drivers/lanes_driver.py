#!/usr/bin/env python3
"""lanes_driver: write a Lanes driver in Python, standard library only (Python 3.11+).

A Lanes driver is a child process of a lane speaking JSON-RPC 2.0 on stdin/stdout, one JSON
object per line (protocol "lanes-driver/1", crates/lane-worker/src/driver/protocol.rs). This
module does the plumbing; a benchmark subclasses `Driver` and overrides what it needs:

    class MyBench(Driver):
        name, version = "my-bench", "1.0.0"

        def run_agent(self, params):
            tag = params["attempt"]["tag"]
            for turn in range(1, 11):
                if self.cancelled(tag):          # the lane sent `cancel` for this attempt
                    return {"status": "cancelled", "turns": turn - 1}
                self.progress(tag, turns=turn)   # ... then one turn of the agent
            return {"status": "completed", "turns": 10}

    if __name__ == "__main__":
        MyBench.main()

Each method gets the request's `params` as a dict and returns its result as a dict (None
means {}). An exception answers with a JSON-RPC error (-32000, the exception text as message,
`data.failure_kind` from the exception's `failure_kind` attribute, see `DriverError`). An
error answer to `run_agent` becomes an infra failure of that kind (default harness_error);
a result says the same more precisely, e.g. {"status": "infra_error", "failure_kind":
"rate_limit", "reset_epoch": ..., "error": "..."}.

Tracing: every per-attempt call carries `params["attempt"]["traceparent"]`, the W3C context of
the lane's span for that phase (`agent` for `run_agent`) when the worker exports OpenTelemetry
traces. While a method runs, the helper puts it in the environment as TRACEPARENT (so child
processes, such as an agent CLI, can join the trace), and, when the `opentelemetry` package is
importable, runs the method inside a span `driver.<method>` that is its child; spans the
method opens itself nest under that one. Exporting those spans is the driver's own
OpenTelemetry SDK setup (for example `opentelemetry-instrument` and the OTEL_* variables).

`run_agent` runs on its own thread, so `cancel` and other calls are read and answered while
an agent runs; every other method runs on the reading thread, one at a time. (The lane waits
for each answer before its next request; do the same when driving a driver by hand.) The helper moves
the protocol pipes aside at start: print() and child processes write to stderr, and child
processes read an empty stdin instead of the lane's requests.
"""

import json
import logging
import os
import sys
import threading
import time

PROTOCOL = "lanes-driver/1"
MAX_LINE_BYTES = 1024 * 1024  # the longest line either side may send

# JSON-RPC error codes (protocol::code).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
DRIVER_ERROR = -32000

# How long `shutdown` (or EOF) waits for cancelled agents to answer before exiting anyway.
STOP_GRACE_S = 5.0

try:                                         # optional: spans of the driver's own work
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator as _Propagator)
except ImportError:                          # the standard library is enough without it
    _otel_trace = None

logger = logging.getLogger("lanes_driver")


class DriverError(Exception):
    """An expected failure of a driver method, optionally naming a failure kind
    (rate_limit, overloaded, auth, boot_failed, reset_unverified, guest_lost,
    evaluator_error, harness_error, ...)."""

    def __init__(self, message, failure_kind=None, code=DRIVER_ERROR):
        super().__init__(message)
        self.failure_kind = failure_kind
        self.code = code


class Driver:
    """Base class of a driver. Override the protocol methods below; keep the rest."""

    # The identity `initialize` reports; it is recorded in every row, and the campaign's
    # [driver.expect] table is checked against `pins`.
    name = "python-driver"
    version = "0.0.0"
    pins = {}

    def __init__(self):
        self.lane = None         # set by `initialize`
        self.host = None
        self._in = None          # the protocol pipes, once `run` took them over
        self._out = None
        self._write_lock = threading.Lock()   # one whole line per write, never interleaved
        self._state_lock = threading.Lock()   # guards _cancels and _agents
        self._cancels = {}       # tag -> threading.Event of the running agent
        self._agents = []        # agent threads, joined on shutdown

    # ------------------------------------------------------------------------------------
    # The protocol methods: override what your benchmark needs.

    def identity(self):
        """The `initialize` result: {name, version, pins}."""
        return {"name": self.name, "version": self.version,
                "pins": {"protocol": PROTOCOL, **self.pins}}

    def boot(self, params):
        """Create the attempt's environment. EnvParams -> {health_url?}."""
        return {}

    def reset(self, params):
        """Put the environment in its initial state and check it. -> {verified}."""
        return {"verified": True}

    def gate(self, params):
        """Decide, read-only, whether the task is feasible before the agent runs.
        EnvParams -> {infeasible, turns, reason?, cost_usd?}. Only an explicit
        `"infeasible": True` skips the agent."""
        return {"infeasible": False, "turns": 0}

    def declare_infeasible(self, params):
        """After an infeasible gate: submit the benchmark's official infeasible action
        (OSWorld's FAIL) in the attempt's environment, so that `evaluate` scores the
        declaration. EnvParams -> {}. The default refuses: an infeasible verdict without
        the official action cannot be scored, so the attempt ends as harness_error."""
        raise DriverError("declare_infeasible is not implemented by this driver",
                          failure_kind="harness_error")

    def run_agent(self, params):
        """Run the agent (on its own thread; poll `self.cancelled(tag)`). -> AgentResult."""
        raise DriverError("run_agent is not implemented", failure_kind="harness_error")

    def evaluate(self, params):
        """Score the attempt. EnvParams -> {score, passed, checks: [{name, passed, ...}]}."""
        raise DriverError("evaluate is not implemented", failure_kind="evaluator_error")

    def health(self, params):
        return {"ok": True}

    def teardown(self, params):
        """Remove one attempt's environment ({lane, tag}) or, without a tag, everything
        this lane's earlier driver processes left behind. Any agent of it is already
        cancelled when this is called."""
        return {}

    # ------------------------------------------------------------------------------------
    # Helpers for subclasses.

    def cancelled(self, tag):
        """True once the lane cancelled the running agent of `tag`."""
        with self._state_lock:
            event = self._cancels.get(tag)
        return event is not None and event.is_set()

    def cancel_event(self, tag):
        """The `threading.Event` set on cancel of `tag`, e.g. for `event.wait(timeout)`."""
        with self._state_lock:
            return self._cancels.get(tag) or threading.Event()

    def progress(self, tag, turns=None, message=None):
        """Send a `progress` notification for an attempt."""
        params = {"tag": tag}
        if turns is not None:
            params["turns"] = turns
        if message is not None:
            params["message"] = message
        self._send({"jsonrpc": "2.0", "method": "progress", "params": params})

    def log(self, level, message):
        """Send a `log` notification to the lane (and write it to stderr too)."""
        logger.log(getattr(logging, level.upper(), logging.INFO), "%s", message)
        self._send({"jsonrpc": "2.0", "method": "log",
                    "params": {"level": level, "message": message}})

    # ------------------------------------------------------------------------------------
    # Serving.

    @classmethod
    def main(cls):
        """Serve a new instance on stdin/stdout and exit with its exit code."""
        sys.exit(cls().run())

    def run(self):
        """Serve until `shutdown` or EOF on stdin; returns the exit code (0)."""
        logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._take_stdio()
        try:
            while True:
                line = self._in.readline()
                if not line:                 # EOF: the lane is gone or done
                    break
                if not self._handle_line(line):
                    return 0                 # `shutdown` already stopped and answered
        except KeyboardInterrupt:
            pass
        self._stop()
        return 0

    def _take_stdio(self):
        # Keep private copies of the protocol pipes, then point fds 0 and 1 elsewhere. A
        # stray print() or a child process (which inherits fds 0-2) then can neither corrupt
        # the protocol stream nor swallow the lane's requests.
        self._in = os.fdopen(os.dup(0), "rb")
        self._out = os.fdopen(os.dup(1), "wb")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        sys.stdout.flush()                   # anything printed before now goes to stderr
        sys.stdout = sys.stderr
        sys.stdin = open(os.devnull)

    def _send(self, message):
        self._write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def _write(self, data):
        if self._out is None:                # not serving (e.g. a helper called in a test)
            sys.stderr.write(data.decode())
            return
        with self._write_lock:
            try:
                self._out.write(data)
                self._out.flush()
            except OSError as e:             # the lane is gone; EOF on stdin will follow
                logger.warning("cannot write to the lane: %s", e)

    def _error(self, msg_id, code, message, failure_kind=None):
        error = {"code": code, "message": message}
        if failure_kind:
            error["data"] = {"failure_kind": failure_kind}
        self._send({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def _handle_line(self, line):
        """Handle one line from the lane; False means stop serving."""
        if len(line.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            self._error(None, INVALID_REQUEST, f"line longer than {MAX_LINE_BYTES} bytes")
            return True
        if not line.strip():
            return True
        try:
            msg = json.loads(line)           # bytes: decoded as UTF-8
        except ValueError as e:              # includes UnicodeDecodeError
            self._error(None, PARSE_ERROR, f"parse error: {e}")
            return True
        if not isinstance(msg, dict):
            self._error(None, INVALID_REQUEST, "a request must be a JSON object")
            return True
        msg_id, method = msg.get("id"), msg.get("method")
        if msg.get("jsonrpc") != "2.0" or not isinstance(method, str):
            self._error(msg_id, INVALID_REQUEST, 'not a JSON-RPC 2.0 request ("jsonrpc": '
                        '"2.0" and a string "method" are required)')
            return True
        params = msg.get("params")
        params = {} if params is None else params
        if "id" not in msg:
            # A notification is never answered; `cancel` is the only one the lane sends.
            if method == "cancel" and isinstance(params, dict):
                self._cancel_call(params)
            return True
        if not isinstance(params, dict):
            self._error(msg_id, INVALID_PARAMS, "invalid params: `params` must be an object")
            return True
        if method == "shutdown":
            self._stop()                     # cancelled agents answer first
            self._send({"jsonrpc": "2.0", "id": msg_id, "result": {}})
            return False
        handler = {
            "initialize": self._initialize, "boot": self.boot, "reset": self.reset,
            "gate": self.gate, "declare_infeasible": self.declare_infeasible,
            "run_agent": self.run_agent, "evaluate": self.evaluate,
            "health": self.health, "teardown": self._teardown, "cancel": self._cancel_call,
        }.get(method)
        if handler is None:
            self._error(msg_id, METHOD_NOT_FOUND, f"method not found: {method}")
        elif method == "run_agent":
            self._start_agent(msg_id, params)
        else:
            self._call(msg_id, method, handler, params)
        return True

    def _call(self, msg_id, method, handler, params):
        """Run one handler and answer: its result, or its exception as an error."""
        try:
            result = _traced(method, params, handler)
            result = {} if result is None else result
            # Encoded here, so a result JSON cannot hold is an error answer too.
            data = json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result},
                              separators=(",", ":")).encode() + b"\n"
        except Exception as e:               # every failure becomes an answer
            if not isinstance(e, DriverError):
                logger.exception("%s failed", method)
            code = e.code if isinstance(e, DriverError) else DRIVER_ERROR
            self._error(msg_id, code, str(e) or type(e).__name__,
                        getattr(e, "failure_kind", None))
            return
        self._write(data)

    def _start_agent(self, msg_id, params):
        attempt = params.get("attempt")
        tag = attempt.get("tag", "") if isinstance(attempt, dict) else ""
        event = threading.Event()

        def agent():
            try:
                self._call(msg_id, "run_agent", self.run_agent, params)
            finally:
                with self._state_lock:
                    if self._cancels.get(tag) is event:
                        del self._cancels[tag]

        # A daemon thread: an agent that ignores cancel cannot keep the process alive.
        thread = threading.Thread(target=agent, name=f"agent-{tag}", daemon=True)
        # Registered before the next line is read, so a `cancel` right after always lands.
        with self._state_lock:
            self._cancels[tag] = event
            self._agents = [t for t in self._agents if t.is_alive()] + [thread]
        thread.start()

    def _cancel(self, which):
        """Set the cancel event of every running agent whose tag `which` accepts."""
        with self._state_lock:
            for tag, event in self._cancels.items():
                if which(tag):
                    event.set()

    def _cancel_call(self, params):
        # The `cancel` notification (or request, answered {}): stop the agent of that tag.
        self._cancel(lambda tag: tag == params.get("tag"))
        return {}

    def _initialize(self, params):
        protocol = params.get("protocol", PROTOCOL)
        if protocol != PROTOCOL:
            raise DriverError(f"unsupported protocol {protocol!r}, expected {PROTOCOL!r}")
        self.lane, self.host = params.get("lane"), params.get("host")
        return self.identity()

    def _teardown(self, params):
        tag = params.get("tag")
        self._cancel(lambda t: tag is None or t == tag)
        return self.teardown(params)

    def _stop(self):
        """Cancel every running agent and wait (bounded) for their answers."""
        self._cancel(lambda tag: True)
        with self._state_lock:
            agents = list(self._agents)
        deadline = time.monotonic() + STOP_GRACE_S
        for thread in agents:
            thread.join(max(0.0, deadline - time.monotonic()))



_env_lock = threading.Lock()


def _traceparent(params):
    attempt = params.get("attempt")
    tp = attempt.get("traceparent") if isinstance(attempt, dict) else None
    return tp if isinstance(tp, str) and tp else None


def _traced(method, params, handler):
    """Run handler(params) with the call's TRACEPARENT set, inside a child span if it can."""
    tp = _traceparent(params)
    if tp is None:
        return handler(params)
    with _env_lock:
        before = os.environ.get("TRACEPARENT")
        os.environ["TRACEPARENT"] = tp
    try:
        if _otel_trace is None:
            return handler(params)
        parent = _Propagator().extract({"traceparent": tp})
        tracer = _otel_trace.get_tracer("lanes_driver")
        with tracer.start_as_current_span(f"driver.{method}", context=parent):
            return handler(params)
    finally:
        with _env_lock:
            if os.environ.get("TRACEPARENT") == tp:
                if before is None:
                    os.environ.pop("TRACEPARENT", None)
                else:
                    os.environ["TRACEPARENT"] = before


if __name__ == "__main__":
    # Run on its own, this is a driver with no benchmark: useful to try the framing by hand.
    Driver.main()
