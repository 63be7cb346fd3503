"""Check a PJRT plugin (.so) against the reference interpreter.

Runs the C API, programs and frameworks checks in worker processes, shows
their progress, and prints a table per area. Exit status: 0 when no check
failed or crashed (unsupported and skipped are not failures), 1 when one
did, 2 for a problem that is not the plugin's: a bad command line (not a
plugin, no suite, bad capabilities, unknown --only) or an environment error
(no client, no device memory) that left checks without a result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from . import report

if TYPE_CHECKING:
    from .capabilities import Capabilities
    from .core import Check

SUITE_UPSTREAM = "https://github.com/openxla/stablehlo"
SUITE_COMMIT = "3c9301c116f97fbaf696959a0ede32712aec587b"
SUITE_HELP = (
    "The programs area runs the StableHLO conformance programs of openxla/stablehlo "
    "(stablehlo/tests/interpret and stablehlo/testdata, commit "
    f"{SUITE_COMMIT[:12]}). Fetch them with:\n"
    f"    git clone --filter=blob:none {SUITE_UPSTREAM} stablehlo-suite && "
    f"git -C stablehlo-suite checkout {SUITE_COMMIT}\n"
    "and pass --suite stablehlo-suite (or set STABLEHLO_SUITE); or leave the area out "
    "with --exclude programs.")


class UsageError(Exception):
    """A problem with the command line: one message, exit status 2."""


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]"
               ) -> argparse.ArgumentParser:
    k: argparse.ArgumentParser = sub.add_parser("check-plugin", help="check a PJRT plugin (.so) against the reference",
                       description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=__doc__.split("\n\n", 1)[1].strip())
    k.add_argument("plugin", help="path of the PJRT plugin shared library (exports GetPjrtApi)")
    k.add_argument("--only", action="append", default=[],
                   help="area (capi, programs, frameworks), area.group or part of a check id; "
                        "repeatable")
    k.add_argument("--exclude", action="append", default=[],
                   help="leave out checks matching like --only; repeatable")
    k.add_argument("--capabilities", help="JSON file declaring what the plugin does not "
                   "support and the client options it needs (docs/plugin-checker.md)")
    k.add_argument("--create-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a PJRT_Client_Create option for every client (repeatable; typed "
                        "bool, int, float, int list 1,2 or string; KEY:TYPE=VALUE forces "
                        "the type: int, float, bool, str, ints)")
    k.add_argument("--suite", help="StableHLO conformance suite folder for the programs area "
                   "(default: $STABLEHLO_SUITE or a shared/stablehlo-suite folder next to a "
                   "source checkout)")
    k.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one check may take before it counts as hung (default 120)")
    k.add_argument("--jobs", "-j", type=int,
                   help="worker processes at once (default: one per CPU, at most 4; one per "
                        "device for an accelerator plugin)")
    k.add_argument("--shard", help="K/N: run the K-th of N interleaved parts of the selected "
                   "checks (for parallel CI jobs; K counts from 1)")
    k.add_argument("--json", help="write the full report as JSON")
    k.add_argument("--md", help="write the report as Markdown")
    k.add_argument("--list", action="store_true", help="list the selected checks and exit")
    k.add_argument("-v", "--verbose", action="store_true",
                   help="print every result as it comes, and skipped checks in the summary")
    return k


def _suite(a: argparse.Namespace) -> str | None:
    """The suite folder; UsageError when --suite names no usable suite."""
    from .context import default_suite
    suite = a.suite or default_suite()
    if suite is None:
        return None
    if not os.path.isdir(suite):
        raise UsageError(f"--suite {suite}: no such folder.\n{SUITE_HELP}")
    from stablehlo_conformance import runner as conf
    try:
        found = conf.find_suites(suite)
    except (OSError, SystemExit) as e:
        raise UsageError(f"--suite {suite}: cannot read it ({e}).\n{SUITE_HELP}") from None
    if not found:
        raise UsageError(f"--suite {suite}: holds no StableHLO conformance programs "
                         f"(no interpret/ or testdata/ folder).\n{SUITE_HELP}")
    return suite


def _names_programs(pat: str) -> bool:
    return pat == "programs" or pat.startswith("programs.")


def _wants_programs(a: argparse.Namespace) -> bool:
    def hit(pats: list[str]) -> bool:
        return any(_names_programs(p) for p in pats)
    return (not a.only or hit(a.only)) and not (a.exclude and hit(a.exclude))


def _select(a: argparse.Namespace, suite: str | None) -> list[Any]:
    from .core import select, shard
    from .registry import build
    if suite is None and _wants_programs(a):
        raise UsageError(f"no StableHLO conformance suite found, so the programs area cannot "
                         f"run.\n{SUITE_HELP}")
    every = list(build(suite).checks.values())
    for pat in a.only + a.exclude:
        # Without a suite the programs area holds no check, and leaving it
        # out is what SUITE_HELP tells the user to do.
        if not select(every, [pat]) and not (suite is None and _names_programs(pat)):
            areas = sorted({c.area for c in every})
            groups = sorted({f"{c.area}.{c.group}" for c in every})
            raise UsageError(f"--only/--exclude {pat!r} matches no check: give an area "
                             f"({', '.join(areas)}), a group ({', '.join(groups)}) or part "
                             "of a check id (stablehlo-ref check-plugin PLUGIN --list lists "
                             "them)")
    checks = select(every, a.only, a.exclude)
    if not checks:
        raise UsageError(f"--only {a.only} --exclude {a.exclude} leaves no check")
    if a.shard:
        try:
            k, n = (int(x) for x in a.shard.split("/"))
            if not 1 <= k <= n:
                raise ValueError
        except ValueError:
            raise UsageError(f"--shard {a.shard}: expected K/N with 1 <= K <= N") from None
        checks = shard(checks, k, n)
    return checks


def _create_options(a: argparse.Namespace, caps: Capabilities) -> dict[str, Any]:
    from .options import parse_option
    opts = dict(caps.create_options)
    for text in a.create_option:
        try:
            key, value = parse_option(text)
        except ValueError as e:
            raise UsageError(str(e)) from None
        opts[key] = value
    return opts


def _probe(path: str, options: dict[str, Any]) -> dict[str, Any]:
    """The plugin's description; UsageError when it is not a plugin or no
    client can be made."""
    from .core import environment_error
    from .probe import run_probe
    meta = run_probe(path, options)
    if "load_error" in meta:
        raise UsageError(f"{path} is not a PJRT plugin: {meta['load_error']}\nfix: pass the "
                         "plugin's shared library, the .so that exports GetPjrtApi (for "
                         "example jax_plugins/xla_cuda13/xla_cuda_plugin.so)")
    if "client_error" in meta:
        why = environment_error("PJRT_Client_Create", meta["client_error"])
        raise UsageError(f"environment: the plugin loaded but cannot create a client: "
                         f"{meta['client_error']}\ncause: {why}")
    return meta


def _defaults(a: argparse.Namespace, meta: dict[str, Any], options: dict[str, Any]
              ) -> tuple[dict[str, Any], int, list[str]]:
    """(create options, jobs, notes): the accelerator-aware defaults for
    what the user left unset."""
    from .options import accelerator_defaults, is_accelerator
    from .runner import default_jobs
    notes = []
    extra, why = accelerator_defaults(meta)
    extra = {k: v for k, v in extra.items() if k not in options}
    if extra:
        notes.append(f"client options by default: {why}")
    jobs = a.jobs or default_jobs()
    if not a.jobs and is_accelerator(meta) and meta.get("devices"):
        jobs = max(1, min(jobs, meta["devices"]))
        notes.append(f"{jobs} worker(s): one per device of the accelerator "
                     f"({', '.join(meta.get('device_kinds', [])) or meta.get('platform')}; "
                     "--jobs overrides)")
    return {**extra, **options}, jobs, notes


def _prepare(a: argparse.Namespace) -> tuple[Any, ...]:
    from .capabilities import Capabilities
    if not os.path.isfile(a.plugin):
        raise UsageError(f"no such file: {a.plugin}")
    if not os.access(a.plugin, os.R_OK):
        raise UsageError(f"cannot read {a.plugin}")
    try:
        caps = Capabilities.load(a.capabilities)
    except OSError as e:
        raise UsageError(f"--capabilities {a.capabilities}: cannot read it: "
                         f"{e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"--capabilities {a.capabilities}: {e}\nfix: see the capabilities "
                         "file format in docs/plugin-checker.md") from None
    options = _create_options(a, caps)
    suite = _suite(a)
    return caps, options, suite, _select(a, suite)


def run(a: argparse.Namespace) -> int:
    try:
        caps, options, suite, checks = _prepare(a)
        if a.list:
            for c in checks:
                print(c.id + (f"  (requires {', '.join(c.requires)})" if c.requires else ""))
            return 0
        path = os.path.abspath(a.plugin)
        meta = _probe(path, options)
    except UsageError as e:
        print(f"stablehlo-ref check-plugin: error: {e}", file=sys.stderr)
        return 2
    if "probe_error" in meta:
        print(f"stablehlo-ref check-plugin: the plugin crashed while loading or creating a "
              f"client: {meta['probe_error']}", file=sys.stderr)
        return 1
    return _run(a, path, meta, caps, options, suite, checks)


def _run(a: argparse.Namespace, path: str, probe: dict[str, Any], caps: Capabilities,
         options: dict[str, Any], suite: str | None, checks: list[Check]) -> int:
    from .progress import Progress
    from .runner import Run
    from .runner import run as run_checks
    options, jobs, notes = _defaults(a, probe, options)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    meta = {"plugin": path, **{k: v for k, v in probe.items() if k != "attributes"},
            "capabilities": caps.to_json(), "create_options": options, "suite": suite,
            "jobs": jobs, **({"shard": a.shard} if a.shard else {})}
    t0 = time.perf_counter()
    with Progress(len(checks), verbose=a.verbose) as prog:
        state = Run(path, caps.to_json(), suite, a.timeout, options, prog.update)
        results = run_checks(path, checks, jobs=jobs, state=state)
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    if state.stopped:
        meta["stopped"] = state.stopped
        meta["not_run"] = len(checks) - len(results)
    print(report.text(results, meta, verbose=a.verbose))
    report.write(results, meta, a.json, a.md)
    return report.exit_status(results, meta)


# ---------------------------------------------------------------------------
# stablehlo-ref bisect MODULE --args ARGS.npz --against PLUGIN.so|outputs.npz
# ---------------------------------------------------------------------------

BISECT_DOC = """Find the first op where a PJRT plugin's result differs from the reference,
descending into while/case/if/call/composite bodies (and into the loop
iteration where the values first differ). Exit status 0 when the outputs
agree, 1 when they differ (the op is printed), 2 for a usage error."""


def add_bisect_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]"
                      ) -> argparse.ArgumentParser:
    b: argparse.ArgumentParser = sub.add_parser("bisect", help="locate the first op where a plugin differs from "
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
    b.add_argument("--create-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a PJRT_Client_Create option for the plugin's client (repeatable; as "
                        "for check-plugin)")
    return b


def run_bisect(a: argparse.Namespace) -> int:
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
        return int(rc)
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
    from .capabilities import Capabilities
    from .context import Context
    from .program_checks import plugin_runner
    try:
        options = _create_options(a, Capabilities())
    except UsageError as e:
        print(f"stablehlo-ref bisect: error: {e}", file=sys.stderr)
        return 2
    ctx = Context(os.path.abspath(a.against), create_options=options)
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
