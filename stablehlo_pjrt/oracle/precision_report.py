"""Where a program loses accuracy: its own types next to a float64 shadow.

    report = oracle.precision(fn, *args)
    print(report)              # one row per op: bits lost, cancellation, ...
    report.worst(5)            # the ops that lose the most
    report.plot("loss.png")    # with matplotlib installed (the "plot" extra)

Every op of ``fn``'s jaxpr (calls such as jit and custom_jvp functions are
walked into) runs twice, side by side: in the program's own types on the
own-type values, and in float64 on the float64 values (explicit converts to
narrower types are skipped in the shadow, so their rounding counts as lost
bits). Per op the report gives:

* ``bits``: the precision of the op's type (24 for f32, 8 for bf16);
* ``lost``: bits of that precision that are wrong in the op's result, at
  its worst element, measured against the shadow (``log2(rel err) + bits``,
  from 0 = exact to ``bits`` = nothing right);
* ``grown``: how many of them this op added, ``lost`` minus the largest
  ``lost`` of its inputs (the ops where the error grows);
* ``cancel``: bits of cancellation an add/subtract causes,
  ``log2((|a|+|b|)/|a+b|)`` at its worst element;
* ``overflow``/``underflow``: elements that are inf, or zero/subnormal, in
  the program's type where the shadow has a finite, normal number.

Loops, branches and scans are one row each (their bodies are not walked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import compat

_UNITS = ("cond", "while", "scan")


@dataclass
class OpPrecision:
    index: int
    primitive: str
    source: str
    dtype: str
    shape: tuple[int, ...]
    bits: int
    lost: float
    grown: float
    cancel: float = 0.0
    overflow: int = 0
    underflow: int = 0


@dataclass
class PrecisionReport:
    rows: list[OpPrecision] = field(default_factory=list)
    outputs_lost: list[float] = field(default_factory=list)   # bits lost per output leaf

    def worst(self, n: int = 5) -> list[OpPrecision]:
        """The ``n`` ops that add the most lost bits."""
        return sorted(self.rows, key=lambda r: -r.grown)[:n]

    def __str__(self) -> str:
        head = (f"{'#':>4} {'op':<22} {'type':<16} {'bits':>4} {'lost':>5} {'grown':>5} "
                f"{'cancel':>6} {'ovf':>4} {'unf':>4}  source")
        lines = [head]
        for r in self.rows:
            t = f"{r.dtype}{list(r.shape)}"
            lines.append(f"{r.index:>4} {r.primitive:<22.22} {t:<16.16} {r.bits:>4} "
                         f"{r.lost:>5.1f} {r.grown:>+5.1f} {r.cancel:>6.1f} {r.overflow:>4} "
                         f"{r.underflow:>4}  {r.source}")
        if self.outputs_lost:
            lines.append("outputs: " + ", ".join(f"#{k}: {b:.1f} bits lost"
                                                 for k, b in enumerate(self.outputs_lost)))
        return "\n".join(lines)

    def plot(self, path: str) -> str:
        """Bits lost and grown per op, as a bar chart saved to ``path``
        (needs matplotlib: ``pip install stablehlo-pjrt[plot]``)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("oracle.precision(...).plot needs matplotlib: "
                              "pip install 'stablehlo-pjrt[plot]'") from e
        fig, ax = plt.subplots(figsize=(max(6, len(self.rows) * 0.3), 4))
        x = np.arange(len(self.rows))
        ax.bar(x, [r.lost for r in self.rows], label="bits lost")
        ax.bar(x, [max(r.grown, 0) for r in self.rows], label="added by the op", alpha=0.7)
        ax.set_xticks(x, [r.primitive for r in self.rows], rotation=90, fontsize=7)
        ax.set_ylabel("bits")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path


def _is_float(dtype: Any) -> bool:
    from .bounds import _is_float as f
    return f(dtype)


def _lost_bits(own: Any, shadow: Any, bits: int) -> float:
    o = np.asarray(own).astype(np.float64)
    s = np.asarray(shadow).astype(np.float64)
    ok = np.isfinite(o) & np.isfinite(s)
    if not ok.any():
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.maximum(np.abs(s[ok]), np.finfo(np.float64).tiny)
        rel = np.abs(o[ok] - s[ok]) / scale
    worst = float(np.max(rel)) if rel.size else 0.0
    if worst == 0:
        return 0.0
    return float(np.clip(np.log2(worst) + bits, 0, bits))


