#!/usr/bin/env python3
"""shellbench: a small, real benchmark driver built on examples/drivers/lanes_driver.py.

Each task (tasks.jsonl) is a shell exercise played in a scratch directory:

    payload = {"kind": "rename_spaces",            # which exercise (the agents key on it)
               "instruction": "...",               # what a real agent would be told
               "files": {"my notes.txt": "..."},   # the starting files, path -> content
               "modes": {"run.sh": "755"},         # optional; files default to 644
               "check": {...}}                     # what evaluate checks, see `evaluate`

- boot      creates the attempt's scratch dir, <root>/<lane>/<tag> (both sanitized), and
            removes the lane's earlier ones (the lane never tears attempts down itself);
- reset     fills it with the starting files and verifies them, byte for byte and mode;
- run_agent runs a scripted "agent" picked by the arm's config (`agent = "careful"` or
            `"naive"`): real `bash -c` commands in the scratch dir, one per turn;
- evaluate  checks the resulting files for real: content, absence, directories, permission
            bits, and the output of commands run in the scratch dir;
- teardown  removes one attempt's dir, or (no tag) every dir of the lane.

The root is $SHELLBENCH_ROOT, or <tmp>/lanes-shellbench. A driver starts with a clean
environment, so set it through the campaign's `[driver] env` to use it. Run the campaign from
the repo root (its driver command is a relative path).

The agents' shells get a minimal environment of their own (never the driver's, which may hold
credentials), and stay in the driver's process group, so they die with the driver whenever the
lane kills it; a cancelled command is stopped with everything it started. To drive it by hand, write one request at a time and
wait for each answer, as a lane does: `run_agent` answers from a thread, so an `evaluate` or
`boot` piped right behind it would run while the agent still works.
"""

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # keep examples/drivers free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "drivers"))
from lanes_driver import Driver, DriverError  # noqa: E402

ROOT = Path(os.environ.get("SHELLBENCH_ROOT") or Path(tempfile.gettempdir()) / "lanes-shellbench")
# The agents' shell environment: nothing of the driver's (whose env may carry credentials) but
# a PATH, and the C locale, so sort order and messages do not depend on the host. HOME is set
# per command to its scratch dir.
AGENT_ENV = {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
             "LC_ALL": "C", "LANG": "C"}
POLL_S = 0.05  # how often a running command looks for cancel and the deadline

# The scripted agents: for each exercise kind, the commands they run, one per turn, after a
# first look around (`ls -la`). The careful agent quotes, uses `--`, handles names with
# spaces, headers and numeric order, but trips over a quoted CSV field (SH-06). The naive one
# makes the usual mistakes: word splitting on `$(ls)`, `wc -w FILE` printing the name, sed
# without `g` and without recursion, a CSV header kept, lexical instead of numeric order.
AGENTS = {
    "careful": {
        "rename_spaces": ['for f in *" "*.txt; do [ -e "$f" ] || continue; '
                          'mv -- "$f" "${f// /_}"; done', "ls -1"],
        "sort_unique": ["sort -u words.txt > unique.txt", "cat unique.txt"],
        "count_words": ['wc -w < essay.txt | tr -d " " > count.txt', "cat count.txt"],
        "make_executable": ["chmod +x bin/*.sh", "ls -l bin"],
        "replace_string": ["find . -type f -name '*.txt' -exec sed -i 's/colour/color/g' {} +",
                           "grep -rn colour . || true"],
        "extract_column": ["tail -n +2 people.csv | cut -d, -f2 > emails.txt", "cat emails.txt"],
        "create_tree": ["mkdir -p project/src project/tests project/docs",
                        "touch project/src/__init__.py", "find project | sort"],
        "concat_parts": ['ls part*.txt | sort -V | while IFS= read -r f; do cat -- "$f"; done'
                         " > all.txt", "rm -- part*.txt", "cat all.txt"],
    },
    "naive": {
        "rename_spaces": ['for f in $(ls *.txt); do mv $f $(echo $f | tr " " _); done', "ls"],
        "sort_unique": ["sort words.txt | uniq > unique.txt"],
        "count_words": ["wc -w essay.txt > count.txt"],
        "make_executable": ["chmod +x bin/*.sh"],
        "replace_string": ["sed -i 's/colour/color/' *.txt"],
        "extract_column": ["cut -d, -f2 people.csv > emails.txt"],
        "create_tree": ["mkdir -p project/src project/tests project/docs && "
                        "touch project/src/__init__.py"],
        "concat_parts": ["cat part*.txt > all.txt && rm part*.txt"],
    },
}

