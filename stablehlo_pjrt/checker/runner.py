"""Runs checks in subprocesses so that a plugin abort or hang is a result.

The checks of one area run in batches in one worker process each (loading a
plugin and creating a client once per batch, as a framework would). If the
worker dies (signal, abort, exit) or exceeds its time, the check that was
running is re-run alone in a fresh process: if it dies again it is
``crashed`` (with the signal or exit status and the last lines of stderr);
the checks after it in the batch go on in a new batch. With ``jobs`` > 1,
that many workers run at once, each on its own batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

from .. import config
from .core import Check, Result

BATCH = {"capi": 40, "programs": 150, "frameworks": 20}


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


def _run_batch(plugin: str, checks: list[Check], capabilities: dict, suite: str | None,
               timeout: float) -> tuple[dict, str | None, str]:
    """({id: Result}, id running when the process died or None, death description)."""
    with tempfile.TemporaryDirectory(prefix="pjrt-check-") as tmp:
        out = os.path.join(tmp, "results.jsonl")
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w", encoding="utf-8") as f:
            json.dump({"plugin": plugin, "ids": [c.id for c in checks], "out": out,
                       "capabilities": capabilities, "suite": suite}, f)
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
        results, running = {}, None
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                for line in f:
                    try:
                        d = json.loads(line)
                    except ValueError:
                        continue  # a line cut short by the crash
                    if "start" in d:
                        running = d["start"]
                    else:
                        results[d["id"]] = Result.from_json(d)
                        running = None
        death = ""
        if running is not None or len(results) < len(checks):
            with open(err_path, "rb") as f:
                tail = f.read()[-1500:].decode("utf-8", "replace").strip()
            death = _describe_exit(p.returncode, timed_out, budget)
            if tail:
                death += "; stderr ends with:\n" + tail
            if running is None:
                # Died before starting its first check (loading the plugin).
                running = next((c.id for c in checks if c.id not in results), None)
        return results, running, death


def _worker_env() -> dict:
    env = config.child_environ()
    # The worker must import this package even from a source checkout.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parts = [root, os.path.join(root, "interpreter"), os.path.join(root, "conformance")]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def _run_chunk(plugin, chunk, capabilities, suite, timeout, report) -> None:
    """Runs ``chunk`` (checks of one area) in batches until each has a
    result: a check that dies with its batch is re-run alone, the checks
    after it go on in a new batch."""
    pending = list(chunk)
    while pending:
        results, running, death = _run_batch(plugin, pending, capabilities, suite, timeout)
        for c in pending:
            if c.id in results:
                report(results[c.id])
        if running is None:
            return
        crashed = next(c for c in pending if c.id == running)
        if len(pending) > 1:
            # Alone in a fresh process: a crash there is the check's own.
            again, _, death2 = _run_batch(plugin, [crashed], capabilities, suite, timeout)
            if crashed.id in again:
                r = again[crashed.id]
                r.notes.append("crashed the process when run after other checks of "
                               f"its batch ({death.splitlines()[0]}); alone it gives "
                               "this result")
            else:
                r = Result(crashed.id, crashed.area, crashed.group, "crashed", death2)
        else:
            r = Result(crashed.id, crashed.area, crashed.group, "crashed", death)
        report(r)
        pending = [c for c in pending if c.id not in results and c.id != crashed.id]


def default_jobs() -> int:
    """Worker processes at once: one per CPU, at most 4 (each loads the
    plugin and JAX: a few hundred MB)."""
    return max(1, min(4, os.cpu_count() or 1))


def run(plugin: str, checks: list[Check], capabilities: dict | None = None,
        suite: str | None = None, timeout: float = 120.0, on_result=None,
        batch: dict | None = None, jobs: int = 1) -> list[Result]:
    """Runs ``checks`` against the plugin at ``plugin``; returns their results
    in the order given. ``on_result(result)`` is called as each is known.
    ``jobs`` worker processes run at once (each on its own batch)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    capabilities = capabilities or {}
    sizes = dict(BATCH, **(batch or {}))
    by_id: dict = {}
    lock = threading.Lock()

    def report(r: Result) -> None:
        with lock:
            by_id[r.id] = r
            if on_result:
                on_result(r)

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
            _run_chunk(plugin, chunk, capabilities, suite, timeout, report)
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for f in [pool.submit(_run_chunk, plugin, chunk, capabilities, suite, timeout,
                                  report) for chunk in chunks]:
                f.result()
    return [by_id[c.id] for c in checks]
