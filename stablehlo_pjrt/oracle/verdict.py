"""The verdict: is the other backend wrong, or only different as any correct
implementation may be?

    report = oracle.compare(fn, *args, against="cpu")   # or a Runner
    report.ok          # True: every output agrees or differs for allowed causes
    report.verdict     # "identical" | "agree" | "explained" | "differ"
    report.causes      # {"summation-order", ...}
    print(report)      # per output: what differs, why, with the op and line

Per output leaf:

* ``identical``: the same bits;
* ``agree``: within the per-dtype tolerance of stablehlo_interpreter.compare
  and within the rounding bound (bounds.py);
* ``explained``: outside the per-dtype tolerance, but every element is
  within the rounding bound (``summation-order``) or a named cause, tested
  by a re-run under its hypothesis, accounts for it (causes.py);
* ``differ``: anything else, or a cause ``forbid`` excludes (``allow``
  limits the causes to those named). The isolated op to blame, when one is,
  is named with its Python line.

``rtol``/``atol``/``ulp`` replace all of this with a fixed tolerance:
``agree`` or ``differ``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from stablehlo_interpreter import compare_arrays

from . import causes as C
from .runners import Runner, other_runner

if TYPE_CHECKING:
    from .bounds import Bounds
    from .isolate import OpVerdict

REFERENCE_PLATFORM = "stablehlo_ref"
VERDICTS = ("identical", "agree", "explained", "differ")


def _device(platform: str) -> Any:
    import jax
    try:
        devices = jax.devices(platform)
    except RuntimeError as e:
        raise RuntimeError(
            f"backend {platform!r} is not available in this process ({e}); "
            "the oracle needs both platforms at once: leave JAX_PLATFORMS unset or "
            f"set it to e.g. 'cpu,{REFERENCE_PLATFORM}'") from None
    if not devices:
        raise RuntimeError(f"backend {platform!r} has no devices")
    return devices[0]


def run_on(platform: str, fn: Callable[..., Any],
           *args: Any) -> list[tuple[str, np.ndarray]]:
    """``jax.jit(fn)(*args)`` with every input committed to ``platform``'s
    first device (so the computation runs there); returns the outputs as a
    list of (name, numpy array) in tree order."""
    import jax
    dev = _device(platform)
    placed = jax.device_put(args, dev)
    out = jax.jit(fn)(*placed)
    leaves = jax.tree_util.tree_leaves_with_path(out)
    return [(f"output{jax.tree_util.keystr(path)}" if path else "output",
             np.asarray(jax.device_get(leaf))) for path, leaf in leaves]


@dataclass
class OutputReport:
    """The verdict on one output leaf."""

    name: str
    verdict: str
    causes: set[str] = field(default_factory=set)
    dtype: str = ""
    shape: tuple[int, ...] = ()
    detail: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"{self.name}: {self.dtype}{list(self.shape)} {self.verdict}"
        if self.causes:
            head += f" ({', '.join(sorted(self.causes))})"
        return "\n".join([head] + ["  " + ln for d in self.detail for ln in d.splitlines()])


@dataclass
class Report:
    """The verdict on every output; ``ok`` unless one output differs."""

    outputs: list[OutputReport]
    reference_name: str = REFERENCE_PLATFORM
    other_name: str = "other"
    ops: list[OpVerdict] = field(default_factory=list)      # when isolated
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return max((o.verdict for o in self.outputs), key=VERDICTS.index, default="identical")

    @property
    def ok(self) -> bool:
        return self.verdict != "differ"

    @property
    def causes(self) -> set[str]:
        out: set[str] = set()
        for o in self.outputs:
            out |= o.causes
        return out

    @property
    def blamed(self) -> list[OpVerdict]:
        """The isolated ops outside their own bound with no cause."""
        return [v for v in self.ops if v.status == "blame"]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        head = f"{self.reference_name} vs {self.other_name}: {self.verdict}"
        if self.causes:
            head += f" ({', '.join(sorted(self.causes))})"
        lines = [head] + ["  " + ln for o in self.outputs for ln in str(o).splitlines()]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def compare(fn: Any, *args: Any, against: str | Runner = "cpu", rtol: float | None = None,
            atol: float | None = None, ulp: int | None = None,
            allow: Iterable[str] | None = None, forbid: Iterable[str] | None = None,
            reference: str = REFERENCE_PLATFORM, shadow_on: str = REFERENCE_PLATFORM) -> Report:
    """The verdict on ``fn(*args)`` run on the reference and on ``against``
    (a JAX platform name or a Runner ``run(module_text, args) -> outputs``).

    ``fn`` is a JAX function (the rounding bounds come from its jaxpr, see
    bounds.py) or a module (MLIR text or bytecode) with ``args`` the arrays
    @main takes (then the ops are judged alone, see isolate.py, and an
    output difference no op accounts for is amplified rounding).
    ``allow``/``forbid`` choose the causes (causes.CAUSES) that may explain
    a difference; ``rtol``/``atol``/``ulp`` override the analysis with a
    fixed tolerance. The float64 shadow runs on the platform ``shadow_on``
    (XLA CPU when it is missing)."""
    from .runners import reference_runner
    allowed = C.check_names(allow) or set(C.CAUSES)
    allowed -= C.check_names(forbid)
    is_module = isinstance(fn, (str, bytes, bytearray, memoryview))
    if is_module:
        text, flat = fn, [np.asarray(a) for a in args]
        names = None
    else:
        from ._lowering import canonical_args, lower, output_names
        # As jax.jit takes them (float64 -> float32 without jax_enable_x64).
        args = canonical_args(args)
        text, flat = lower(fn, *args, platform=_available(reference))
        names = output_names(fn, *args)
    other_name, run_other = other_runner(against)
    if reference != REFERENCE_PLATFORM:
        ref_outs = [np.asarray(v) for v in other_runner(reference)[1](text, flat)]
    else:
        ref_outs = [np.asarray(v) for v in reference_runner(text, flat)]
    if isinstance(against, str) and not is_module:
        # A platform runs the program as JAX lowers it for that platform
        # (its own linear algebra custom calls, say).
        other_outs = [v for _, v in run_on(against, fn, *args)]
    else:
        other_outs = [np.asarray(v) for v in run_other(text, flat)]
    if len(ref_outs) != len(other_outs):
        raise AssertionError(f"{len(ref_outs)} outputs on {reference}, "
                             f"{len(other_outs)} on {other_name}")
    names = names or [f"output #{k}" for k in range(len(ref_outs))]
    j = _Judge(fn, args, text, flat, ref_outs, other_outs, run_other, allowed,
               is_module, shadow_on)
    outputs = []
    for k, name in enumerate(names):
        if rtol is not None or atol is not None or ulp is not None:
            outputs.append(j.fixed(k, name, rtol, atol, ulp))
        else:
            outputs.append(j.output(k, name))
    rep = Report(outputs, reference, other_name, j.ops or [], j.notes)
    return rep


def _available(platform: str) -> str | None:
    """``platform`` if this process has it (then the module is lowered for
    it), else None (the default backend's lowering)."""
    import jax
    try:
        jax.devices(platform)
        return platform
    except RuntimeError:
        return None


class _Judge:
    def __init__(self, fn: Any, args: tuple[Any, ...], text: Any, flat: list[np.ndarray],
                 ref: list[np.ndarray], other: list[np.ndarray], run_other: Runner,
                 allowed: set[str], is_module: bool, shadow_on: str) -> None:
        self.fn, self.args, self.text, self.flat = fn, args, text, flat
        self.ref, self.other, self.run_other = ref, other, run_other
        self.allowed, self.is_module = allowed, is_module
        self.shadow_on = shadow_on
        self._bounds: Bounds | None = None
        self.ops: list[OpVerdict] | None = None
        self.notes: list[str] = []
        self._widened = False
        self._widened_outs: list[list[np.ndarray]] = []
        self._flushed = False
        self._flushed_outs: list[np.ndarray] | None = None

    # -- lazily computed evidence -------------------------------------------
    def bounds(self) -> Bounds:
        if self._bounds is None:
            from .bounds import bounds
            self._bounds = bounds(self.fn, *self.args, shadow_on=self.shadow_on)
        return self._bounds

    def isolated(self) -> list[OpVerdict]:
        if self.ops is None:
            from .isolate import isolate
            try:
                self.ops = isolate(self.text, self.flat, self.run_other)
            except Exception as e:  # noqa: BLE001 - the verdict stands without it
                self.ops = []
                self.notes.append(f"the ops could not be isolated: {type(e).__name__}: {e}")
        return self.ops

    def widened(self) -> list[list[np.ndarray]]:
        """The reference's outputs under each excess-precision hypothesis:
        every bf16/f16 value in f32, arithmetic results in f32 with explicit
        converts still rounding, the roundings before explicit widenings
        skipped."""
        if not self._widened:
            self._widened = True
            from .runners import reference_runner
            if not isinstance(self.text, str):
                return self._widened_outs
            for make in (C.widen_module, lambda t: C.widen_module(t, keep_converts=True),
                         C.skip_final_roundings):
                try:
                    wide = make(self.text)
                    if wide is None:
                        continue
                    args = self.flat
                    if make is not C.skip_final_roundings:
                        args = [a.astype(np.float32) if a.dtype.name in C._ML_FLOATS or
                                a.dtype == np.float16 else a for a in self.flat]
                    self._widened_outs.append(
                        [np.asarray(v) for v in reference_runner(wide, args)])
                except Exception as e:  # noqa: BLE001 - then that hypothesis is not tested
                    self.notes.append(f"an excess-precision hypothesis was not tested: "
                                      f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        return self._widened_outs

    def flushed(self) -> list[np.ndarray] | None:
        """The reference's outputs with subnormal arguments flushed to zero."""
        if not self._flushed:
            self._flushed = True
            from .runners import reference_runner
            args = [C.flush_subnormals(a) for a in self.flat]
            if any(a is not b for a, b in zip(args, self.flat)):
                self._flushed_outs = [np.asarray(v) for v in reference_runner(self.text, args)]
        return self._flushed_outs

    # -- verdicts -------------------------------------------------------------
    def fixed(self, k: int, name: str, rtol: float | None, atol: float | None,
              ulp: int | None) -> OutputReport:
        r, o = self.ref[k], self.other[k]
        out = OutputReport(name, "identical", set(), str(r.dtype), r.shape)
        if r.dtype == o.dtype and r.shape == o.shape and r.tobytes() == o.tobytes():
            return out
        d = compare_arrays(name, r, o, rtol=rtol, atol=atol, ulp=ulp)
        out.verdict = "agree" if d.ok else "differ"
        if not d.ok:
            out.detail.append(str(d))
        return out

    def output(self, k: int, name: str) -> OutputReport:
        r, o = self.ref[k], self.other[k]
        out = OutputReport(name, "identical", set(), str(r.dtype), r.shape)
        if r.dtype != o.dtype or r.shape != o.shape:
            out.verdict = "differ"
            out.causes = {C.UNEXPLAINED}
            out.detail.append(f"{o.dtype}{list(o.shape)} on the other side")
            return out
        if r.tobytes() == o.tobytes():
            return out
        bits = C.bit_causes(r, o)
        if bits is not None:
            return self._settle(out, bits, ["equal up to " + ", ".join(sorted(bits))])
        plain = compare_arrays(name, r, o)
        from .bounds import unit_roundoff
        if unit_roundoff(r.dtype) == 0 or r.dtype.kind == "c":
            if plain.ok and r.dtype.kind == "c":
                out.verdict = "agree"
                return out
            if r.dtype.kind == "c":
                # No bound is walked for complex values: its ops are judged
                # alone (an FFT against its own bound), as a module's are.
                return self._by_isolation(out, k, plain)
            out.verdict, out.causes = "differ", {C.UNEXPLAINED}
            out.detail.append(str(plain))
            return out
        if self.is_module:
            return self._by_isolation(out, k, plain)
        b = self.bounds()
        centre, allowed = b.centre[k].astype(np.float64), b.allowed(k)
        u = unit_roundoff(r.dtype)
        # The reference's own rounding of the output comes on top.
        allowed = allowed + u * np.abs(centre)
        if r.dtype == np.float64:
            allowed = 2 * allowed   # the centre is no more exact than the result
        bad = self._outside(r, o, centre, allowed)
        ref_bad = self._outside(r, r, centre, allowed)
        if ref_bad.any():
            self.notes.append(f"{name}: the reference is outside its own bound at "
                              f"{int(ref_bad.sum())} element(s): there the other side may be "
                              "as far from the exact value as the reference is")
            slack = np.abs(r.astype(np.float64) - centre)
            bad &= ~(ref_bad & ~self._outside(r, o, centre, allowed + slack))
        if not bad.any():
            if plain.ok:
                out.verdict = "agree"
                return out
            ratio = self._ratio(o, centre, allowed)
            return self._settle(out, {"summation-order"},
                                [f"{plain.mismatched} of {plain.total} element(s) outside the "
                                 f"per-dtype tolerance, all inside the rounding bound (the "
                                 f"largest difference is {ratio:.2g} of it)"])
        return self._causes(out, k, r, o, centre, allowed, bad)

    @staticmethod
    def _outside(r: np.ndarray, o: np.ndarray, centre: np.ndarray,
                 allowed: np.ndarray) -> np.ndarray:
        o64 = o.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(o64 - centre)
            finite = np.isfinite(centre)
            bad = np.where(finite, ~(diff <= allowed),
                           ~((o64 == centre) | (np.isnan(o64) & np.isnan(centre))))
            # A non-finite centre that the program's type rounds the same way.
            bad &= ~((o64 == r.astype(np.float64)) | (np.isnan(o64) & np.isnan(r.astype(
                np.float64)))) | finite
        return np.asarray(bad, bool)

    @staticmethod
    def _ratio(o: np.ndarray, centre: np.ndarray, allowed: np.ndarray) -> float:
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.abs(o.astype(np.float64) - centre) / allowed
        q = q[np.isfinite(q)]
        return float(q.max()) if q.size else 0.0

    def _settle(self, out: OutputReport, causes: set[str], detail: list[str]) -> OutputReport:
        bad = causes - self.allowed
        out.causes = set(causes)
        out.detail.extend(detail)
        if bad:
            out.verdict = "differ"
            out.detail.append(f"cause(s) not allowed here: {', '.join(sorted(bad))}")
        else:
            out.verdict = "explained"
        return out

    def _causes(self, out: OutputReport, k: int, r: np.ndarray, o: np.ndarray,
                centre: np.ndarray, allowed: np.ndarray, bad: np.ndarray) -> OutputReport:
        """Tests the causes at the elements outside the bound."""
        o64 = o.astype(np.float64)
        n_bad = int(bad.sum())
        worst = int(np.argmax(np.where(bad, np.abs(o64 - centre), -1).reshape(-1)))
        idx = [int(x) for x in np.unravel_index(worst, r.shape)] if r.shape else []
        where = (f"{n_bad} of {r.size} element(s) outside the rounding bound; worst at "
                 f"{idx}: reference {r.reshape(-1)[worst].item()!r}, {self._other_label()} "
                 f"{o.reshape(-1)[worst].item()!r}, exact {centre.reshape(-1)[worst]:.9g}, "
                 f"bound {allowed.reshape(-1)[worst]:.3g}")
        if C.ftz_explains(r, o, bad):
            return self._settle(out, {"flush-to-zero"}, [where, "subnormals taken as zero"])
        flushed = self.flushed()
        if flushed is not None and self._close(flushed[k], o, allowed, bad):
            return self._settle(out, {"flush-to-zero"},
                                [where, "the reference on arguments with subnormals flushed "
                                 "to zero gives the other side's result"])
        wide = self.widened()
        if any(self._close(w[k], o, allowed, bad) for w in wide):
            return self._settle(out, {"excess-precision"},
                                [where, "the reference computing the program's bf16/f16 "
                                 "values in f32 gives the other side's result: the other "
                                 "side skipped roundings the program asks for"])
        ops = self.isolated()
        blamed = [v for v in ops if v.status == "blame"]
        found: set[str] = set()
        for v in ops:
            if v.status == "explained":
                found |= v.causes - {"summation-order"}
        if blamed:
            v = blamed[0]
            out.verdict, out.causes = "differ", {C.UNEXPLAINED}
            out.detail += [where, f"op to blame: {v.label()} (outside its own bound when "
                           "run alone on the reference's inputs)"]
            out.detail += ["  " + ln for ln in v.detail.splitlines()]
            return out
        missing = sorted({v.name for v in ops if v.status == "not isolated"})
        if found and not missing:
            expl = [f"{v.label()}: {v.detail.strip()}" for v in ops
                    if v.status == "explained" and v.causes & found]
            return self._settle(out, found, [where] + expl[:4])
        if not found and not missing and ops:
            why = self._transcendental_inside(k, o, centre, allowed, bad)
            if why is not None:
                return self._settle(out, {"transcendental-accuracy"}, [where, why])
        out.verdict, out.causes = "differ", {C.UNEXPLAINED}
        if missing:
            out.detail += [where, f"not isolated (judged only as part of the program): "
                           f"{', '.join(missing)}"]
        else:
            out.detail += [where, "every op is within its own bound when run alone, yet "
                           "the program's result is not: the difference arises between "
                           "ops (a fusion or rewrite of the other backend)" if ops else
                           "the ops were not isolated"]
        return out

    def _transcendental_inside(self, k: int, o: np.ndarray, centre: np.ndarray,
                               allowed: np.ndarray, bad: np.ndarray) -> str | None:
        """The transcendental-accuracy hypothesis for the whole program,
        when every op is within its own bound alone: the other side may
        compute a function differently inside a fusion than alone (XLA CPU
        does). The bound is recomputed with each transcendental function
        erring by up to TRANSCENDENTAL_BACKWARD_ULPS ULPs, as the isolated
        test accepts; the worst case of that extra error, propagated
        through the program (a cancellation amplifies it), is added to the
        bound. A text when it covers every element outside, else None."""
        from .bounds import TRANSCENDENTAL_ULPS, bounds
        b = self.bounds()
        if not b.transcendental:
            return None
        ulps = 2 * C.TRANSCENDENTAL_BACKWARD_ULPS   # ULPs, in u*|y| (ulp <= 2u|y|)
        wide = bounds(self.fn, *self.args, shadow_on=self.shadow_on,
                      transcendental_ulps=max(ulps, TRANSCENDENTAL_ULPS))
        extra = np.maximum(wide.worst[k] - b.worst[k], 0.0)
        if self._outside(self.ref[k], o, centre, allowed + extra)[bad].any():
            return None
        names = ", ".join(sorted(b.transcendental))
        return (f"every op is within its own bound when run alone; with {names} erring by "
                f"up to {C.TRANSCENDENTAL_BACKWARD_ULPS:g} ULPs inside the program (the other "
                "side may compute a function differently inside a fusion than alone), "
                "propagated through the program, every element is inside the bound")

    def _other_label(self) -> str:
        return "other"

    @staticmethod
    def _close(alt: Any, o: np.ndarray, allowed: Any, bad: np.ndarray) -> bool:
        alt = np.asarray(alt)
        if alt.shape != o.shape:
            return False
        if alt.dtype != o.dtype:
            alt = alt.astype(o.dtype)
        wide = np.complex128 if o.dtype.kind == "c" else np.float64
        a64, o64 = alt.astype(wide), o.astype(wide)
        from .bounds import unit_roundoff
        tol = allowed + 2 * unit_roundoff(o.dtype) * np.abs(a64)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(a64 - o64) <= tol) | (np.isnan(a64) & np.isnan(o64)) | (a64 == o64)
        return bool(np.all(ok[bad]))

    def _by_isolation(self, out: OutputReport, k: int, plain: Any) -> OutputReport:
        """A module without a jaxpr: judged by its ops alone."""
        if plain.ok:
            out.verdict = "agree"
            return out
        wide = self.widened()
        r, o = self.ref[k], self.other[k]
        from .bounds import unit_roundoff
        tol = 4 * unit_roundoff(r.dtype) * np.abs(r).astype(np.float64)
        for w in wide:
            if self._close(w[k], o, tol, np.ones(r.shape, bool)) and \
                    not self._close(r, o, tol, np.ones(r.shape, bool)):
                return self._settle(out, {"excess-precision"},
                                    [str(plain), "the reference computing bf16/f16 in f32 "
                                     "gives the other side's result"])
        ops = self.isolated()
        blamed = [v for v in ops if v.status == "blame"]
        if blamed:
            out.verdict, out.causes = "differ", {C.UNEXPLAINED}
            out.detail += [str(plain), f"op to blame: {blamed[0].label()}"]
            out.detail += ["  " + ln for ln in blamed[0].detail.splitlines()]
            return out
        missing = sorted({v.name for v in ops if v.status == "not isolated"})
        if not ops or missing:
            out.verdict, out.causes = "differ", {C.UNEXPLAINED}
            out.detail.append(str(plain))
            if missing:
                out.detail.append(f"not isolated (judged only as part of the program): "
                                  f"{', '.join(missing)}")
            return out
        found = {"summation-order"}
        for v in ops:
            if v.status == "explained":
                found |= v.causes
        expl = [f"{v.label()}: {v.detail.strip()}" for v in ops
                if v.status == "explained" and v.detail.strip()]
        return self._settle(out, found, [str(plain), "every op is within its own bound when "
                                         "run alone: the output difference is their rounding, "
                                         "amplified by the program"] + expl[:4])
