"""Whole programs: control flow, aliasing of in-place updates, autodiff, small
models, and a mix of programs that once went wrong."""

from .harness import case, xfail
from .inputs import edge_values, np_dtype, randn

# Differences from XLA CPU that are not our bugs: "case/label" glob -> reason
# (see harness.xfail).
xfail({
    "more_programs/pure_callback": "JAX itself refuses host callbacks on non-CPU/GPU/TPU platforms "
                                   "(EmitPythonCallback not supported on stablehlo_ref)",
})



@case("programs")
def more_programs(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((2, 6, 6, 3))
    mp = lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")  # noqa: E731
    for dt in ["float32", "bfloat16", "float16"]:
        xv = x.astype(np_dtype(dt))
        tol = {"float32": 1e-6, "bfloat16": 1e-2, "float16": 1e-3}[dt]
        c(f"jvp_max_pool[{dt}]", lambda v, t: jax.jvp(mp, (v,), (t,)), xv, randn((2, 6, 6, 3), seed=1).astype(np_dtype(dt)),
          rtol=tol, atol=tol)
    c("dot_product_attention", lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
      randn((2, 5, 2, 4)), randn((2, 5, 2, 4), seed=1), randn((2, 5, 2, 4), seed=2), rtol=1e-5, atol=1e-6)
    c("image_resize", lambda v: jax.image.resize(v, (2, 9, 4, 3), "linear"), x, rtol=1e-5, atol=1e-6)
    c("image_resize_cubic", lambda v: jax.image.resize(v, (2, 3, 8, 3), "cubic"), x, rtol=1e-5, atol=1e-6)
    c("convolve2d", lambda a, b: jax.scipy.signal.convolve2d(a, b, mode="same"), randn((7, 8)), randn((3, 3), seed=1),
      rtol=1e-5, atol=1e-6)
    c("nan_reductions", lambda v: (jnp.nanmean(v), jnp.nanstd(v, axis=0), jnp.nanargmin(v, axis=1)),
      np.where(randn((4, 5)) > 1, np.nan, randn((4, 5), seed=2)).astype(np.float32), rtol=1e-6, atol=1e-6)
    c("cumsum_bool_int8_overflow", lambda b, i: (jnp.cumsum(b), jnp.cumsum(i, dtype=jnp.int8)),
      randn((9,), "bool"), np.full(9, 100, np.int8))
    a = randn((3, 4, 4))
    spd = (a @ np.swapaxes(a, 1, 2) + 4 * np.eye(4)).astype(np.float32)
    tol = {"rtol": 2e-4, "atol": 2e-4}
    c("batched_cholesky_solve", lambda m, r: (jnp.linalg.cholesky(m), jnp.linalg.solve(m, r)), spd, randn((3, 4, 2), seed=3), **tol)
    c("batched_qr_recon", lambda m: (lambda q, r: q @ r)(*jnp.linalg.qr(m)), a, **tol)
    c("batched_eigh_values", lambda m: jnp.linalg.eigh(m)[0], spd, **tol)
    c("batched_svd_recon", lambda m: (lambda u, s, vt: (u * s[..., None, :]) @ vt)(*jnp.linalg.svd(m, full_matrices=False)), a, **tol)
    c("batched_det_inv", lambda m: (jnp.linalg.det(m), jnp.linalg.inv(m)), a, **tol)
    za = randn((4, 4), "complex64")
    herm = (za @ za.conj().T + 4 * np.eye(4)).astype(np.complex64)
    c("complex_cholesky", jnp.linalg.cholesky, herm, **tol)
    c("complex_solve_inv", lambda m, r: (jnp.linalg.solve(m, r), jnp.linalg.inv(m)), za, randn((4, 2), "complex64", seed=4), **tol)
    c("complex_eigh_values", lambda m: jnp.linalg.eigh(m)[0], herm, **tol)
    c("complex_qr_recon", lambda m: (lambda q, r: q @ r)(*jnp.linalg.qr(m)), za, **tol)
    c("complex_svd_values", lambda m: jnp.linalg.svd(m, compute_uv=False), za, **tol)
    c("eigh_vectors_abs", lambda m: jnp.abs(jnp.linalg.eigh(m)[1]), spd[0], **tol)
    c("tridiagonal_solve", lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b),
      np.array([0, 1, 1, 1], np.float32), np.array([4, 4, 4, 4], np.float32), np.array([1, 1, 1, 0], np.float32),
      randn((4, 2)), **tol)
    c("schur", lambda m: jnp.abs(jnp.diag(jax.scipy.linalg.schur(m)[0])), spd[0], **tol)
    c("hessenberg_recon", lambda m: (lambda h, q: q @ h @ q.T)(*jax.scipy.linalg.hessenberg(m, calc_q=True)), a[0], **tol)
    c("pure_callback", lambda v: jax.pure_callback(lambda u: np.asarray(u) * 2, jax.ShapeDtypeStruct(v.shape, v.dtype), v),
      randn((3,)))
    c("fft_big_odd", lambda v: jnp.fft.fft(v), randn((3, 97), "complex64"), rtol=1e-4, atol=1e-4)
    c("rfft_odd_len", lambda v: jnp.fft.irfft(jnp.fft.rfft(v), n=15), randn((15,)), rtol=1e-5, atol=1e-5)
    c("top_k_full_int", lambda v: lax.top_k(v, 9), randn((3, 9), "int32"))
    c("sort_desc_multi", lambda a, b: lax.sort((a, b), num_keys=1, is_stable=True, dimension=0),
      randn((8, 2), "int32") % 3, randn((8, 2), seed=1))
    c("while_big_trip", lambda n: lax.fori_loop(0, n, lambda i, s: s + (i % 7), 0), np.int32(3000))
    c("bitcast_f64_u32_pair", lambda v: lax.bitcast_convert_type(v.astype(jnp.float32), jnp.uint16), randn((4,)))
    c("clamp_int_broadcast", lambda v: lax.clamp(np.int32(-3), v, np.int32(4)), randn((9,), "int32"))
    c("population_count_u8", lax.population_count, np.arange(256, dtype=np.uint8))
    c("argsort_f16_nan", lambda v: jnp.argsort(v, stable=True), edge_values("float16"))
    c("rng_uniform_bits_f16", lambda s: jax.random.uniform(jax.random.key(s), (8,), dtype=jnp.float16), np.uint32(5))


