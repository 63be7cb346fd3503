"""The benchmark runner: one process per system, results as JSON and markdown."""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from stablehlo_pjrt import config

from . import torch_step
from .worker import MARK
from .workloads import BY_NAME, WORKLOADS

# torch: PyTorch/XLA training steps (torch_step.py), its own table.
SYSTEMS = ("ref", "cpu", "cpp", "torch")
JAX_SYSTEMS = ("ref", "cpu", "cpp")
SYSTEM_TITLES = {"ref": "stablehlo_ref (ours)", "cpu": "XLA CPU",
                 "cpp": "C++ interpreter"}
PLATFORM_ENV = {"ref": "stablehlo_ref", "cpu": "cpu", "cpp": "cpu"}
RESULTS_DIR = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------
# Machine description


def machine_info():
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            info["memory_gb"] = round(kb / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        info["load_avg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        import jax
        import jaxlib
        import numpy as np
        info["jax"] = jax.__version__
        info["jaxlib"] = jaxlib.__version__
        info["numpy"] = np.__version__
    except Exception:  # pragma: no cover - jax is a dependency
        pass
    environ = config.child_environ()
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                "OMP_NUM_THREADS", "XLA_FLAGS"):
        if environ.get(key):
            info.setdefault("env", {})[key] = environ[key]
    return info


# --------------------------------------------------------------------------
# Running the workers


def _parse_lines(text):
    recs = []
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                recs.append(json.loads(line[len(MARK):]))
            except ValueError:
                pass
    return recs


def _worker_cmd(system, names, args):
    cmd = [sys.executable, "-m", "benchmarks.worker", system, *names,
           "--repeats", str(args.repeats), "--budget", str(args.budget)]
    if args.quick:
        cmd.append("--quick")
    return cmd


def _env(system):
    env = config.child_environ()
    env["JAX_PLATFORMS"] = PLATFORM_ENV[system]
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(cmd, system, timeout):
    """Run a worker; returns (records, error text or None, timed_out)."""
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=_env(system), capture_output=True, text=True,
                           timeout=timeout)
        out, err, timed_out, rc = p.stdout, p.stderr, False, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        timed_out, rc = True, None
    recs = _parse_lines(out)
    problem = None
    if rc not in (0, None):
        tail = "\n".join(err.strip().splitlines()[-5:])
        problem = f"exit code {rc}: {tail}"[-600:]
    return recs, problem, timed_out, time.perf_counter() - t


def run_system(system, names, args, log):
    """Returns {name: record} for one system."""
    results = {}
    if system == "cpp":
        # One process per workload: the interpreter may abort or take minutes.
        for name in names:
            log(f"  cpp {name} ...")
            recs, problem, timed_out, _ = _run(_worker_cmd("cpp", [name], args), "cpp",
                                               args.cpp_timeout)
            if recs:
                results[name] = recs[0]
            elif timed_out:
                results[name] = {"name": name, "system": "cpp", "status": "timeout",
                                 "timeout_s": args.cpp_timeout}
            else:
                results[name] = {"name": name, "system": "cpp", "status": "error",
                                 "error": problem or "no result"}
            _log_record(log, results[name])
        return results
    log(f"  {system}: {', '.join(names)}")
    recs, problem, timed_out, elapsed = _run(_worker_cmd(system, names, args), system,
                                             args.timeout)
    for r in recs:
        results[r["name"]] = r
        _log_record(log, r)
    for name in names:
        if name not in results:
            status = "timeout" if timed_out else "error"
            results[name] = {"name": name, "system": system, "status": status,
                             "error": problem or ("process timed out" if timed_out
                                                  else "no result")}
            if timed_out:
                results[name]["timeout_s"] = args.timeout
            _log_record(log, results[name])
            timed_out = False  # only the workload that was running timed out
    return results


def _log_record(log, r):
    if r["status"] == "ok":
        log(f"    {r['system']:>3} {r['name']:<18} {fmt_time(r['median_s']):>10}"
            f"  ({r['repeats']} runs)")
    else:
        log(f"    {r['system']:>3} {r['name']:<18} {r['status']}: {r.get('error', '')[:200]}")


