"""Runs checks in subprocesses so that a plugin abort or hang is a result.

The checks of one area run in batches in one worker process each (loading a
plugin and creating a client once per batch, as a framework would). If the
worker dies (signal, abort, exit) or exceeds its time, the check that was
running is re-run alone in a fresh process: if it dies again it is
``crashed`` (with the signal or exit status and the last lines of stderr);
the checks after it in the batch go on in a new batch. With ``jobs`` > 1,
that many workers run at once, each on its own batch.

An environment ``error`` (no client, no memory: core.environment_error)
ends its batch; the rest of the batch is retried in a new one, since another
worker may have freed the device. When the same environment error has come
back :data:`STOP_AFTER` times the run stops: the checks not run are left
out of the results and :attr:`Run.stopped` says why. Every client is created
with the run's create options.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any, Callable

from .. import config
from .core import Check, Result, environment_key

BATCH = {"capi": 40, "programs": 150, "frameworks": 20}
STOP_AFTER = 3


def _describe_exit(rc: int | None, timed_out: bool, timeout: float) -> str:
    if timed_out:
        return f"did not finish within {timeout:g} s (hung; the process was killed)"
    if rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"the process died with {name}"
    return f"the process exited with status {rc} before reporting a result"


def _run_batch(plugin: str, checks: list[Check], capabilities: dict[str, Any], suite: str | None,
               timeout: float, create_options: dict[str, Any] | None = None
               ) -> tuple[dict[str, Result], str | None, str, str | None]:
    """({id: Result}, id running when the process died or None, death
    description, the environment error that stopped the batch or None)."""
    with tempfile.TemporaryDirectory(prefix="pjrt-check-") as tmp:
        out = os.path.join(tmp, "results.jsonl")
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w", encoding="utf-8") as f:
            json.dump({"plugin": plugin, "ids": [c.id for c in checks], "out": out,
                       "capabilities": capabilities, "suite": suite,
                       "create_options": create_options or {}}, f)
        err_path = os.path.join(tmp, "stderr")
        budget = timeout * (1 + len(checks) / 4)
        with open(err_path, "wb") as err:
            p = subprocess.Popen([sys.executable, "-m", "stablehlo_pjrt.checker.worker", spec],
                                 stdout=subprocess.DEVNULL, stderr=err,
                                 env=_worker_env(), start_new_session=True)
            timed_out = False
            try:
                p.wait(budget)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        results: dict[str, Result] = {}
        running: str | None = None
        stop: str | None = None
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                for line in f:
                    try:
                        d = json.loads(line)
                    except ValueError:
                        continue  # a line cut short by the crash
                    if "stop" in d:
                        stop = d["stop"]
                    elif "start" in d:
                        running = d["start"]
                    else:
                        results[d["id"]] = Result.from_json(d)
                        running = None
        death = ""
        if stop is not None:
            return results, None, "", stop
        if running is not None or len(results) < len(checks):
            with open(err_path, "rb") as f:
                tail = f.read()[-1500:].decode("utf-8", "replace").strip()
            death = _describe_exit(p.returncode, timed_out, budget)
            if tail:
                death += "; stderr ends with:\n" + tail
            if running is None:
                # Died before starting its first check (loading the plugin).
                running = next((c.id for c in checks if c.id not in results), None)
        return results, running, death, None


def _worker_env() -> dict[str, Any]:
    env = config.child_environ()
    # The worker must import this package even from a source checkout.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parts = [root, os.path.join(root, "interpreter"), os.path.join(root, "conformance")]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


class Run:
    """One run's shared state: the results so far, the environment errors
    seen (by key) and whether the run stopped on them."""

    def __init__(self, plugin: str, capabilities: dict[str, Any], suite: str | None, timeout: float,
                 create_options: dict[str, Any] | None,
                 on_result: Callable[[Result], None] | None = None) -> None:
        import threading
        self.plugin, self.capabilities, self.suite = plugin, capabilities, suite
        self.timeout, self.create_options, self.on_result = timeout, create_options, on_result
        self.by_id: dict[str, Result] = {}
        self.env_errors: dict[str, int] = {}
        self.stopped: str | None = None
        self._lock = threading.Lock()

    def report(self, r: Result) -> None:
        with self._lock:
            self.by_id[r.id] = r
            if self.on_result:
                self.on_result(r)

    def environment(self, detail: str) -> None:
        """Counts an environment error; the run stops at STOP_AFTER of one kind."""
        with self._lock:
            key = environment_key(detail)
            self.env_errors[key] = n = self.env_errors.get(key, 0) + 1
            if n >= STOP_AFTER and self.stopped is None:
                self.stopped = (f"stopped early: the same environment error came back {n} "
                                f"times:\n{detail}")

    def batch(self, checks: list[Check]
              ) -> tuple[dict[str, Result], str | None, str, str | None]:
        return _run_batch(self.plugin, checks, self.capabilities, self.suite, self.timeout,
                          self.create_options)

    def chunk(self, chunk: list[Check]) -> None:
        """Runs ``chunk`` (checks of one area) in batches until each has a
        result: a check that dies with its batch is re-run alone, the checks
        after it go on in a new batch."""
        pending = list(chunk)
        while pending and self.stopped is None:
            results, running, death, stop = self.batch(pending)
            for c in pending:
                if c.id in results:
                    self.report(results[c.id])
            if stop is not None:
                self.environment(stop)
                pending = [c for c in pending if c.id not in results]
                continue
            if running is None:
                return
            crashed = next(c for c in pending if c.id == running)
            self.report(self._crashed(crashed, death, len(pending) > 1))
            pending = [c for c in pending if c.id not in results and c.id != crashed.id]

    def _crashed(self, crashed: Check, death: str, others: bool) -> Result:
        if not others:
            return Result(crashed.id, crashed.area, crashed.group, "crashed", death)
        # Alone in a fresh process: a crash there is the check's own.
        again, _, death2, _ = self.batch([crashed])
        if crashed.id not in again:
            return Result(crashed.id, crashed.area, crashed.group, "crashed", death2)
        r = again[crashed.id]
        r.notes.append("crashed the process when run after other checks of "
                       f"its batch ({death.splitlines()[0]}); alone it gives "
                       "this result")
        return r


def default_jobs() -> int:
    """Worker processes at once: one per CPU, at most 4 (each loads the
    plugin and JAX: a few hundred MB)."""
    return max(1, min(4, os.cpu_count() or 1))


def run(plugin: str, checks: list[Check], capabilities: dict[str, Any] | None = None,
        suite: str | None = None, timeout: float = 120.0,
        on_result: Callable[[Result], None] | None = None,
        batch: dict[str, Any] | None = None, jobs: int = 1, create_options: dict[str, Any] | None = None,
        state: Run | None = None) -> list[Result]:
    """Runs ``checks`` against the plugin at ``plugin``; returns their results
    in the order given (without the checks a stopped run did not reach:
    ``state.stopped`` says why). ``on_result(result)`` is called as each is
    known. ``jobs`` worker processes run at once (each on its own batch);
    every client is created with ``create_options``."""
    from concurrent.futures import ThreadPoolExecutor
    state = state or Run(plugin, capabilities or {}, suite, timeout, create_options, on_result)
    sizes = dict(BATCH, **(batch or {}))
    areas: dict[str, list[Check]] = {}
    for c in checks:
        areas.setdefault(c.area, []).append(c)
    chunks = []
    for area, todo in areas.items():
        size = sizes.get(area, 40)
        if jobs > 1:
            # Enough batches to keep every worker busy to the end.
            size = max(1, min(size, -(-len(todo) // (2 * jobs))))
        chunks += [todo[k:k + size] for k in range(0, len(todo), size)]
    if jobs <= 1 or len(chunks) == 1:
        for chunk in chunks:
            state.chunk(chunk)
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for f in [pool.submit(state.chunk, chunk) for chunk in chunks]:
                f.result()
    return [state.by_id[c.id] for c in checks if c.id in state.by_id]