logger = logging.getLogger("shellbench")


def safe_name(text):
    """A directory name for any string: the safe characters, plus a hash so that two
    strings never share a name (`a/b` and `a_b` differ)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:60] or "x"
    return f"{slug}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def inside(base, rel):
    """`base/rel`, refusing paths that are absolute or climb out of `base`."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise DriverError(f"bad path in the task payload: {rel!r}", failure_kind="harness_error")
    return base.joinpath(*parts)


def snapshot(work):
    """{relative path: (content, mode)} of every file under `work`; anything but a regular
    file or a directory shows up as content None."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(work):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath, name)
            rel = path.relative_to(work).as_posix()
            st = path.lstat()
            content = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
            found[rel] = (content, stat.S_IMODE(st.st_mode))
    return found


def agent_env(work):
    return dict(AGENT_ENV, HOME=str(work), TMPDIR=str(work))


def process_tree(root):
    """`root` and its descendants, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def kill_tree(proc):
    """Kills a command and everything it started. The command shares the driver's process
    group (so that the lane's kill of the driver takes it too), so this walks the process
    tree instead: it stops every process of it until no new one appears, then kills them."""
    def send(pid, sig):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    stopped = set()
    for _ in range(10):
        try:
            tree = process_tree(proc.pid)
        except OSError:  # no /proc: the command itself is all there is to reach
            tree = [proc.pid]
        new = [pid for pid in tree if pid not in stopped]
        if not new:
            break
        for pid in new:
            send(pid, signal.SIGSTOP)
            stopped.add(pid)
    for pid in stopped:
        send(pid, signal.SIGKILL)


def check(name, passed, detail=""):
    return {"name": name, "passed": bool(passed), "score": 1.0 if passed else 0.0,
            "detail": detail}


