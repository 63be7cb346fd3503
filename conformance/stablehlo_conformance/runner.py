"""The conformance runner: ``python -m stablehlo_conformance SUITE_DIR``.

SUITE_DIR is laid out like the shared suite (``interpret/``, ``testdata/``) or
is a checkout of openxla/stablehlo (``stablehlo/tests/interpret``,
``stablehlo/testdata``). Cases run in worker processes with a per-case
timeout; a worker that dies or hangs is replaced and its case reported as
``error`` / ``timeout``.
"""

import argparse
import collections
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import sys
import time

from . import syntax

STATUSES = ("passed", "failed", "unsupported", "error", "timeout")


# --------------------------------------------------------------------------
# Discovery


def find_suites(root: str) -> dict[str, str]:
    """{"interpret": dir, "testdata": dir} for either layout (missing ones left out)."""
    layouts = [("interpret", "testdata"),
               (os.path.join("stablehlo", "tests", "interpret"),
                os.path.join("stablehlo", "testdata"))]
    for interp, testdata in layouts:
        found = {}
        if os.path.isdir(os.path.join(root, interp)):
            found["interpret"] = os.path.join(root, interp)
        if os.path.isdir(os.path.join(root, testdata)):
            found["testdata"] = os.path.join(root, testdata)
        if found:
            return found
    return {}


def _mlir_files(folder):
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(".mlir"):
                out.append(os.path.relpath(os.path.join(dirpath, f), folder))
    return sorted(out)


_DTYPE_TOKEN = re.compile(
    r"^(bfloat16|float\d+\w*|complex\d+|u?int\d+|bool|f\d+|bf16|[ui]\d+|qi8|"
    r"shape|dtypes|lhs|rhs|dynamic|chlo|\d+)$")


def family(suite, rel, known=None):
    """The op family a file belongs to, for the summary table.

    interpret: the file's path without `.mlir`. testdata: the op prefix of
    the name (dtype and shape suffixes dropped); files in subfolders
    (dynamic/, quantized/) are named `folder/op`, using the longest op of
    ``known`` (families of top-level files) that prefixes their name."""
    rel = rel.replace(os.sep, "/")
    if suite == "interpret":
        return rel[:-len(".mlir")]
    folder, _, name = rel.rpartition("/")
    stem = name[:-len(".mlir")]
    stem = re.sub(r"-?\d{6,}.*$", "", stem)  # hashes of long generated names
    if folder:
        stem = re.sub(r"^vmap_", "", stem)
        if known:
            best = max((f for f in known if stem == f or stem.startswith(f + "_")),
                       key=len, default=None)
            if best:
                return f"{folder}/{best}"
    toks = stem.split("_")
    keep = []
    for t in toks:
        if keep and _DTYPE_TOKEN.match(t):
            break
        keep.append(t)
    fam = "_".join(keep).strip("_") or stem
    return f"{folder}/{fam}" if folder else fam


# --------------------------------------------------------------------------
# Tasks


def interpret_tasks(folder, rel, text):
    """One task per `// -----` chunk; one case per entry function and RUN variant."""
    text = syntax.rewrite(text)
    variants = syntax.interpret_variants(text)
    tasks = []
    for chunk_no, (_, chunk) in enumerate(syntax.split_chunks(text)):
        names = syntax.entry_cases(chunk)
        if not names:
            continue
        cases = []
        for v in variants:
            group = f"RUN {v.number}"
            vcases = []
            for fn in names:
                name = fn if v is variants[0] else f"{fn} [RUN {v.number}]"
                vcases.append({
                    "kind": "interpret", "case": name, "runs": [(0, fn)],
                    "args": v.args, "expect_error": v.expect_error,
                    "print": ("dense" if v.dense else "tensor") if v.prefixes else None,
                    "group": group, "checks": None})
            if v.prefixes:
                directives = syntax.check_directives(chunk, v.prefixes)
                if directives:
                    vcases[-1]["checks"] = directives
            cases.extend(vcases)
        tasks.append({"suite": "interpret", "file": rel, "chunks": [chunk],
                      "cases": cases})
    return tasks


def testdata_tasks(folder, rel, text):
    """One task and one case per file."""
    kind = "dynamic" if rel.replace(os.sep, "/").startswith("dynamic/") else "testdata"
    if kind == "dynamic":
        return [{"suite": "testdata", "file": rel, "chunks": [text],
                 "cases": [{"kind": "dynamic", "case": None}]}]
    chunks, runs = [], []
    for _, chunk in syntax.split_chunks(syntax.rewrite(text)):
        names = syntax.entry_cases(chunk)
        if not names:
            continue
        for fn in names:
            runs.append((len(chunks), fn))
        chunks.append(chunk)
    if not runs:
        raise ValueError("no function to run (no @main, no public function "
                         "without arguments)")
    m = re.search(r"//\s*RUN-DISABLED(\([^)]*\))?", text)
    note = f"[disabled upstream{': ' + m.group(1)[1:-1] if m.group(1) else ''}]" if m else None
    return [{"suite": "testdata", "file": rel, "chunks": chunks, "note": note,
             "cases": [{"kind": "testdata", "case": None, "runs": runs}]}]