def precision(fn: Callable[..., Any], *args: Any) -> PrecisionReport:
    """Runs ``fn(*args)`` op by op in its own types and in a float64 shadow;
    returns the per-op :class:`PrecisionReport` (see the module docstring)."""
    import jax
    source_info_util = compat.jax_internal("", "source_info_util")

    from ._lowering import unwrap_keys
    from .bounds import _subjaxpr, _widen_params
    from .causes import _finfo
    fn, args = unwrap_keys(fn, args)
    closed = jax.make_jaxpr(fn)(*args)
    rows: list[OpPrecision] = []
    lost_of: dict[int, float] = {}

    def bits_of(dtype: Any) -> int:
        return int(_finfo(np.dtype(dtype)).nmant) + 1

    def run(jaxpr: Any, consts: Any, own_in: list[Any], sh_in: list[Any]) -> list[Any]:
        env: dict[Any, tuple[Any, Any]] = {}

        def read(v: Any) -> tuple[Any, Any]:
            if hasattr(v, "val"):
                x = np.asarray(v.val)
                return x, (x.astype(np.float64) if _is_float(x.dtype) else x)
            return env[v]

        for v, c in zip(jaxpr.constvars, consts):
            c = np.asarray(c)
            env[v] = (c, c.astype(np.float64) if _is_float(c.dtype) else c)
        for v, o, s in zip(jaxpr.invars, own_in, sh_in):
            env[v] = (o, s)
        for e in jaxpr.eqns:
            prim = e.primitive.name
            ins = [read(v) for v in e.invars]
            sub = _subjaxpr(prim, dict(e.params))
            if sub is not None:
                outs = run(sub[0], sub[1], [o for o, _ in ins], [s for _, s in ins])
                for v, o in zip(e.outvars, outs):
                    env[v] = o
                continue
            own = e.primitive.bind(*[o for o, _ in ins], **e.params)
            own = list(own) if e.primitive.multiple_results else [own]
            if prim in _UNITS:
                shadow = [np.asarray(o).astype(np.float64) if _is_float(np.asarray(o).dtype)
                          else o for o in own]
            elif prim == "reduce_precision":
                shadow = [ins[0][1]]
            else:
                sh = e.primitive.bind(*[s for _, s in ins], **_widen_params(prim, e.params))
                shadow = list(sh) if e.primitive.multiple_results else [sh]
            in_lost = max([lost_of.get(id(v), 0.0) for v in e.invars if not hasattr(v, "val")],
                          default=0.0)
            for v, o, s in zip(e.outvars, own, shadow):
                o, s = np.asarray(o), np.asarray(s)
                if _is_float(o.dtype) and o.dtype.kind != "c":
                    s = s.astype(np.float64)
                    bits = bits_of(o.dtype)
                    lost = _lost_bits(o, s, bits)
                    lost_of[id(v)] = lost
                    tiny = float(_finfo(o.dtype).tiny)
                    o64 = o.astype(np.float64)
                    with np.errstate(invalid="ignore"):
                        ovf = int(np.sum(np.isinf(o64) & np.isfinite(s)))
                        unf = int(np.sum((np.abs(o64) < tiny) & (np.abs(s) >= tiny) &
                                         np.isfinite(s)))
                    cancel = 0.0
                    if prim in ("add", "sub", "add_any") and len(ins) == 2:
                        a, b = (np.asarray(x[1], np.float64) for x in ins)
                        r = a + b if prim != "sub" else a - b
                        with np.errstate(divide="ignore", invalid="ignore"):
                            k = (np.abs(a) + np.abs(b)) / np.abs(r)
                        k = k[np.isfinite(k)]
                        cancel = float(np.log2(k.max())) if k.size and k.max() > 1 else 0.0
                    rows.append(OpPrecision(
                        len(rows), prim, source_info_util.summarize(e.source_info),
                        str(o.dtype), o.shape, bits, lost, lost - in_lost, cancel, ovf, unf))
                env[v] = (o, s)
        return [read(v) for v in jaxpr.outvars]

    leaves = [np.asarray(x) for x in jax.tree.leaves(args)]
    with jax.enable_x64(True):
        sh_in = [x.astype(np.float64) if _is_float(x.dtype) else x for x in leaves]
        outs = run(closed.jaxpr, closed.consts, leaves, sh_in)
    report = PrecisionReport(rows)
    for o, s in outs:
        o = np.asarray(o)
        if _is_float(o.dtype) and o.dtype.kind != "c":
            report.outputs_lost.append(_lost_bits(o, s, bits_of(o.dtype)))
    return report