@case("programs")
def control_flow(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((4,))
    c("cond", lambda p, v: lax.cond(p, lambda u: u * 2, lambda u: -u, v), np.bool_(True), x)
    c("cond_false", lambda p, v: lax.cond(p > 0, lambda u: u * 2, lambda u: -u, v), np.int32(0), x)
    c("switch", lambda i, v: lax.switch(i, [jnp.sin, jnp.cos, lambda u: u + 1], v), np.int32(7), x, ulps=4)
    c("switch_neg", lambda i, v: lax.switch(i, [jnp.sin, jnp.cos, lambda u: u + 1], v), np.int32(-3), x, ulps=4)
    c("while_loop", lambda v: lax.while_loop(lambda s: s[0] < 10, lambda s: (s[0] + 1, s[1] * 1.5), (0, v)), x, rtol=1e-6)
    c("while_zero_trip", lambda v: lax.while_loop(lambda s: s[0] < 0, lambda s: (s[0] + 1, s[1] * 1.5), (0, v)), x)
    c("fori_loop", lambda v: lax.fori_loop(0, 7, lambda i, s: s + i * s, v), x, rtol=1e-6)
    c("fori_loop_dynamic", lambda n, v: lax.fori_loop(0, n, lambda i, s: s * 0.5 + i, v), np.int32(5), x, rtol=1e-6)
    c("scan", lambda v: lax.scan(lambda cr, a: (cr + a, cr * a), 0.0, v), randn((6,)), rtol=1e-6, atol=1e-6)
    c("scan_reverse_unroll", lambda v: lax.scan(lambda cr, a: (cr * 0.9 + a, jnp.sin(cr)), jnp.zeros(3), v,
                                                reverse=True, unroll=2), randn((5, 3)), ulps=8, atol=1e-6)
    c("scan_length_only", lambda: lax.scan(lambda cr, _: (cr + 1, cr), 0, None, length=4))
    c("map", lambda v: lax.map(lambda r: jnp.sum(r ** 2), v), randn((5, 3)), rtol=1e-6)
    c("map_batched", lambda v: lax.map(lambda r: r @ r, v, batch_size=2), randn((5, 3)), rtol=1e-6)
    c("associative_scan_add", lambda v: lax.associative_scan(jnp.add, v), randn((11,)), rtol=1e-5, atol=1e-6)
    c("associative_scan_max_rev", lambda v: lax.associative_scan(jnp.maximum, v, reverse=True, axis=1), randn((3, 9)))
    c("nested_while_cond", lambda v: lax.while_loop(
        lambda s: s[0] < 5, lambda s: (s[0] + 1, lax.cond(s[0] % 2 == 0, lambda u: u + 1, lambda u: u * 2, s[1])), (0, v)), x)
    c("vmap_cond", jax.vmap(lambda p, v: lax.cond(p, jnp.sin, jnp.cos, v)), np.array([True, False, True, False]), x, ulps=4)
    c("vmap_while", jax.vmap(lambda n: lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] + s[0]), (0, 0))[1]),
      np.array([0, 3, 5, 1], np.int32))
    c("checkpoint_grad", jax.grad(lambda v: jax.checkpoint(lambda u: jnp.sin(u).sum() * jnp.cos(u).sum())(v)), x, ulps=16)