# --------------------------------------------------------------------------
# Checks and ratios


def outputs_agree(a, b, rtol=2e-3):
    """Do two output fingerprints describe the same values (up to rounding)?
    NaN counts are compared where the fingerprints carry them (cliffs.py's)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x["shape"] != y["shape"] or x.get("nan") != y.get("nan"):
            return False
        scale = max(x["absum"], y["absum"], 1e-30)
        if abs(x["sum"] - y["sum"]) > rtol * scale + 1e-6:
            return False
        if abs(x["absum"] - y["absum"]) > rtol * scale + 1e-6:
            return False
    return True


def summarize(name, per_system):
    w = BY_NAME[name]
    entry = {"name": name, "description": w.description, "inner": w.inner,
             "steps": w.steps, "systems": {}}
    for system, rec in per_system.items():
        r = {k: v for k, v in rec.items() if k not in ("outputs", "name", "system",
                                                        "traceback")}
        entry["systems"][system] = r
    ref, cpu, cpp = (per_system.get(s) for s in JAX_SYSTEMS)
    ok = lambda r: r is not None and r["status"] == "ok"  # noqa: E731
    ratios = {}
    if ok(ref) and ok(cpu):
        ratios["ref_over_cpu"] = ref["median_s"] / cpu["median_s"]
    if ok(ref) and ok(cpp):
        ratios["cpp_over_ref"] = cpp["median_s"] / ref["median_s"]
    elif ok(ref) and cpp is not None and cpp["status"] == "timeout":
        ratios["cpp_over_ref_lower_bound"] = cpp["timeout_s"] / ref["median_s"]
    entry["ratios"] = ratios
    checks = {}
    if ok(ref) and ok(cpu):
        checks["ref_vs_cpu"] = outputs_agree(ref["outputs"], cpu["outputs"])
    if ok(cpp) and ok(cpu):
        checks["cpp_vs_cpu"] = outputs_agree(cpp["outputs"], cpu["outputs"])
    entry["checks"] = checks
    if w.steps > 1 and ok(ref):
        entry["ref_per_step_s"] = ref["median_s"] / w.steps
    return entry


# --------------------------------------------------------------------------
# Targets (issue: benchmarks against XLA CPU and the C++ interpreter)

# (workload, max ours/XLA ratio)
XLA_TARGETS = (("matmul_1024", 2.0), ("elementwise", 2.0), ("mlp_step", 10.0),
               ("conv2d", 10.0), ("transformer", 10.0))
CPP_FACTOR = 100.0          # at least this many times faster than the C++ interpreter
REF_MAX_S = 10.0            # every workload under this
CALL_OVERHEAD_MAX_S = 100e-6
LOOP_STEP_MAX_S = 30e-6


def evaluate_targets(entries):
    """[{target, value, met}] for the targets that this run can judge.

    ``met`` is True/False, or None when the run cannot tell (a C++ timeout
    whose lower bound is below the factor).
    """
    by = {e["name"]: e for e in entries}
    out = []

    def ok(e, s):
        r = e["systems"].get(s)
        return r is not None and r["status"] == "ok"
    for e in entries:
        if ok(e, "ref"):
            m = e["systems"]["ref"]["median_s"]
            if m >= REF_MAX_S:
                out.append({"target": f"{e['name']}: ours under {REF_MAX_S:g} s",
                            "value": fmt_time(m), "met": False})
    if any(ok(e, "ref") for e in entries):
        slow = [e for e in entries if ok(e, "ref")
                and e["systems"]["ref"]["median_s"] >= REF_MAX_S]
        out.insert(0, {"target": f"ours under {REF_MAX_S:g} s on every workload",
                       "value": "all" if not slow else ", ".join(e["name"] for e in slow),
                       "met": not slow and all(ok(e, "ref") for e in entries)})
    for e in entries:
        ra = e["ratios"]
        if "cpp_over_ref" in ra:
            out.append({"target": f"{e['name']}: >= {CPP_FACTOR:g}x faster than C++",
                        "value": fmt_ratio(ra["cpp_over_ref"]),
                        "met": ra["cpp_over_ref"] >= CPP_FACTOR})
        elif "cpp_over_ref_lower_bound" in ra:
            lb = ra["cpp_over_ref_lower_bound"]
            out.append({"target": f"{e['name']}: >= {CPP_FACTOR:g}x faster than C++",
                        "value": ">" + fmt_ratio(lb),
                        "met": True if lb >= CPP_FACTOR else None})
    for name, limit in XLA_TARGETS:
        e = by.get(name)
        if e and "ref_over_cpu" in e["ratios"]:
            r = e["ratios"]["ref_over_cpu"]
            out.append({"target": f"{name}: within {limit:g}x of XLA CPU",
                        "value": fmt_ratio(r), "met": r <= limit})
    e = by.get("call_overhead")
    if e and ok(e, "ref"):
        m = e["systems"]["ref"]["median_s"]
        out.append({"target": "jit(lambda x: x + 1) per call under 100 µs",
                    "value": fmt_time(m), "met": m < CALL_OVERHEAD_MAX_S})
    e = by.get("fori_loop")
    if e and ok(e, "ref"):
        m = e["systems"]["ref"]["median_s"] / e["steps"]
        out.append({"target": "fori_loop step under 30 µs", "value": fmt_time(m),
                    "met": m < LOOP_STEP_MAX_S})
    return out


# --------------------------------------------------------------------------
# Formatting


def fmt_time(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_ratio(r):
    if r >= 100:
        return f"{r:,.0f}x"
    if r >= 10:
        return f"{r:.1f}x"
    return f"{r:.2f}x"


def _cell(entry, system):
    r = entry["systems"].get(system)
    if r is None:
        return "-"
    if r["status"] == "ok":
        return fmt_time(r["median_s"])
    if r["status"] == "timeout":
        return f"timeout >{r['timeout_s']:.0f} s"
    err = r.get("error", "")
    if "Unsupported op:" in err:  # the C++ interpreter's abort message
        op = err.split("Unsupported op:", 1)[1].split("=", 1)[-1].split()[0]
        return f"unsupported: `{op}`"
    return "error"


def _jax_section(report):
    """The JAX workloads' tables (systems ref, cpu, cpp)."""
    lines = []
    lines.append("Median wall time per call (after a warm-up call that compiles); "
                 "`ours/XLA` is how many times slower than XLA CPU we are, "
                 "`C++/ours` how many times faster than the C++ reference interpreter "
                 "(`>` where it timed out: a lower bound). "
                 "`ok` means the outputs of the systems agree.")
    lines.append("")
    systems = [s for s in report["systems"] if s in JAX_SYSTEMS]
    head = ["workload"] + [SYSTEM_TITLES[s] for s in systems]
    if "ref" in systems and "cpu" in systems:
        head.append("ours/XLA")
    if "ref" in systems and "cpp" in systems:
        head.append("C++/ours")
    head.append("check")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|")
    for e in report["workloads"]:
        row = [f"`{e['name']}`"] + [_cell(e, s) for s in systems]
        ra = e["ratios"]
        if "ref" in systems and "cpu" in systems:
            row.append(fmt_ratio(ra["ref_over_cpu"]) if "ref_over_cpu" in ra else "-")
        if "ref" in systems and "cpp" in systems:
            if "cpp_over_ref" in ra:
                row.append(fmt_ratio(ra["cpp_over_ref"]))
            elif "cpp_over_ref_lower_bound" in ra:
                row.append(">" + fmt_ratio(ra["cpp_over_ref_lower_bound"]))
            else:
                row.append("-")
        checks = e["checks"]
        row.append("ok" if checks and all(checks.values())
                   else ("MISMATCH " + ",".join(k for k, v in checks.items() if not v)
                         if checks else "-"))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if report.get("targets"):
        lines.append("Targets:")
        lines.append("")
        lines.append("| target | value | met |")
        lines.append("|---|---:|:---:|")
        mark = {True: "yes", False: "**no**", None: "?"}
        for t in report["targets"]:
            lines.append(f"| {t['target']} | {t['value']} | {mark[t['met']]} |")
        lines.append("")
    lines.append("Workloads:")
    lines.append("")
    for e in report["workloads"]:
        extra = ""
        if e.get("ref_per_step_s") is not None:
            extra = f" (ours: {fmt_time(e['ref_per_step_s'])} per step)"
        lines.append(f"- `{e['name']}`: {e['description']}{extra}")
    lines.append("")
    return lines


