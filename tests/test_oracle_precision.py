"""oracle.precision: a bf16 MLP and a transformer block, op by op against a
float64 shadow (bits lost, where they are lost, cancellation, overflow)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from stablehlo_pjrt import oracle  # noqa: E402

RNG = np.random.default_rng(1)


def test_bf16_mlp():
    bf = jnp.bfloat16

    def mlp(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    x = RNG.standard_normal((8, 32)).astype(bf)
    w1 = (RNG.standard_normal((32, 32)) * 0.2).astype(bf)
    w2 = (RNG.standard_normal((32, 4)) * 0.2).astype(bf)
    r = oracle.precision(mlp, x, w1, w2)
    assert [row.primitive for row in r.rows] == ["dot_general", "tanh", "dot_general"]
    assert all(row.bits == 8 and 0 <= row.lost <= 8 for row in r.rows)
    # The second matmul sums rounded tanh values: it loses the most.
    assert r.worst(1)[0].index == 2 and r.rows[2].lost > r.rows[0].lost
    assert len(r.outputs_lost) == 1 and r.outputs_lost[0] == pytest.approx(r.rows[2].lost)
    text = str(r)
    assert "dot_general" in text and "bfloat16[8, 4]" in text and "test_oracle_precision" in text


def test_transformer_block_overflow_and_cancellation():
    def block(x, wq, wk, wv):
        q, k, v = x @ wq, x @ wk, x @ wv
        h = x + jax.nn.softmax(q @ k.T / 4.0, axis=-1) @ v
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) * jax.lax.rsqrt(var + 1e-5), jnp.exp(h * 100).astype(jnp.float16)

    x = RNG.standard_normal((8, 16)).astype(np.float32)
    ws = [(RNG.standard_normal((16, 16)) * 0.3).astype(np.float32) for _ in range(3)]
    r = oracle.precision(block, x, *ws)
    names = [row.primitive for row in r.rows]
    assert "exp" in names and "rsqrt" in names and "dot_general" in names
    # softmax's max subtraction and the centring h - mu cancel.
    assert max(row.cancel for row in r.rows if row.primitive == "sub") > 1
    # exp(100 h) in f16 overflows where the shadow is finite.
    conv = [row for row in r.rows if row.dtype == "float16"]
    assert conv and conv[-1].overflow > 0
    assert all(0 <= row.lost <= row.bits for row in r.rows)


def test_plot_needs_matplotlib(tmp_path):
    r = oracle.precision(lambda x: jnp.sin(x) - x, np.linspace(0, 1e-3, 8, dtype=np.float32))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="matplotlib"):
            r.plot(str(tmp_path / "p.png"))
        return
    r.plot(str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 0