@case("programs")
def aliasing(c):
    """In-place updates must never be visible through another name: values
    that are updated and also kept (returned, carried twice, emitted per
    step, used after the update)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((6,))
    u = randn((2,), seed=1)
    c("dus_keep_operand", lambda v, w: (v, lax.dynamic_update_slice(v, w, (2,)), v * 2), x, u)
    c("dus_twice_same_operand", lambda v, w: (lax.dynamic_update_slice(v, w, (0,)),
                                              lax.dynamic_update_slice(v, w * 3, (4,))), x, u)
    c("dus_then_read_old", lambda v, w: lax.dynamic_update_slice(v, w, (1,)) + v, x, u)
    c("at_set_keep", lambda v: (v.at[0].set(9.0), v.at[1].add(5.0), v), x)

    def body(i, carry):
        a, b, hist = carry
        old = a
        a = lax.dynamic_update_slice(a, jnp.full((1,), i, a.dtype), (i % 6,))
        hist = hist.at[i].set(old)
        return a, old, hist
    c("fori_carry_old_and_new", lambda v: lax.fori_loop(0, 5, body, (v, v, jnp.zeros((5, 6), v.dtype))), x)
    c("scan_emit_carry", lambda v: lax.scan(lambda a, i: (a.at[i].set(-1.0), a), v, jnp.arange(6)), x)
    c("scan_emit_updated", lambda v: lax.scan(lambda a, i: ((b := a.at[i].add(1.0)), (a, b)), v, jnp.arange(4)), x)
    c("while_duplicate_carry", lambda v: lax.while_loop(
        lambda s: s[0] < 4,
        lambda s: (s[0] + 1, s[1].at[s[0]].set(s[2][s[0]] * 10), s[1]), (0, v, v)), x)
    c("cond_branch_updates", lambda p, v: (lax.cond(p, lambda a: a.at[0].set(7.0), lambda a: a, v), v), np.bool_(True), x)
    c("scan_100_steps_history", lambda v: lax.scan(
        lambda h, t: (jnp.tanh(h * 0.9 + t), h), v, randn((100, 6), seed=3)), x, rtol=1e-5, atol=1e-6)
    c("grad_through_updates", jax.grad(lambda v: lax.fori_loop(
        0, 3, lambda i, a: a.at[i].multiply(a[i + 1]), v).sum()), x, rtol=1e-6, atol=1e-6)


@case("programs", "x64")
def autodiff(c):
    import jax
    import jax.numpy as jnp
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    tol = {"rtol": 1e-6 if dt == "float32" else 1e-12, "atol": 1e-6 if dt == "float32" else 1e-12}
    f = lambda v: jnp.sum(jnp.tanh(v) * jnp.sin(v) ** 2 + jnp.exp(-v ** 2))  # noqa: E731
    x = randn((6,), dt)
    c("grad", jax.grad(f), x, **tol)
    c("value_and_grad", jax.value_and_grad(f), x, **tol)
    c("hessian", jax.hessian(f), x, **tol)
    c("jvp", lambda v, t: jax.jvp(f, (v,), (t,)), x, randn((6,), dt, seed=1), **tol)
    c("vjp", lambda v, t: jax.vjp(lambda u: jnp.cumsum(jnp.sin(u)), v)[1](t), x, randn((6,), dt, seed=1), **tol)
    c("jacfwd_jacrev", lambda v: (jax.jacfwd(jnp.sort)(v), jax.jacrev(lambda u: u[::2] * u[1::2])(v)), x, **tol)
    c("vmap_grad", jax.vmap(jax.grad(f)), randn((3, 6), dt), **tol)
    c("vmap_matmul_in_axes", jax.vmap(jnp.matmul, in_axes=(0, None)), randn((3, 2, 4), dt), randn((4, 5), dt), **tol)
    c("grad_of_scan", jax.grad(lambda v: jax.lax.scan(lambda cr, a: (cr * jnp.cos(a), cr), 1.0, v)[0]), x, **tol)
    c("grad_of_while_fori", jax.grad(lambda v: jax.lax.fori_loop(0, 3, lambda i, u: jnp.sin(u) * v, v).sum()), x, **tol)
    c("grad_gather_scatter", jax.grad(lambda v: (v[np.array([0, 2, 2, 5])] ** 2).sum() + v.at[1].set(3.0).prod()), x, **tol)
    c("grad_max_reduce", jax.grad(lambda v: jnp.max(v.reshape(2, 3), axis=1).sum()), x, **tol)
    c("custom_jvp_relu_softplus", jax.grad(lambda v: (jax.nn.relu(v) + jax.nn.softplus(v)).sum()), x, **tol)
    c("grad_linalg_solve", jax.grad(lambda m: jnp.linalg.solve(m + 3 * jnp.eye(3, dtype=m.dtype), jnp.ones(3, m.dtype)).sum()),
      randn((3, 3), dt), rtol=1e-4 if dt == "float32" else 1e-10, atol=1e-5 if dt == "float32" else 1e-10)


@case("programs", "x64")
def models(c):
    import jax
    import jax.numpy as jnp
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    tol = {"rtol": 2e-5, "atol": 2e-5} if dt == "float32" else {"rtol": 1e-11, "atol": 1e-11}

    def mlp_init():
        return [(randn((8, 16), dt, seed=1, scale=0.3), randn((16,), dt, seed=2, scale=0.1)),
                (randn((16, 4), dt, seed=3, scale=0.3), randn((4,), dt, seed=4, scale=0.1))]

    def mlp(params, x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            if i < len(params) - 1:
                x = jax.nn.gelu(x)
        return x

    def loss(params, x, y):
        logits = mlp(params, x)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 4), -1))

    def step(params, x, y):
        lval, g = jax.value_and_grad(loss)(params, x, y)
        return lval, jax.tree_util.tree_map(lambda p, gp: p - 0.1 * gp, params, g)

    xb = randn((10, 8), dt, seed=5)
    yb = np.arange(10, dtype=np.int32) % 4
    c("mlp_train_step", step, mlp_init(), xb, yb, **tol)

    def train3(params, x, y):
        def body(p, _):
            lv, p = step(p, x, y)
            return p, lv
        return jax.lax.scan(body, params, None, length=3)
    c("mlp_train_scan3", train3, mlp_init(), xb, yb, **tol)

    d, h, T = 16, 2, 5

    def tinit():
        return {"wq": randn((d, d), dt, 11, 0.25), "wk": randn((d, d), dt, 12, 0.25), "wv": randn((d, d), dt, 13, 0.25),
                "wo": randn((d, d), dt, 14, 0.25), "w1": randn((d, 32), dt, 15, 0.25), "w2": randn((32, d), dt, 16, 0.25),
                "g1": np.ones(d, dt), "g2": np.ones(d, dt)}

    def layer_norm(x, g):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g

    def block(p, x):
        B = x.shape[0]
        y = layer_norm(x, p["g1"])
        q, k, v = (jnp.reshape(y @ p[n], (B, T, h, d // h)) for n in ("wq", "wk", "wv"))
        s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d // h).astype(dt)
        mask = jnp.tril(jnp.ones((T, T), bool))
        s = jnp.where(mask, s, jnp.finfo(dt).min)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, d)
        x = x + o @ p["wo"]
        y = layer_norm(x, p["g2"])
        return x + jax.nn.relu(y @ p["w1"]) @ p["w2"]

    xt = randn((2, T, d), dt, seed=20)
    c("transformer_block", block, tinit(), xt, **tol)
    c("transformer_grad", jax.grad(lambda p, x: (block(p, x) ** 2).mean()), tinit(), xt, **tol)
    if dt == "float32":
        c("transformer_bf16", lambda p, x: block(jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), p),
                                                 x.astype(jnp.bfloat16)), tinit(), xt, rtol=5e-2, atol=5e-2)