def collect(root, only=(), suites=("interpret", "testdata")):
    """(tasks, load_errors) for the suite folder."""
    found = find_suites(root)
    if not found:
        raise SystemExit(f"error: {root}: no interpret/ or testdata/ folder (nor "
                         "stablehlo/tests/interpret, stablehlo/testdata)")
    tasks, results = [], []
    for suite in suites:
        folder = found.get(suite)
        if folder is None:
            continue
        for rel in _mlir_files(folder):
            if only and not any(o in rel for o in only):
                continue
            path = os.path.join(folder, rel)
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                make = interpret_tasks if suite == "interpret" else testdata_tasks
                tasks.extend(make(folder, rel, text))
            except Exception as e:  # unreadable or unsplittable file
                results.append(_result(suite, rel, None, "error", 0.0,
                                       f"cannot prepare file: {type(e).__name__}: {e}"))
    return tasks, results


def _result(suite, rel, case, status, seconds, message):
    return {"suite": suite, "file": rel.replace(os.sep, "/"), "case": case,
            "status": status, "seconds": round(float(seconds), 4), "message": message}


# --------------------------------------------------------------------------
# Scheduling


def _mp_context():
    # Fork is cheap when this process has not loaded jaxlib (the normal case:
    # the parent only reads text); otherwise start clean interpreters.
    if "jaxlib" in sys.modules or "jax" in sys.modules:
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("fork")


def _worker_entry(conn, memory_limit_mb):
    from .worker import serve
    serve(conn, memory_limit_mb)


class _Worker:
    def __init__(self, ctx, memory_limit_mb=0):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_entry, args=(child, memory_limit_mb),
                                daemon=True)
        self.proc.start()
        child.close()
        self.task = None
        self.case = None
        self.deadline = None
        self.started = None

    def assign(self, task, timeout):
        self.task = task
        self.case = None
        self.started = time.monotonic()
        # Until the first case starts, charge the wait (import, startup) to it.
        self.deadline = self.started + timeout + 30.0
        self.conn.send(task)

    def kill(self):
        try:
            self.proc.kill()
        except Exception:
            pass
        self.proc.join(5)
        try:
            self.conn.close()
        except Exception:
            pass


def run_tasks(tasks, jobs, timeout, on_result, memory_limit_mb=0):
    """Run ``tasks`` on ``jobs`` workers; calls ``on_result(result_dict)``."""
    mp = _mp_context()

    def new_worker():
        return _Worker(mp, memory_limit_mb)

    pending = collections.deque(tasks)
    workers = []
    n = max(1, min(jobs, len(tasks)))
    try:
        workers = [new_worker() for _ in range(n)]
        while pending or any(w.task is not None for w in workers):
            for i, w in enumerate(workers):
                if w.task is None and pending:
                    try:
                        w.assign(pending.popleft(), timeout)
                    except (OSError, BrokenPipeError):
                        pending.appendleft(w.task)
                        w.kill()
                        workers[i] = new_worker()
            busy = [w for w in workers if w.task is not None]
            if not busy:
                continue
            now = time.monotonic()
            wait = max(0.0, min(w.deadline for w in busy) - now)
            ready = multiprocessing.connection.wait([w.conn for w in busy],
                                                    timeout=min(wait, 1.0))
            for i, w in enumerate(workers):
                if w.task is None:
                    continue
                if w.conn in ready:
                    if not _drain(w, timeout, on_result):
                        _lost(w, "error", _death_message(w), timeout, pending, on_result)
                        workers[i] = new_worker()
                elif time.monotonic() > w.deadline:
                    _lost(w, "timeout", f"timed out after {timeout:g} s", timeout,
                          pending, on_result)
                    workers[i] = new_worker()
    finally:
        for w in workers:
            try:
                w.conn.send(None)
            except Exception:
                pass
        for w in workers:
            w.proc.join(2)
            if w.proc.is_alive():
                w.kill()


def _drain(w, timeout, on_result):
    """Handle every message waiting on ``w``; False if the worker died."""
    try:
        while w.conn.poll():
            msg = w.conn.recv()
            if msg[0] == "start":
                w.case = msg[1]
                w.started = time.monotonic()
                w.deadline = w.started + timeout
            elif msg[0] == "result":
                _, i, status, seconds, message = msg
                c = w.task["cases"][i]
                on_result(_result(w.task["suite"], w.task["file"], c["case"], status,
                                  seconds, message))
                w.case = None
            elif msg[0] == "done":
                w.task = None
                w.case = None
                return True
    except (EOFError, OSError):
        return False
    return True


def _death_message(w):
    w.proc.join(1)
    code = w.proc.exitcode
    if code is not None and code < 0:
        import signal
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = str(-code)
        return f"worker process died (signal {sig})"
    return f"worker process died (exit code {code})"