def markdown(report):
    m = report["machine"]
    lines = ["# Benchmarks", ""]
    lines.append(f"Run {report['date']} with `python -m benchmarks "
                 f"{' '.join(report['argv'])}`".rstrip() + ".")
    lines.append("")
    cpu = m.get("cpu", platform.processor() or "?")
    lines.append(f"Machine: {cpu}, {m.get('cpus')} cores, {m.get('memory_gb')} GB; "
                 f"Python {m.get('python')}, jax/jaxlib {m.get('jax')}, numpy {m.get('numpy')}; "
                 f"load average at start {', '.join(f'{x:.2f}' for x in m.get('load_avg', []))}.")
    if m.get("env"):
        lines.append("Environment: " + ", ".join(f"`{k}={v}`" for k, v in m["env"].items())
                     + ".")
    lines.append("")
    if report["workloads"]:
        lines += _jax_section(report)
    if report.get("torch") is not None:
        lines += torch_step.markdown(report["torch"], fmt_time, fmt_ratio)
    return "\n".join(lines)


# --------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--only", action="append", default=[],
                   help="run only workloads whose name contains this (repeatable, "
                        "or comma-separated)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per workload")
    p.add_argument("--systems", default="ref,cpu,cpp,torch",
                   help="comma-separated subset of ref,cpu,cpp,torch (torch: "
                        "PyTorch/XLA steps, skipped without torch_xla)")
    p.add_argument("--cpp-timeout", type=float, default=120.0,
                   help="seconds per workload for the C++ interpreter")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds for the whole ref or cpu process")
    p.add_argument("--budget", type=float, default=20.0,
                   help="stop repeating a workload after this many seconds")
    p.add_argument("--quick", action="store_true", help="small sizes (for tests)")
    p.add_argument("--out", default=None,
                   help="output path prefix (default benchmarks/results/latest, or "
                        "benchmarks/results/quick with --quick)")
    args = p.parse_args(argv)

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for s in systems:
        if s not in SYSTEMS:
            p.error(f"unknown system {s!r} (choose from {', '.join(SYSTEMS)})")
    systems = [s for s in SYSTEMS if s in systems]
    only = [x for o in args.only for x in o.split(",") if x]
    names = [w.name for w in WORKLOADS if not only or any(o in w.name for o in only)]
    torch_names = [w.name for w in torch_step.WORKLOADS
                   if not only or any(o in w.name for o in only)]
    if "torch" not in systems:
        torch_names = []
    if not any(s in JAX_SYSTEMS for s in systems):
        names = []
    if not names and not torch_names:
        p.error(f"no workload matches {only}")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    info = machine_info()
    log(f"machine: {info.get('cpu')} x{info.get('cpus')}, load {info.get('load_avg')}")
    per = {n: {} for n in names}
    for system in systems:
        if system == "torch" or not names:
            continue
        for name, rec in run_system(system, names, args, log).items():
            per[name][system] = rec
    torch_section = torch_step.run(args, torch_names, log) if torch_names else None
    try:
        info["load_avg_end"] = list(os.getloadavg())
    except OSError:
        pass
    report = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "argv": list(argv if argv is not None else sys.argv[1:]),
              "machine": info, "systems": systems, "quick": args.quick,
              "repeats": args.repeats, "cpp_timeout_s": args.cpp_timeout,
              "workloads": [summarize(n, per[n]) for n in names],
              "torch": torch_section}
    report["targets"] = evaluate_targets(report["workloads"])
    out = Path(args.out) if args.out else RESULTS_DIR / ("quick" if args.quick else "latest")
    out.parent.mkdir(parents=True, exist_ok=True)
    md = markdown(report)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(md)
    print(md)
    log(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0
