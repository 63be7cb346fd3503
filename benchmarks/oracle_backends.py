"""The oracle's verdicts on real backends: each workload compared on the
reference and on every backend named, with the verdict, its causes and,
for a ``differ``, the report and ``first_divergence``.

    python -m benchmarks.oracle_backends --against cuda,cpu --json OUT.json
    python -m benchmarks.oracle_backends --against cpu --only divide,gelu

A platform this process does not have (no GPU, say) is skipped with a
note, so the script runs on CPU-only machines too. Needs the reference and
the other platforms in one process (JAX_PLATFORMS unset, or e.g.
"cuda,cpu,stablehlo_ref"). ``--x64`` enables jax_enable_x64 (float64
arguments stay float64; without it the oracle canonicalises them to
float32 as jax.jit does). The inputs come from one numpy generator
(seed 0) drawn in the order of WORKLOADS, so a run is repeatable.
The verdicts seen on XLA's CUDA plugin are in docs/oracle.md.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from typing import Any, Callable

import numpy as np


def workloads() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    rng = np.random.default_rng(0)

    def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def mlp_grad(x: Any, w1: Any, w2: Any) -> Any:
        def loss(w1: Any, w2: Any) -> Any:
            return jnp.mean((jnp.tanh(x @ w1) @ w2) ** 2)
        return jax.grad(loss, argnums=(0, 1))(w1, w2)

    def attention(q: Any, k: Any, v: Any) -> Any:
        return jax.nn.softmax(q @ k.T / np.float32(8.0), axis=-1) @ v

    def layer_norm(x: Any) -> Any:
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5)

    hi = lax.Precision.HIGHEST
    u = rng.uniform(0.01, 5, 100_000).astype(np.float32)
    return {
        "matmul 512 default precision": (lambda a, b: a @ b, (f32(512, 512), f32(512, 512))),
        "matmul 512 HIGHEST": (lambda a, b: jnp.matmul(a, b, precision=hi),
                               (f32(512, 512), f32(512, 512))),
        "matmul 256 f64": (lambda a, b: a @ b, (f32(256, 256).astype(np.float64),
                                                f32(256, 256).astype(np.float64))),
        "matmul 256 bf16": (lambda a, b: a @ b, (f32(256, 256).astype(jnp.bfloat16),
                                                 f32(256, 256).astype(jnp.bfloat16))),
        "conv NCHW default": (lambda x, w: lax.conv(x, w, (1, 1), "SAME"),
                              (f32(4, 16, 32, 32), f32(32, 16, 3, 3))),
        "conv NCHW HIGHEST": (lambda x, w: lax.conv(x, w, (1, 1), "SAME", precision=hi),
                              (f32(4, 16, 32, 32), f32(32, 16, 3, 3))),
        "mlp gradient": (mlp_grad, (f32(64, 256), f32(256, 128, scale=0.1),
                                    f32(128, 10, scale=0.1))),
        "attention": (attention, (f32(128, 64), f32(128, 64), f32(128, 64))),
        "softmax rows": (lambda x: jax.nn.softmax(x, -1), (f32(256, 1000),)),
        "logsumexp rows": (lambda x: jax.nn.logsumexp(x, -1), (f32(256, 1000),)),
        "layer norm": (layer_norm, (f32(256, 1000),)),
        "sum 1e6": (jnp.sum, (f32(1_000_000),)),
        "mean axis0 (1e5,4)": (lambda x: x.mean(0), (f32(100_000, 4),)),
        "cumsum 1e5": (jnp.cumsum, (f32(100_000),)),
        "sort 1e5": (jnp.sort, (f32(100_000),)),
        "exp": (jnp.exp, (f32(100_000, scale=10),)),
        "log": (jnp.log, (u,)),
        "sin large args": (jnp.sin, (f32(100_000, scale=1000),)),
        "tanh": (jnp.tanh, (f32(100_000, scale=3),)),
        "erf": (jax.scipy.special.erf, (f32(100_000, scale=2),)),
        "lgamma": (lax.lgamma, (u,)),
        "digamma": (lax.digamma, (u,)),
        "pow": (lambda x, y: x ** y, (u, f32(100_000, scale=2))),
        "atan2": (jnp.arctan2, (f32(100_000), f32(100_000))),
        "rsqrt": (lax.rsqrt, (u,)),
        "divide": (lambda x, y: x / y, (f32(100_000), u)),
        "gelu": (jax.nn.gelu, (f32(100_000, scale=3),)),
        "bf16 round trip": (lambda x: jnp.tanh(x.astype(jnp.bfloat16) * 3).astype(jnp.float32),
                            (f32(4096),)),
        "complex64 mul/exp": (lambda z: jnp.exp(z) * z,
                              ((f32(10_000) + 1j * f32(10_000)).astype(np.complex64),)),
        "fft 4096": (jnp.fft.fft, ((f32(4096) + 1j * f32(4096)).astype(np.complex64),)),
        "int32 mul/shift": (lambda a, b: (a * b) >> 3,
                            (rng.integers(-2**20, 2**20, 10_000, dtype=np.int32),) * 2),
        "tiny * 0.5 (subnormals)": (lambda x: x * np.float32(0.5),
                                    (np.full(64, 1.5e-38, np.float32),)),
    }


def _has(platform: str) -> str | None:
    """None when this process has ``platform``, else why not."""
    import jax
    try:
        return None if jax.devices(platform) else "no devices"
    except RuntimeError as e:
        return " ".join(str(e).split())[:200]


def run_one(name: str, fn: Callable[..., Any], args: tuple[Any, ...],
            against: str) -> dict[str, Any]:
    from stablehlo_pjrt import oracle
    t = time.perf_counter()
    row: dict[str, Any] = {"workload": name, "against": against}
    try:
        r = oracle.compare(fn, *args, against=against)
        row.update(ok=r.ok, verdict=r.verdict, causes=sorted(r.causes))
        if r.verdict in ("explained", "differ"):
            row["report"] = str(r)[:3000]
        if not r.ok:
            try:
                row["first_divergence"] = str(oracle.first_divergence(
                    fn, *args, against=against))[:3000]
            except Exception as e:  # noqa: BLE001 - recorded in the row
                row["first_divergence"] = f"error: {type(e).__name__}: {e}"[:2000]
    except Exception as e:  # noqa: BLE001 - recorded in the row
        row["error"] = f"{type(e).__name__}: {e}"[:2000]
        row["tb"] = traceback.format_exc()[-2000:]
    row["s"] = round(time.perf_counter() - t, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", default="cuda,cpu",
                   help="comma-separated JAX platforms (default cuda,cpu)")
    p.add_argument("--json", help="write the rows here (rewritten after each row)")
    p.add_argument("--only", help="comma-separated substrings of workload names")
    p.add_argument("--x64", action="store_true", help="enable jax_enable_x64")
    a = p.parse_args(argv)
    import jax
    if a.x64:
        jax.config.update("jax_enable_x64", True)
    platforms = [b for b in a.against.split(",") if b]
    rows: list[dict[str, Any]] = []
    for b in list(platforms):
        why = _has(b)
        if why is not None:
            print(f"skipping {b}: not in this process ({why})", flush=True)
            rows.append({"against": b, "skipped": why})
            platforms.remove(b)
    print("jax", jax.__version__, "platforms", platforms, flush=True)
    only = [s for s in (a.only or "").split(",") if s]
    for name, (fn, args) in workloads().items():
        if only and not any(s in name for s in only):
            continue
        for b in platforms:
            row = run_one(name, fn, args, b)
            rows.append(row)
            brief = {k: v for k, v in row.items()
                     if k not in ("report", "tb", "first_divergence")}
            print(json.dumps(brief), flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(rows, f, indent=1)
    bad = [r for r in rows if r.get("verdict") == "differ" or "error" in r]
    print(f"{len(rows)} row(s); differ or error: "
          f"{', '.join(r['workload'] + ' on ' + r['against'] for r in bad) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
