"""``stablehlo-ref check-plugin PATH.so [--only AREA] [--json out.json] [--md out.md]``.

Exit status: 0 when no check failed or crashed (unsupported and skipped are
not failures), 1 otherwise, 2 for a usage error (no such file, bad
capabilities file, unknown area).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import report


def add_parser(sub) -> argparse.ArgumentParser:
    k = sub.add_parser("check-plugin", help="check a PJRT plugin (.so) against the reference",
                       description=__doc__.split("\n\n")[0])
    k.add_argument("plugin", help="path of the PJRT plugin shared library (exports GetPjrtApi)")
    k.add_argument("--only", action="append", default=[],
                   help="area (capi, programs, frameworks), area.group or part of a check id; "
                        "repeatable")
    k.add_argument("--exclude", action="append", default=[],
                   help="leave out checks matching like --only; repeatable")
    k.add_argument("--capabilities", help="JSON file declaring what the plugin does not "
                   "support (see stablehlo_pjrt/checker/capabilities.py)")
    k.add_argument("--suite", help="StableHLO conformance suite folder for the programs area "
                   "(default: $STABLEHLO_SUITE or ../shared/stablehlo-suite)")
    k.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one check may take before it counts as hung (default 120)")
    k.add_argument("--jobs", "-j", type=int,
                   help="worker processes at once (default: one per CPU, at most 4)")
    k.add_argument("--shard", help="K/N: run the K-th of N interleaved parts of the selected "
                   "checks (for parallel CI jobs; K counts from 1)")
    k.add_argument("--json", help="write the full report as JSON")
    k.add_argument("--md", help="write the report as Markdown")
    k.add_argument("--list", action="store_true", help="list the selected checks and exit")
    k.add_argument("-v", "--verbose", action="store_true",
                   help="print every result as it comes, and skipped checks in the summary")
    return k


def plugin_meta(path: str) -> dict:
    """Version and platform of the plugin, read in a subprocess (a plugin
    that aborts while loading must not take the run with it)."""
    import json
    import subprocess

    from .runner import _worker_env
    code = ("import json,sys\nfrom stablehlo_pjrt.checker.plugin import Plugin, Client\n"
            "p=Plugin(sys.argv[1]); p.initialize(); c=Client(p)\n"
            "print(json.dumps({'api_version': '%d.%d' % p.version, 'platform': c.platform_name(),"
            " 'devices': len(c.addressable_devices())}))\nimport os; os._exit(0)\n")
    try:
        p = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                           timeout=120, env=_worker_env())
        return json.loads(p.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001 - the checks report the details
        return {"load_error": str(e)[:300]}


def run(a) -> int:
    from .capabilities import Capabilities
    from .context import default_suite
    from .core import select, shard
    from .registry import build
    from .runner import default_jobs
    from .runner import run as run_checks
    if not os.path.isfile(a.plugin):
        print(f"stablehlo-ref check-plugin: error: no such file: {a.plugin}", file=sys.stderr)
        return 2
    try:
        caps = Capabilities.load(a.capabilities)
    except (OSError, ValueError) as e:
        print(f"stablehlo-ref check-plugin: error: capabilities: {e}", file=sys.stderr)
        return 2
    suite = a.suite or default_suite()
    checks = select(list(build(suite).checks.values()), a.only, a.exclude)
    if not checks:
        print(f"stablehlo-ref check-plugin: error: no check matches --only {a.only}",
              file=sys.stderr)
        return 2
    if a.shard:
        try:
            k, n = (int(x) for x in a.shard.split("/"))
            if not 1 <= k <= n:
                raise ValueError
        except ValueError:
            print(f"stablehlo-ref check-plugin: error: --shard {a.shard}: expected K/N with "
                  "1 <= K <= N", file=sys.stderr)
            return 2
        checks = shard(checks, k, n)
    if a.list:
        for c in checks:
            print(c.id + (f"  (requires {', '.join(c.requires)})" if c.requires else ""))
        return 0
    path = os.path.abspath(a.plugin)
    t0 = time.perf_counter()
    jobs = a.jobs or default_jobs()
    meta = {"plugin": path, **plugin_meta(path), "capabilities": caps.to_json(),
            "suite": suite, "jobs": jobs, **({"shard": a.shard} if a.shard else {})}

    def progress(r):
        if a.verbose:
            print(f"{r.status:11} {r.id}", flush=True)

    results = run_checks(path, checks, caps.to_json(), suite, a.timeout, on_result=progress,
                         jobs=jobs)
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    print(report.text(results, meta, verbose=a.verbose))
    report.write(results, meta, a.json, a.md)
    return 1 if any(r.status in report.BAD for r in results) else 0


# ---------------------------------------------------------------------------
# stablehlo-ref bisect MODULE --args ARGS.npz --against PLUGIN.so|outputs.npz
# ---------------------------------------------------------------------------

BISECT_DOC = """Find the first op where a PJRT plugin's result differs from the reference,
descending into while/case/if/call/composite bodies (and into the loop
iteration where the values first differ). Exit status 0 when the outputs
agree, 1 when they differ (the op is printed), 2 for a usage error."""


def add_bisect_parser(sub) -> argparse.ArgumentParser:
    b = sub.add_parser("bisect", help="locate the first op where a plugin differs from "
                       "the reference", description=BISECT_DOC)
    b.add_argument("module", help="MLIR text, bytecode or portable artifact file")
    b.add_argument("--args", help=".npz (arrays in stored order) or .npy with the inputs")
    b.add_argument("--against", required=True,
                   help="the plugin's .so (run through its C API), or an .npz of its outputs "
                        "(then only the outputs can be compared)")
    b.add_argument("--rtol", type=float)
    b.add_argument("--atol", type=float)
    b.add_argument("--ulp", type=int)
    b.add_argument("--linear", action="store_true",
                   help="run every intermediate at once instead of bisecting")
    return b


def run_bisect(a) -> int:
    import stablehlo_interpreter as shi
    from stablehlo_interpreter import cli as icli
    try:
        with open(a.module, "rb") as f:
            module = f.read()
    except OSError as e:
        print(f"stablehlo-ref bisect: error: cannot read {a.module}: {e.strerror}",
              file=sys.stderr)
        return 2
    if a.against.endswith(".npz") or a.against.endswith(".npy"):
        # An outputs file has no intermediate values to bisect with.
        rc = icli.main(["compare", a.module, "--against", a.against]
                       + (["--args", a.args] if a.args else [])
                       + sum(([f"--{k}", str(getattr(a, k))] for k in ("rtol", "atol", "ulp")
                              if getattr(a, k) is not None), []))
        if rc == 1:
            print("stablehlo-ref bisect: an outputs file holds only the final outputs; to "
                  "locate the op, pass the plugin's .so as --against")
        return rc
    if not os.path.isfile(a.against):
        print(f"stablehlo-ref bisect: error: no such file: {a.against}", file=sys.stderr)
        return 2
    try:
        program = shi.compile(module, name=a.module)
        args = icli.load_args(a.args, program.function(None))
    except icli.UserError as e:
        print(f"stablehlo-ref bisect: error: {e}", file=sys.stderr)
        return 2
    except shi.InterpreterError as e:
        print(f"stablehlo-ref bisect: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    from ..oracle.bisect import first_divergence
    from .context import Context
    from .program_checks import plugin_runner
    ctx = Context(os.path.abspath(a.against))
    runner = plugin_runner(ctx)
    runner.__name__ = os.path.basename(a.against)
    d = first_divergence(module, *args, against=runner, rtol=a.rtol, atol=a.atol, ulp=a.ulp,
                         strategy="linear" if a.linear else "bisect")
    if d is None:
        print(f"the outputs agree with the reference ({a.against})")
        return 0
    print(d)
    if d.inner is not None:
        print("path: " + " > ".join(d.path))
    return 1
