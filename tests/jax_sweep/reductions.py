"""Reductions and products: reduce, cumulative ops, dot_general, convolutions,
reduce_window."""

from .harness import case
from .inputs import apply_all, dtypes_for, edge_values, is_float, np_dtype, randn


@case("arrays", "x64", "arrays_slow")
def reductions(c):
    import jax.numpy as jnp
    np = c.np
    shapes = [(3, 4), (2, 3, 4), (3, 0)]
    dts = [d for d in dtypes_for(c.cfg, "all") if d not in ("int16", "uint8", "uint16")]
    if c.slow:
        shapes += [(5,), (0,), (2, 0, 3), (17, 33), (4, 5, 6, 7)]
        dts = dtypes_for(c.cfg, "all")
    for dt in dts:
        kind = np.dtype(np_dtype(dt)).kind
        fl = kind in "fc" or is_float(np_dtype(dt))
        tol = {"float16": 4e-3, "bfloat16": 3e-2}.get(dt, 1e-5)
        for shape in shapes:
            if len(shape) == 3 and not c.slow and dt not in ("float32", "int32", "float64", "int64"):
                continue
            x = randn(shape, dt)
            axes = [None] + list(range(len(shape))) + ([(0, len(shape) - 1)] if len(shape) > 1 else [])
            ops = {}
            for ax in axes:
                tag = f"{ax}"
                ops["sum" + tag] = lambda v, ax=ax: jnp.sum(v, axis=ax)
                ops["prod" + tag] = lambda v, ax=ax: jnp.prod(v, axis=ax)
                if fl:
                    ops["mean" + tag] = lambda v, ax=ax: jnp.mean(v, axis=ax)
                    if kind != "c":
                        ops["var" + tag] = lambda v, ax=ax: jnp.var(v, axis=ax)
                ops["any" + tag] = lambda v, ax=ax: jnp.any(v, axis=ax)
                ops["all" + tag] = lambda v, ax=ax: jnp.all(v, axis=ax)
                if kind != "c" and 0 not in shape:
                    ops["max" + tag] = lambda v, ax=ax: jnp.max(v, axis=ax)
                    ops["min" + tag] = lambda v, ax=ax: jnp.min(v, axis=ax)
                    if not isinstance(ax, tuple):
                        ops["argmax" + tag] = lambda v, ax=ax: jnp.argmax(v, axis=ax)
                        ops["argmin" + tag] = lambda v, ax=ax: jnp.argmin(v, axis=ax)
                elif kind != "c" and ax is not None and not isinstance(ax, tuple) and shape[ax] != 0:
                    ops["max_empty" + tag] = lambda v, ax=ax: jnp.max(v, axis=ax)
                    ops["min_init" + tag] = lambda v, ax=ax: jnp.min(v, axis=ax, initial=5)
            kw = {"rtol": tol * 4, "atol": tol} if fl else {}
            c(f"[{dt}{list(shape)}]", apply_all(ops), x, **kw)
    # NaN / inf / signed zero in reductions.
    for dt in dtypes_for(c.cfg, "float"):
        e = edge_values(dt)
        c(f"max_nan[{dt}]", jnp.max, e)
        c(f"min_nan[{dt}]", jnp.min, e)
        c(f"argmax_nan[{dt}]", jnp.argmax, e)
        c(f"argmin_nan[{dt}]", jnp.argmin, e)
        c(f"nanmax[{dt}]", jnp.nanmax, e)
        c(f"sum_inf[{dt}]", jnp.sum, e[8:])
        z = np.array([-0.0, -0.0, 0.0], dt)
        c(f"max_zero[{dt}]", jnp.max, z[:2])
        c(f"logsumexp[{dt}]", lambda v: __import__("jax").nn.logsumexp(v), e[np.isfinite(e.astype(float))][:6],
          rtol=1e-2 if dt in ("float16", "bfloat16") else 1e-6)


@case("arrays", "x64")
def cumulative(c):
    import jax.numpy as jnp
    from jax import lax
    for dt in dtypes_for(c.cfg, "all"):
        if dt == "bool":
            continue
        x = randn((4, 6), dt)
        tol = {"float16": 4e-3, "bfloat16": 3e-2}.get(dt)
        kw = {"rtol": tol, "atol": tol} if tol else ({"rtol": 1e-5, "atol": 1e-5} if dt.startswith(("float", "complex")) else {})
        for ax in (0, 1):
            c(f"cumsum[{dt} axis={ax}]", lambda v, ax=ax: jnp.cumsum(v, axis=ax), x, **kw)
            c(f"cumprod[{dt} axis={ax}]", lambda v, ax=ax: jnp.cumprod(v, axis=ax), x, **kw)
            if not dt.startswith("complex"):
                c(f"cummax[{dt} axis={ax}]", lambda v, ax=ax: lax.cummax(v, axis=ax), x)
                c(f"cummin_rev[{dt} axis={ax}]", lambda v, ax=ax: lax.cummin(v, axis=ax, reverse=True), x)
            c(f"cumlogsumexp[{dt}]", lambda v: lax.cumlogsumexp(v, axis=1), x, **kw) if dt.startswith("float") else None


