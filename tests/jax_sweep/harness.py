"""The JAX sweep's harness: configurations, the case registry, the checker
that compares XLA CPU with stablehlo_ref, the subprocess protocol and the
expected differences (XFAIL).

Cases (functions taking a :class:`Checker`) live in the modules of this
package by op family and register with ``@case(config, ...)``; the pytest
side is ``tests/test_jax_sweep.py``, which imports every case module and is
also the subprocess entry (``python tests/test_jax_sweep.py CONFIG [GLOB]``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
import traceback

from testkit import marked_results

from .inputs import finfo, is_float

# The script each configuration runs in (it imports every case module).
ENTRY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test_jax_sweep.py")
MARK = "@@SWEEP@@ "

CONFIGS = {
    # name: (env, slow)
    "elementwise": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, False),
    "x64": ({"JAX_PLATFORMS": "cpu,stablehlo_ref", "JAX_ENABLE_X64": "1"}, False),
    "arrays": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, False),
    "programs": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, False),
    "programs_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, True),
    "elementwise_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, True),
    "elementwise_x64_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref", "JAX_ENABLE_X64": "1"}, True),
    "arrays_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, True),
}

# XLA CPU compile time dominates the sweep; LLVM -O0 halves it and leaves
# XLA's numerics alone (fast-math stays off).
FAST_XLA = {"XLA_FLAGS": "--xla_backend_optimization_level=0"}

# "case/label" glob -> reason, filled by the case modules with xfail().  A case
# whose every failure matches an entry is reported as xfail with the reasons;
# any other failure fails the test.  Patterns use only "*" as a wildcard
# (labels contain brackets).
XFAIL: dict[str, str] = {}

# The reason of the subnormal entries of elementwise.py and conversions.py.
FTZ = ("XLA CPU runs with FTZ/DAZ: subnormal operands read as zero (and subnormal "
       "results flush); we follow IEEE-754 as the spec does")


def xfail(entries: dict[str, str]) -> None:
    """Record differences from XLA CPU that are not our bugs (XLA CPU's own
    accuracy, implementation-defined results), each with its reason."""
    for pattern, reason in entries.items():
        if pattern in XFAIL:
            raise ValueError(f"XFAIL pattern {pattern!r} is listed twice")
        XFAIL[pattern] = reason


# case name -> (config, function); filled by @case.
CASES: dict[str, tuple[str, object]] = {}


def case(*configs):
    """Register the decorated case for each of ``configs`` (keys of CONFIGS)."""
    def register(fn):
        for cfg in configs:
            CASES[f"{cfg}:{fn.__name__}"] = (cfg, fn)
        return fn
    return register


# ---------------------------------------------------------------------------
# Comparison machinery (runs inside the subprocesses)
# ---------------------------------------------------------------------------


class Checker:
    """Collects the checks of one case, runs them fused, keeps the failures.

    ``c(label, fn, *args, **tolerances)`` queues a check; ``flush()`` runs
    the queue: checks with the same tolerances are fused into one jitted
    function returning a dict keyed by label (so one compilation per backend
    covers dozens of checks), and a group in which either backend raises is
    rerun check by check to name the culprit.
    """

    FUSE = 24

    def __init__(self, cfg):
        import jax
        import numpy as np
        self.jax, self.np = jax, np
        self.cfg = cfg
        self.slow = cfg.endswith("_slow")
        self.cpu = jax.devices("cpu")[0]
        self.ref = jax.devices("stablehlo_ref")[0]
        self.failures: list[dict] = []
        self.checks = 0
        self.queue: list = []

    def fail(self, label, msg):
        self.failures.append({"label": label, "msg": msg[:1500]})

    def __call__(self, label, fn, *args, **kw):
        """Queue a comparison of fn(*args) between XLA CPU and stablehlo_ref.

        fn may return a pytree; each leaf is compared and reported as
        ``label/path``.  Keywords: ``ulps`` (ULPs of the result dtype) or
        ``rtol``/``atol`` for floats; with neither the comparison is exact by
        value (NaN == NaN; the sign of zero counts unless zero_sign=False).
        XLA CPU flushes subnormal results to zero, so a zero where we produce
        a subnormal of the same sign is accepted everywhere.  ``check(want,
        got)`` replaces the comparison (implementation-defined results).
        ulps/rtol/atol may be dicts keyed by the result's first path key.
        """
        self.checks += 1
        self.queue.append((label, fn, args, kw))
        if len(self.queue) >= 4 * self.FUSE:
            self.flush()

    def _run(self, dev, fn, args):
        jax = self.jax
        args = jax.device_put(args, dev)
        with jax.default_device(dev):
            out = jax.block_until_ready(jax.jit(fn)(*args))
        return jax.tree_util.tree_map(self.np.asarray, out)

    def flush(self):
        groups: dict = {}
        for item in self.queue:
            key = repr(sorted((k, repr(v)) for k, v in item[3].items()))
            groups.setdefault(key, []).append(item)
        self.queue = []
        for items in groups.values():
            for i in range(0, len(items), self.FUSE):
                self._run_group(items[i:i + self.FUSE])

    def _run_group(self, items):
        if len(items) > 1:
            flat, spans = [], []
            for _, _, args, _ in items:
                spans.append((len(flat), len(args)))
                flat.extend(args)

            def fused(*a):
                return [fn(*a[s:s + k]) for (_, fn, _, _), (s, k) in zip(items, spans)]
            try:
                t0 = time.time()
                want = self._run(self.cpu, fused, flat)
                t1 = time.time()
                got = self._run(self.ref, fused, flat)
                if os.environ.get("SWEEP_TIMING"):
                    print(f"{len(items)} items cpu {t1 - t0:.2f}s ref {time.time() - t1:.2f}s "
                          f"{items[0][0]}", file=sys.stderr)
            except Exception:  # noqa: BLE001  find the culprit one by one
                for item in items:
                    self._run_group([item])
                return
            for (label, _, args, kw), w, g in zip(items, want, got):
                self._check(label, w, g, args, **kw)
            return
        label, fn, args, kw = items[0]
        try:
            want = self._run(self.cpu, fn, args)
        except Exception as e:  # noqa: BLE001  a bug of the case itself
            self.fail(label, f"XLA CPU raised {type(e).__name__}: {str(e)[:300]}")
            return
        try:
            got = self._run(self.ref, fn, args)
        except Exception as e:  # noqa: BLE001
            self.fail(label, f"stablehlo_ref raised {type(e).__name__}: {str(e)[:600]}")
            return
        self._check(label, want, got, args, **kw)

    def _check(self, label, want, got, args, ulps=None, rtol=None, atol=0.0,
               nan_sign=False, zero_sign=True, check=None):
        jax = self.jax
        wl, wt = jax.tree_util.tree_flatten_with_path(want)
        gl, gt = jax.tree_util.tree_flatten(got)
        if wt != gt:
            self.fail(label, f"tree {gt} != {wt}")
            return
        for (path, w), g in zip(wl, gl):
            key = jax.tree_util.keystr(path)
            first = path[0].key if path and hasattr(path[0], "key") else None
            pick = lambda v: v.get(first) if isinstance(v, dict) else v  # noqa: E731
            try:
                w, g = self.np.asarray(w), self.np.asarray(g)
                assert w.dtype == g.dtype, f"dtype {g.dtype} != {w.dtype}"
                assert w.shape == g.shape, f"shape {g.shape} != {w.shape}"
                if check is not None:
                    check(w, g)
                else:
                    self._compare(w, g, pick(ulps), pick(rtol), pick(atol) or 0.0, zero_sign,
                                  nan_sign, args)
            except AssertionError as e:
                self.fail(label + key, str(e))

    def _compare(self, w, g, ulps, rtol, atol, zero_sign, nan_sign, args):
        np = self.np
        if not is_float(w.dtype) and w.dtype.kind != "c":
            bad = w != g
        else:
            parts = [(w.real, g.real), (w.imag, g.imag)] if w.dtype.kind == "c" else [(w, g)]
            bad = np.zeros(w.shape, bool)
            for wp, gp in parts:
                fi = finfo(wp.dtype)
                w64, g64 = wp.astype(np.float64), gp.astype(np.float64)
                wn, gn = np.isnan(w64), np.isnan(g64)
                both = wn & gn
                same = (w64 == g64) | both
                if zero_sign:
                    same &= ~((w64 == 0) & (g64 == 0) & (np.signbit(w64) != np.signbit(g64)))
                if nan_sign:
                    same &= ~(both & (np.signbit(w64) != np.signbit(g64)))
                # XLA CPU's flush-to-zero of subnormal results.
                same |= (w64 == 0) & (np.abs(g64) < float(fi.tiny)) & (np.signbit(w64) == np.signbit(g64))
                # A tolerance, not a ULP distance: JAX's tests state allowances
                # as atol + rtol*|want| and the sweep adds ulps * ulp(want) to
                # that sum, an absolute budget in the expected value's binade.
                # dtypes.ulp_distance (the one ULP *distance*) counts the values
                # between two numbers and cannot be summed with atol/rtol.
                if ulps is not None or rtol is not None or atol:
                    eps = float(fi.eps)
                    allow = atol + (rtol or 0.0) * np.abs(w64)
                    if ulps is not None:
                        with np.errstate(all="ignore"):
                            mag = np.maximum(np.abs(w64), float(fi.tiny))
                            ulp = eps * 2.0 ** np.floor(np.log2(np.where(np.isfinite(mag), mag, 1.0)))
                        allow = allow + ulps * ulp
                    with np.errstate(invalid="ignore", over="ignore"):
                        same |= np.isfinite(w64) & np.isfinite(g64) & (np.abs(w64 - g64) <= allow)
                bad |= ~same
        if bad.any():
            idx = np.argwhere(bad)[:6]
            rows = []
            for ix in idx:
                t = tuple(int(v) for v in ix)
                ins = [repr(np.asarray(a)[t]) for a in args if np.shape(a) == w.shape]
                rows.append(f"  at {t}: got {g[t]!r} want {w[t]!r}" + (f" (inputs {', '.join(ins)})" if ins else ""))
            raise AssertionError(f"({w.dtype}{list(w.shape)}): {int(bad.sum())}/{bad.size} "
                                 f"elements differ\n" + "\n".join(rows))


# ---------------------------------------------------------------------------
# Subprocess protocol and pytest glue
# ---------------------------------------------------------------------------


def run_config(cfg: str, only: str | None = None) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    for name, (g, fn) in CASES.items():
        if g != cfg or (only and not fnmatch.fnmatch(name.split(":", 1)[1], only)):
            continue
        ck = Checker(cfg)
        t0 = time.time()
        try:
            fn(ck)
            ck.flush()
            res = {"name": name, "checks": ck.checks, "failures": ck.failures}
            res["secs"] = round(time.time() - t0, 1)
        except BaseException:  # noqa: BLE001
            res = {"name": name, "checks": ck.checks,
                   "failures": ck.failures + [{"label": "<case>", "msg": traceback.format_exc()[-3000:]}]}
        print(MARK + json.dumps(res), flush=True)


_results: dict[str, dict] = {}


def config_results(cfg: str, shared_dir: str | None = None) -> dict:
    """The results of configuration ``cfg``: {case name: result, "__process__": ...}.

    A configuration runs once per pytest run: under ``pytest -n`` every worker
    needs the results of every configuration (the tests are spread over the
    workers one by one), so ``shared_dir`` (a folder all workers see) holds
    them as JSON; the first worker to ask runs the subprocess under a lock and
    the others read its file.  (``--dist loadgroup`` would keep a configuration
    on one worker, but it does not group with pytest 9: pytest-xdist#1386.)
    """
    if cfg in _results:
        return _results[cfg]
    if shared_dir is None:
        results = _run_subprocess(cfg)
    else:
        import fcntl
        path = os.path.join(shared_dir, f"jax_sweep-{cfg}.json")
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if os.path.exists(path):
                with open(path) as f:
                    results = json.load(f)
            else:
                results = _run_subprocess(cfg)
                with open(path + ".tmp", "w") as f:
                    json.dump(results, f)
                os.replace(path + ".tmp", path)
    _results[cfg] = results
    return results


def _run_subprocess(cfg: str) -> dict:
    env = dict(os.environ)
    for key in ("JAX_PLATFORMS", "JAX_ENABLE_X64", "STABLEHLO_REF_NUM_DEVICES", "STABLEHLO_PJRT_TRACE"):
        env.pop(key, None)
    env.update(FAST_XLA)
    env.update(CONFIGS[cfg][0])
    return marked_results([sys.executable, ENTRY, cfg], env, MARK, timeout=1800)


def _glob(pattern: str, text: str) -> bool:
    import re
    rx = ".*".join(re.escape(p) for p in pattern.split("*"))
    return re.fullmatch(rx, text, re.S) is not None


def xfail_reason(case_name: str, label: str) -> str | None:
    short = case_name.split(":", 1)[1]
    for pat, reason in XFAIL.items():
        if _glob(pat, f"{short}/{label}"):
            return reason
    return None


def _marks(cfg):
    import pytest
    return [pytest.mark.slow] if CONFIGS[cfg][1] else []


def params():
    """One pytest param per registered case (those of slow configurations marked)."""
    import pytest
    return [pytest.param(name, id=name, marks=_marks(cfg)) for name, (cfg, _) in CASES.items()]


def config_params():
    """One pytest param per configuration (slow ones marked)."""
    import pytest
    return [pytest.param(cfg, marks=_marks(cfg)) for cfg in CONFIGS]
