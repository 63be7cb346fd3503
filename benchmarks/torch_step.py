"""PyTorch/XLA training steps: stablehlo_ref against PyTorch/XLA's own CPU plugin.

The ``torch`` system of ``python -m benchmarks`` times one training step
(forward, cross-entropy, backward, SGD update, ``torch_xla.sync()`` and the
wait for the device) of small models on ``PJRT_DEVICE=STABLEHLO_REF`` and on
``PJRT_DEVICE=CPU``.  PJRT_DEVICE is process-wide, so each device type runs
in its own process:

    python -m benchmarks.torch_step ref|cpu NAMES... [--repeats N] [--quick]

prints one ``@@BENCH {json}`` line per workload like benchmarks/worker.py.
Without torch_xla the worker exits with code 3 and the runner reports the
system as skipped.  Both devices start from the same weights and data; the
losses of the warm-up steps are compared (the check column).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass

MARK = "@@BENCH "
NO_TORCH_XLA = 3  # the worker's exit code when torch_xla is not installed
DEVICES = {"ref": "STABLEHLO_REF", "cpu": "CPU"}
TITLES = {"ref": "stablehlo_ref (ours)", "cpu": "PyTorch/XLA CPU"}
WARMUP = 3  # steps before timing: the first compiles (and the second, if it differs)


@dataclass
class TorchWorkload:
    name: str
    description: str
    build: object  # (quick) -> (make_model, x_shape, classes)


def _mlp(quick):
    import torch.nn as nn
    d, h, n = (64, 32, 16) if quick else (784, 512, 128)

    def make():
        return nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                             nn.Linear(h, 10))
    return make, (n, d), 10


def _cnn(quick):
    import torch.nn as nn
    c, s, n = (4, 8, 4) if quick else (16, 32, 32)

    def make():
        return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(c * (s // 4) ** 2, 10))
    return make, (n, 3, s, s), 10


WORKLOADS = [
    TorchWorkload("torch_mlp_step", "PyTorch MLP 784-512-512-10, batch 128: forward, "
                  "cross-entropy, backward, SGD step (as JAX's mlp_step)", _mlp),
    TorchWorkload("torch_cnn_step", "PyTorch CNN: 2x (conv 3x3, ReLU, max-pool 2), linear; "
                  "batch 32 of 3x32x32; one SGD step", _cnn),
]
BY_NAME = {w.name: w for w in WORKLOADS}


def available() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


# --------------------------------------------------------------------------
# Worker (one process per device type)


def run_workload(w, quick, repeats, budget):
    import torch
    import torch.nn.functional as F
    import torch_xla
    import torch_xla.core.xla_model as xm

    dev = torch_xla.device()
    make, x_shape, classes = w.build(quick)
    torch.manual_seed(0)
    model = make().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(x_shape, generator=gen).to(dev)
    y = torch.randint(0, classes, (x_shape[0],), generator=gen).to(dev)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch_xla.sync()
        xm.wait_device_ops()
        return loss

    t = time.perf_counter()
    losses = [step().item() for _ in range(WARMUP)]
    warmup_s = time.perf_counter() - t
    wall, cpu = [], []
    start = time.perf_counter()
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        if time.perf_counter() - start > budget:
            break
    return {"name": w.name, "system": "torch", "status": "ok",
            "median_s": statistics.median(wall), "min_s": min(wall),
            "cpu_median_s": statistics.median(cpu), "repeats": len(wall),
            "samples_s": wall, "cpu_samples_s": cpu, "warmup_s": warmup_s,
            "losses": losses}


def worker_main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.torch_step")
    p.add_argument("device", choices=sorted(DEVICES))
    p.add_argument("names", nargs="+")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=float, default=20.0)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    if not available():
        print("torch_xla is not installed (pip install '.[torch]')", file=sys.stderr)
        return NO_TORCH_XLA
    from stablehlo_pjrt import config
    if config.PJRT_DEVICE.value() != DEVICES[a.device]:
        raise SystemExit(f"torch_step {a.device}: PJRT_DEVICE is "
                         f"{config.PJRT_DEVICE.raw()!r}, expected {DEVICES[a.device]!r}")
    for name in a.names:
        try:
            rec = run_workload(BY_NAME[name], a.quick, a.repeats, a.budget)
        except Exception as e:  # report and go on with the next workload
            rec = {"name": name, "system": "torch", "status": "error",
                   "error": f"{type(e).__name__}: {e}"[:500],
                   "traceback": traceback.format_exc()[-2000:]}
        rec["device"] = a.device
        print(MARK + json.dumps(rec), flush=True)
    return 0


# --------------------------------------------------------------------------
# Runner side


def _env(device):
    from stablehlo_pjrt import config
    env = config.child_environ(drop=(
        "JAX_PLATFORMS", "STABLEHLO_PJRT_TRACE", "XLA_STABLEHLO_COMPILE",
        "STABLEHLO_REF_NUM_DEVICES", "CPU_NUM_DEVICES", "PJRT_NAMES_AND_LIBRARY_PATHS"))
    env["PJRT_DEVICE"] = DEVICES[device]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run(args, names, log):
    """{"status": "skipped"|"ok", "workloads": [entry...]} for the runner."""
    import subprocess
    if not available():
        log("  torch: skipped (torch_xla is not installed)")
        return {"status": "skipped", "reason": "torch_xla is not installed", "workloads": []}
    per = {n: {} for n in names}
    for device in DEVICES:
        log(f"  torch {device}: {', '.join(names)}")
        cmd = [sys.executable, "-m", "benchmarks.torch_step", device, *names,
               "--repeats", str(args.repeats), "--budget", str(args.budget)]
        if args.quick:
            cmd.append("--quick")
        try:
            p = subprocess.run(cmd, env=_env(device), capture_output=True, text=True,
                               timeout=args.timeout)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = "process timed out", None
        for line in out.splitlines():
            if line.startswith(MARK):
                rec = json.loads(line[len(MARK):])
                per[rec["name"]][device] = rec
        for name in names:
            if device not in per[name]:
                tail = "\n".join(err.strip().splitlines()[-5:])
                per[name][device] = {"name": name, "status": "error",
                                     "error": f"exit code {rc}: {tail}"[-600:]}
            r = per[name][device]
            log(f"    {device:>3} {name:<18} " + (
                f"{r['median_s'] * 1e3:.2f} ms  ({r['repeats']} runs)" if r["status"] == "ok"
                else f"{r['status']}: {r.get('error', '')[:200]}"))
    entries = []
    for name in names:
        ref, cpu = per[name]["ref"], per[name]["cpu"]
        e = {"name": name, "description": BY_NAME[name].description,
             "systems": {d: {k: v for k, v in r.items() if k != "traceback"}
                         for d, r in per[name].items()}}
        if ref["status"] == "ok" and cpu["status"] == "ok":
            e["ratio"] = ref["median_s"] / cpu["median_s"]
            e["cpu_time_ratio"] = ref["cpu_median_s"] / cpu["cpu_median_s"]
            e["check"] = all(math.isclose(a, b, rel_tol=1e-4)
                             for a, b in zip(ref["losses"], cpu["losses"]))
        entries.append(e)
    return {"status": "ok", "workloads": entries}


def markdown(section, fmt_time, fmt_ratio):
    lines = ["PyTorch/XLA (`torch` system): one training step on `PJRT_DEVICE=STABLEHLO_REF` "
             "and on `PJRT_DEVICE=CPU` (XLA CPU), each in its own process; median wall "
             "time per step after 3 warm-up steps; `ours/CPU` how many times slower we "
             "are (process CPU time in parentheses); `ok`: the warm-up losses agree.", ""]
    if section["status"] != "ok":
        lines += [f"Skipped: {section.get('reason', '')}.", ""]
        return lines
    lines.append(f"| workload | {TITLES['ref']} | {TITLES['cpu']} | ours/CPU | check |")
    lines.append("|---|---:|---:|---:|---:|")
    for e in section["workloads"]:
        cells = []
        for d in ("ref", "cpu"):
            r = e["systems"].get(d, {})
            cells.append(fmt_time(r["median_s"]) if r.get("status") == "ok" else "error")
        ratio = (f"{fmt_ratio(e['ratio'])} ({fmt_ratio(e['cpu_time_ratio'])})"
                 if "ratio" in e else "-")
        check = "-" if "check" not in e else ("ok" if e["check"] else "MISMATCH")
        lines.append(f"| `{e['name']}` | {cells[0]} | {cells[1]} | {ratio} | {check} |")
    lines.append("")
    for e in section["workloads"]:
        lines.append(f"- `{e['name']}`: {e['description']}")
    lines.append("")
    return lines


if __name__ == "__main__":
    sys.exit(worker_main())