@case("arrays", "x64", "arrays_slow")
def dots(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x64 = "x64" in c.cfg
    dts = ["float64", "int64", "complex128"] if x64 else ["float32", "float16", "bfloat16", "int8", "int32", "uint8", "complex64"]
    for dt in dts:
        tol = {"float16": 5e-3, "bfloat16": 3e-2}.get(dt, 1e-5)
        a, b = randn((3, 5), dt), randn((5, 4), dt, seed=1)
        v = randn((5,), dt, seed=2)
        kw = {"rtol": tol, "atol": tol}
        c(f"matmul[{dt}]", jnp.matmul, a, b, **kw)
        c(f"matvec[{dt}]", jnp.matmul, a, v, **kw)
        c(f"vdot[{dt}]", jnp.vdot, v, v, **kw)
        c(f"dot_0d[{dt}]", jnp.dot, v[0], v, **kw)
        ba, bb = randn((2, 3, 5), dt), randn((2, 5, 4), dt, seed=3)
        c(f"batch_matmul[{dt}]", jnp.matmul, ba, bb, **kw)
        c(f"broadcast_matmul[{dt}]", jnp.matmul, ba, b, **kw)
        c(f"einsum_bij_bjk[{dt}]", lambda p, q: jnp.einsum("bij,bjk->bik", p, q), ba, bb, **kw)
        c(f"einsum_trace[{dt}]", lambda p: jnp.einsum("ii->", p), randn((4, 4), dt), **kw)
        c(f"einsum_outer[{dt}]", lambda p, q: jnp.einsum("i,j->ij", p, q), v, v, **kw)
        c(f"einsum_multi[{dt}]", lambda p, q, r: jnp.einsum("bij,bjk,kl->bil", p, q, r), ba, bb,
          randn((4, 2), dt), rtol=tol * 4, atol=tol * 4)
        c(f"tensordot2[{dt}]", lambda p, q: jnp.tensordot(p, q, axes=([1, 2], [0, 1])),
          randn((2, 3, 4), dt), randn((3, 4, 5), dt), **kw)
        c(f"dot_general_batch_free[{dt}]", lambda p, q: lax.dot_general(
            p, q, (((2,), (1,)), ((0,), (2,)))), randn((2, 3, 4), dt), randn((5, 4, 2), dt), **kw)
        c(f"empty_contract[{dt}]", jnp.matmul, randn((3, 0), dt), randn((0, 4), dt))
    if not x64:
        a, b = randn((3, 5), "bfloat16"), randn((5, 4), "bfloat16", seed=1)
        c("mixed_pref_f32", lambda p, q: lax.dot(p, q, preferred_element_type=np.float32), a, b, rtol=1e-5, atol=1e-5)
        i8, j8 = randn((3, 5), "int8"), randn((5, 4), "int8", seed=1)
        c("mixed_i8_i32", lambda p, q: lax.dot(p, q, preferred_element_type=np.int32), i8, j8)
        c("mixed_promote_f16_f32", jnp.matmul, randn((3, 5), "float16"), randn((5, 4), "float32"), rtol=1e-3, atol=1e-3)
        for prec in ["highest", "default", "float32"]:
            c(f"precision_{prec}", lambda p, q, prec=prec: jnp.matmul(p, q, precision=prec),
              randn((3, 5)), randn((5, 4), seed=1), rtol=1e-5, atol=1e-5)
        c("int_overflow", jnp.matmul, np.full((2, 3), 100, np.int8), np.full((3, 2), 100, np.int8))
    if c.slow:
        c("big_matmul", jnp.matmul, randn((64, 96)), randn((96, 48), seed=1), rtol=1e-4, atol=1e-4)


@case("arrays", "arrays_slow")
def convolutions(c):
    from jax import lax
    np = c.np
    x = randn((2, 3, 9, 8))           # NCHW
    w = randn((4, 3, 3, 2), seed=1)    # OIHW
    kw = {"rtol": 2e-5, "atol": 2e-5}
    combos = []
    for strides in [(1, 1), (2, 1)]:
        for padding in ["VALID", "SAME", ((1, 2), (0, 1))]:
            for rhs_dil in [(1, 1), (2, 1)]:
                for lhs_dil in [(1, 1), (1, 2)]:
                    combos.append((strides, padding, rhs_dil, lhs_dil))
    if not c.slow:
        combos = combos[::3]
    for strides, padding, rhs_dil, lhs_dil in combos:
        if lhs_dil != (1, 1) and isinstance(padding, str):
            continue
        c(f"conv s={strides} p={padding} rd={rhs_dil} ld={lhs_dil}",
          lambda a, b, s=strides, p=padding, r=rhs_dil, l_=lhs_dil: lax.conv_general_dilated(
              a, b, s, p, lhs_dilation=l_, rhs_dilation=r), x, w, **kw)
    # feature groups, batch groups, NHWC
    xg = randn((2, 4, 7, 7))
    c("feature_group_2", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", feature_group_count=2),
      xg, randn((6, 2, 3, 3), seed=2), **kw)
    c("depthwise", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "VALID", feature_group_count=4),
      xg, randn((4, 1, 3, 3), seed=2), **kw)
    c("batch_group_2", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "VALID", batch_group_count=2),
      randn((4, 3, 6, 6)), randn((4, 3, 2, 2), seed=4), **kw)
    c("nhwc_hwio", lambda a, b: lax.conv_general_dilated(a, b, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
      randn((2, 8, 8, 3)), randn((3, 3, 3, 5), seed=5), **kw)
    c("conv1d", lambda a, b: lax.conv_general_dilated(a, b, (1,), [(2, 2)], rhs_dilation=(2,)),
      randn((1, 2, 10)), randn((3, 2, 3), seed=6), **kw)
    c("conv3d", lambda a, b: lax.conv_general_dilated(a, b, (1, 1, 1), "SAME"),
      randn((1, 2, 4, 4, 4)), randn((2, 2, 2, 2, 2), seed=7), **kw)
    c("conv_transpose", lambda a, b: lax.conv_transpose(a, b, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
      randn((1, 4, 4, 2)), randn((3, 3, 2, 3), seed=8), **kw)
    c("conv_bf16", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME"),
      x.astype(np_dtype("bfloat16")), w.astype(np_dtype("bfloat16")), rtol=3e-2, atol=3e-2)
    c("conv_f16_pref_f32", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", preferred_element_type=np.float32),
      x.astype(np.float16), w.astype(np.float16), rtol=1e-3, atol=1e-3)
    c("conv_int32", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME"),
      randn((1, 2, 5, 5), "int32"), randn((2, 2, 3, 3), "int32", seed=3))
    import jax
    c("conv_grad", jax.grad(lambda a, b: (lax.conv_general_dilated(a, b, (2, 1), "SAME", rhs_dilation=(1, 2)) ** 2).sum(),
                            argnums=(0, 1)), x, w, rtol=1e-4, atol=1e-4)


@case("arrays", "arrays_slow")
def windows(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in ["float32", "int32", "bfloat16"]:
        x = randn((2, 7, 6, 3), dt)
        for win, strides, pad in [((1, 2, 2, 1), (1, 2, 2, 1), "VALID"), ((1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
                                  ((1, 3, 2, 1), (1, 2, 1, 1), ((0, 0), (1, 2), (0, 1), (0, 0)))]:
            tag = f"[{dt} w={win} s={strides} p={pad}]"
            init = -np.inf if dt != "int32" else np.iinfo(np.int32).min
            c("max_pool" + tag, lambda v, w=win, s=strides, p=pad, i=init: lax.reduce_window(
                v, np.array(i, v.dtype), lax.max, w, s, p), x)
            c("sum_pool" + tag, lambda v, w=win, s=strides, p=pad: lax.reduce_window(
                v, np.array(0, v.dtype), lax.add, w, s, p), x,
              **({"rtol": 3e-2, "atol": 3e-2} if dt == "bfloat16" else {"rtol": 1e-5, "atol": 1e-5} if dt == "float32" else {}))
    x = randn((2, 7, 6, 3))
    c("window_dilation", lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID",
                                                      window_dilation=(1, 2, 1, 1), base_dilation=(1, 1, 2, 1)), x)
    c("min_pool", lambda v: lax.reduce_window(v, jnp.inf, lax.min, (1, 2, 3, 1), (1, 1, 2, 1), "SAME"), x)
    c("avg_pool_grad", jax.grad(lambda v: lax.reduce_window(v, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME").sum()), x)
    c("max_pool_grad", jax.grad(lambda v: (lax.reduce_window(v, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") ** 2).sum()), x,
      rtol=1e-6, atol=1e-6)
    c("reduce_window_variadic", lambda v, i: lax.reduce_window(
        (v, i), (-jnp.inf, 0), lambda a, b: (jnp.maximum(a[0], b[0]), jnp.where(a[0] >= b[0], a[1], b[1])),
        (2, 2), (1, 1), "VALID"), randn((5, 5)), np.arange(25, dtype=np.int32).reshape(5, 5))