class ShellBench(Driver):
    name = "shellbench"
    version = "0.1.0"

    def identity(self):
        bash = subprocess.run(["bash", "-c", "echo $BASH_VERSION"], capture_output=True,
                              text=True).stdout.strip()
        agents = json.dumps(AGENTS, sort_keys=True).encode()
        self.pins = {"agents_sha256": hashlib.sha256(agents).hexdigest()[:16], "bash": bash,
                     "python": sys.version.split()[0]}
        return super().identity()

    # Where things live.

    def lane_dir(self, lane=None):
        return ROOT / safe_name(lane or self.lane or "no-lane")

    def scratch(self, params):
        return self.lane_dir() / safe_name(params["attempt"]["tag"])

    # The protocol methods.

    def boot(self, params):
        work = self.scratch(params)
        try:
            # One attempt at a time per lane: earlier attempts' dirs are done with.
            if self.lane_dir().is_dir():
                for old in self.lane_dir().iterdir():
                    shutil.rmtree(old) if old.is_dir() else old.unlink()
            work.mkdir(parents=True)
        except OSError as e:
            raise DriverError(f"cannot create the scratch dir: {e}", failure_kind="boot_failed")
        return {}

    def reset(self, params):
        work = self.scratch(params)
        payload = params["payload"]
        files, modes = payload.get("files", {}), payload.get("modes", {})
        want = {}
        for rel, content in files.items():
            inside(work, rel)  # refuse bad paths before touching anything
            want[Path(rel).as_posix()] = (content.encode(), int(modes.get(rel, "644"), 8))
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for rel, (content, mode) in want.items():
            path = inside(work, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        got = snapshot(work)
        if got != want:
            logger.warning("reset of %s not verified: %s", work,
                           sorted(set(got.items()) ^ set(want.items())))
        return {"verified": got == want}

    def run_agent(self, params):
        # An exception here would count as a driver crash: report failures as results.
        try:
            return self.play(params)
        except Exception as e:
            logger.exception("the agent failed")
            return {"status": "infra_error", "failure_kind": "harness_error", "error": str(e)}

    def play(self, params):
        tag = params["attempt"]["tag"]
        work = self.scratch(params)
        agent = (params.get("arm_config") or {}).get("agent")
        if agent not in AGENTS:
            return {"status": "infra_error", "failure_kind": "harness_error",
                    "error": f"arm config `agent` must be one of {sorted(AGENTS)}, got {agent!r}"}
        if not work.is_dir():
            return {"status": "infra_error", "failure_kind": "harness_error",
                    "error": "no scratch dir: boot and reset come first"}
        kind = params["payload"].get("kind")
        script = AGENTS[agent].get(kind)
        if script is None:
            return {"status": "completed", "turns": 0, "runtime_outcome": "no_plan",
                    "final_text": f"The {agent} agent does not know how to do {kind!r}."}
        deadline = time.monotonic() + params.get("timeout_s", 30)
        max_turns = params.get("max_turns", 100)
        turns, failures = 0, 0
        for command in ["ls -la"] + script:
            if turns >= max_turns:
                return {"status": "max_turns", "turns": turns, "runtime_outcome": "max_turns"}
            turns += 1
            self.progress(tag, turns=turns, message=command)
            outcome, code = self.shell(command, work, tag, deadline)
            if outcome != "exited":  # "cancelled" or "timeout"
                return {"status": outcome, "turns": turns, "runtime_outcome": outcome}
            failures += code != 0
        return {"status": "completed", "turns": turns, "runtime_outcome": "end_turn",
                "final_text": f"{agent}: ran {turns} commands, {failures} exited non-zero."}

    def shell(self, command, work, tag, deadline):
        """Run one agent command; ("exited", code), or ("cancelled"|"timeout", None)."""
        logger.info("[%s] $ %s", tag, command)
        proc = subprocess.Popen(["bash", "-c", command], cwd=work, env=agent_env(work),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        while True:
            try:
                output, _ = proc.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                stop = ("cancelled" if self.cancelled(tag)
                        else "timeout" if time.monotonic() > deadline else None)
                if stop:
                    kill_tree(proc)  # the command and its children
                    proc.communicate()
                    logger.info("[%s] %s", tag, stop)
                    return stop, None
        for line in output.splitlines()[:50]:  # the transcript, into driver.stderr
            logger.info("[%s]   %s", tag, line)
        logger.info("[%s] exit %d", tag, proc.returncode)
        return "exited", proc.returncode

    def evaluate(self, params):
        """Runs every check in the payload's `check`:
        files {path: content}, absent [path], dirs [path], executable [path],
        not_executable [path], commands [{run, stdout}] (run with bash in the scratch dir)."""
        work = self.scratch(params)
        spec = params["payload"].get("check") or {}
        if not work.is_dir():
            raise DriverError("no scratch dir to evaluate", failure_kind="evaluator_error")
        checks = []
        for rel, want in spec.get("files", {}).items():
            path = inside(work, rel)
            if not path.is_file() or path.is_symlink():
                checks.append(check(f"content:{rel}", False, "missing"))
                continue
            got = path.read_bytes().decode("utf-8", "replace")
            checks.append(check(f"content:{rel}", got == want,
                                "" if got == want else f"expected {want!r}, got {got[:200]!r}"))
        for rel in spec.get("absent", []):
            path = inside(work, rel)
            checks.append(check(f"absent:{rel}", not path.exists() and not path.is_symlink()))
        for rel in spec.get("dirs", []):
            checks.append(check(f"dir:{rel}", inside(work, rel).is_dir()))
        for rel in spec.get("executable", []) + spec.get("not_executable", []):
            path, want = inside(work, rel), rel in spec.get("executable", [])
            mode = path.stat().st_mode if path.is_file() else None
            ok = mode is not None and bool(mode & stat.S_IXUSR) == want
            name = f"{'' if want else 'not_'}executable:{rel}"
            checks.append(check(name, ok, "missing" if mode is None else oct(stat.S_IMODE(mode))))
        for c in spec.get("commands", []):
            try:
                run = subprocess.run(["bash", "-c", c["run"]], cwd=work, env=agent_env(work),
                                     stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                     timeout=10)
                ok, detail = run.stdout == c["stdout"], f"exit {run.returncode}: {run.stdout!r}"
            except subprocess.TimeoutExpired:
                ok, detail = False, "timed out"
            checks.append(check(f"run:{c['run']}", ok, detail))
        if not checks:
            raise DriverError(f"task {params.get('task')} has no checks",
                              failure_kind="evaluator_error")
        passed = all(c["passed"] for c in checks)
        return {"score": 1.0 if passed else 0.0, "passed": passed, "checks": checks}

    def teardown(self, params):
        lane_dir = self.lane_dir(params.get("lane"))
        tag = params.get("tag")
        target = lane_dir / safe_name(tag) if tag else lane_dir
        shutil.rmtree(target, ignore_errors=True)
        return {}


if __name__ == "__main__":
    ShellBench.main()