def _lost(w, status, message, timeout, pending, on_result):
    """The worker hung or died: report its current case, requeue the rest."""
    task = w.task
    i = w.case if w.case is not None else 0
    cases = task["cases"]
    seconds = time.monotonic() - (w.started or time.monotonic())
    on_result(_result(task["suite"], task["file"], cases[i]["case"], status,
                      seconds if status != "timeout" else timeout, message))
    rest = cases[i + 1:]
    if rest:
        pending.appendleft(dict(task, cases=rest))
    w.task = None
    w.kill()


# --------------------------------------------------------------------------
# Reporting


def summarize(results):
    """{suite: {family: Counter(status)}}"""
    table = {}
    known = {family("testdata", r["file"]) for r in results
             if r["suite"] == "testdata" and "/" not in r["file"]}
    for r in results:
        fam = family(r["suite"], r["file"], known)
        table.setdefault(r["suite"], {}).setdefault(fam, collections.Counter())[r["status"]] += 1
    return table


def format_table(results, wall, families=True):
    lines = []
    table = summarize(results)
    head = f"{'family':<40} " + " ".join(f"{s:>11}" for s in STATUSES) + f" {'total':>7}"
    grand = collections.Counter()
    for suite in ("interpret", "testdata"):
        if suite not in table:
            continue
        fams = table[suite]
        total = collections.Counter()
        for c in fams.values():
            total.update(c)
        grand.update(total)
        lines.append(f"== {suite} ==")
        if families:
            lines.append(head)
            for fam in sorted(fams):
                c = fams[fam]
                lines.append(f"{fam[:40]:<40} " + " ".join(f"{c[s]:>11}" for s in STATUSES)
                             + f" {sum(c.values()):>7}")
        lines.append(f"{'TOTAL ' + suite:<40} " + " ".join(f"{total[s]:>11}" for s in STATUSES)
                     + f" {sum(total.values()):>7}")
        lines.append("")
    lines.append(f"{'ALL':<40} " + " ".join(f"{grand[s]:>11}" for s in STATUSES)
                 + f" {sum(grand.values()):>7}")
    lines.append(f"wall time: {wall:.1f} s")
    return "\n".join(lines)


def _first_lines(msg, n=6):
    ls = msg.splitlines()
    return "\n".join(ls[:n]) + (f"\n    ... ({len(ls) - n} more lines)" if len(ls) > n else "")


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m stablehlo_conformance",
        description="Run the StableHLO conformance files on the reference interpreter.")
    p.add_argument("suite_dir", help="folder with interpret/ and testdata/ "
                   "(or a checkout of openxla/stablehlo)")
    p.add_argument("--only", action="append", default=[], metavar="SUBSTR",
                   help="only files whose path (relative to the suite folder) "
                        "contains SUBSTR (repeatable)")
    p.add_argument("--suite", choices=("interpret", "testdata"), action="append",
                   help="run only this suite (repeatable; default: both)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: number of cores)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds per case (default 10)")
    p.add_argument("--memory-limit", type=int, default=4096, metavar="MB",
                   help="address-space limit per worker in MB (0: none; default 4096)")
    p.add_argument("--json", metavar="FILE", help="write one object per case to FILE")
    p.add_argument("--failures", action="store_true",
                   help="print every case that did not pass, with its message")
    p.add_argument("--totals", action="store_true",
                   help="print only the totals, not the per-family table")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each case's status as it finishes")
    p.add_argument("--numerics", choices=("spec", "accurate"), default="spec",
                   help="the interpreter's numerics mode (default spec: the suite's "
                        "expected values are the reference interpreter's element-type, "
                        "sequential results; see docs/numerics.md)")
    a = p.parse_args(argv)

    t0 = time.monotonic()
    tasks, results = collect(a.suite_dir, a.only, tuple(a.suite or ("interpret", "testdata")))
    for t in tasks:
        t["numerics"] = a.numerics

    def on_result(r):
        results.append(r)
        if a.verbose:
            name = r["file"] + (f" @{r['case']}" if r["case"] else "")
            print(f"{r['status']:>11}  {name}  ({r['seconds']:.2f} s)", flush=True)

    run_tasks(tasks, a.jobs, a.timeout, on_result, a.memory_limit)
    wall = time.monotonic() - t0
    order = {(t["suite"], t["file"]): i for i, t in enumerate(tasks)}
    results.sort(key=lambda r: (r["suite"] != "interpret", order.get((r["suite"], r["file"]), -1),
                                r["file"]))
    if a.failures:
        for r in results:
            if r["status"] != "passed":
                name = r["file"] + (f" @{r['case']}" if r["case"] else "")
                print(f"[{r['status']}] {r['suite']}/{name}\n    "
                      + _first_lines(r["message"]).replace("\n", "\n    "))
        print()
    print(format_table(results, wall, families=not a.totals))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0
