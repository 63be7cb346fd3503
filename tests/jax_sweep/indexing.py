"""Indexing and data movement: gather/scatter (also batched under vmap), dynamic
slices, sorting, shape ops."""

from .harness import case
from .inputs import edge_values, randn


@case("arrays")
def batched_indexing(c):
    """vmap of gathers and scatters (batching dims), dynamic slices."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((3, 6, 4))
    i = np.array([[0, 5], [-1, 2], [7, 1]], np.int32)
    c("vmap_take", jax.vmap(lambda v, j: v[j]), x, i)
    c("vmap_take_clip", jax.vmap(lambda v, j: jnp.take(v, j, axis=0, mode="clip")), x, i)
    c("vmap_take_fill", jax.vmap(lambda v, j: jnp.take(v, j, axis=1, mode="fill", fill_value=np.nan)), x, i)
    for op in ["set", "add", "max", "mul"]:
        c(f"vmap_at_{op}", jax.vmap(lambda v, j, u, op=op: getattr(v.at[j], op)(u)), x, i, randn((3, 2, 4), seed=1),
          rtol=1e-6, atol=1e-6)
        c(f"vmap_at_{op}_drop", jax.vmap(lambda v, j, u, op=op: getattr(v.at[j], op)(u, mode="drop")), x, i,
          randn((3, 2, 4), seed=1), rtol=1e-6, atol=1e-6)
    c("vmap_dynamic_slice", jax.vmap(lambda v, j: lax.dynamic_slice(v, (j, 1), (3, 2))), x, np.array([0, 4, -2], np.int32))
    c("vmap_dynamic_update_slice", jax.vmap(lambda v, u, j: lax.dynamic_update_slice(v, u, (j, 2))), x,
      randn((3, 2, 3), seed=2), np.array([5, 0, 3], np.int32))
    c("vmap_vmap_gather", jax.vmap(jax.vmap(lambda v, j: v[j])), randn((2, 3, 5)), np.array([[0, 4, 2], [1, 1, 3]], np.int32))
    c("nd_gather", lambda v, a, b: v[a, :, b], x, np.array([[0, 2], [1, 1]], np.int32), np.array([[3], [0]], np.int32))
    c("scatter_2d_idx", lambda v, a, b, u: v.at[a, b].add(u), randn((5, 5)), np.array([0, 4, 4, 1], np.int32),
      np.array([1, 1, 1, 0], np.int32), randn((4,), seed=3), rtol=1e-6, atol=1e-6)
    c("grad_take_along", jax.grad(lambda v: jnp.take_along_axis(v, jnp.argsort(v, axis=1)[:, :2], axis=1).sum() ** 2),
      randn((4, 5)), rtol=1e-6, atol=1e-6)


@case("arrays", "x64", "arrays_slow")
def gather_scatter(c):
    import jax.numpy as jnp
    np = c.np
    x = randn((6, 5))
    idx = np.array([0, 5, -1, -6, 2], np.int32)
    oob = np.array([0, 7, -9, 100, 3, -1], np.int32)
    c("take_rows", lambda v, i: v[i], x, idx)
    c("take_rows_oob_default", lambda v, i: v[i], x, oob)
    for mode in ["clip", "fill", "promise_in_bounds"]:
        ii = idx if mode == "promise_in_bounds" else oob
        if mode != "promise_in_bounds":
            c(f"take_mode_{mode}", lambda v, i, m=mode: jnp.take(v, i, axis=0, mode=m), x, ii)
        c(f"at_get_{mode}", lambda v, i, m=mode: v.at[i, 1:3].get(mode=m), x, ii)
    c("take_fill_value", lambda v, i: jnp.take(v, i, axis=1, mode="fill", fill_value=-7.0), x, oob)
    c("take_along_axis", lambda v, i: jnp.take_along_axis(v, i, axis=1), x, np.array([[0, 4], [1, 1], [2, 0], [3, 3], [4, 2], [0, 0]], np.int32))
    c("fancy_2d", lambda v, i, j: v[i, j], x, idx[:3], np.array([1, -1, 4], np.int32))
    c("fancy_slices", lambda v, i: v[1:, i][::2], x, np.array([0, 3], np.int32))
    c("bool_mask_static", lambda v: v[np.array([True, False, True, False, True, True])], x)
    c("dynamic_index", lambda v, i: v[i], x, np.int32(-2))
    c("scalar_index_2d", lambda v, i, j: v[i, j], x, np.int32(3), np.int32(-1))
    y = randn((5,), seed=3)
    for op in ["set", "add", "mul", "min", "max"]:
        c(f"at_{op}", lambda v, i, u, op=op: getattr(v.at[i], op)(u), x, idx, randn((5, 5), seed=2))
        c(f"at_{op}_dup", lambda v, i, u, op=op: getattr(v.at[i], op)(u),
          y, np.array([1, 1, 3, 1, -1], np.int32), randn((5,), seed=4), rtol=1e-6, atol=1e-6)
        for mode in ["drop", "clip", "promise_in_bounds"]:
            ii = idx if mode == "promise_in_bounds" else oob
            upd = randn((ii.size, 5), seed=5)
            c(f"at_{op}_{mode}", lambda v, i, u, op=op, m=mode: getattr(v.at[i], op)(u, mode=m), x, ii, upd,
              rtol=1e-6, atol=1e-6)
    c("at_set_scalar", lambda v: v.at[2, 3].set(9.0), x)
    c("at_add_int", lambda v, i: v.at[i].add(1), np.zeros(6, np.int32), np.array([0, 0, 5, 2, 2, 2], np.int32))
    c("at_set_unique_sorted", lambda v, i, u: v.at[i].set(u, unique_indices=True, indices_are_sorted=True),
      y, np.array([0, 2, 4], np.int32), randn((3,), seed=6))
    c("segment_sum", lambda d, s: __import__("jax").ops.segment_sum(d, s, num_segments=4), randn((7, 2)),
      np.array([0, 0, 1, 3, 3, 3, 9], np.int32), rtol=1e-6, atol=1e-6)
    c("at_set_bf16", lambda v, i: v.at[i].max(v[0]), randn((6, 3), "bfloat16"), np.array([5, 0], np.int32))
    c("dynamic_slice", lambda v, i, j: __import__("jax").lax.dynamic_slice(v, (i, j), (3, 2)), x, np.int32(5), np.int32(-3))
    c("dynamic_update_slice", lambda v, u, i, j: __import__("jax").lax.dynamic_update_slice(v, u, (i, j)), x,
      randn((3, 2), seed=9), np.int32(4), np.int32(-1))
    c("dynamic_slice_in_dim", lambda v, i: __import__("jax").lax.dynamic_slice_in_dim(v, i, 2, axis=1), x, np.int32(4))
    c("dynamic_index_in_dim_u8", lambda v, i: __import__("jax").lax.dynamic_index_in_dim(v, i, axis=0, keepdims=False),
      x, np.uint8(200))


@case("arrays", "x64", "arrays_slow")
def sorting(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in ["float32", "int32", "uint8", "bfloat16", "bool", "int16"]:
        x = randn((4, 9), dt)
        c(f"sort[{dt}]", lambda v: jnp.sort(v, axis=-1), x)
        c(f"sort_axis0[{dt}]", lambda v: jnp.sort(v, axis=0), x)
        c(f"argsort_stable[{dt}]", lambda v: jnp.argsort(v, axis=-1, stable=True), x)
        c(f"argsort_desc[{dt}]", lambda v: jnp.argsort(v, axis=-1, stable=True, descending=True), x)
        if dt != "bool":
            c(f"top_k[{dt}]", lambda v: lax.top_k(v, 3), x)
    e = edge_values("float32")
    c("sort_edge_f32", jnp.sort, e)
    c("argsort_edge_f32", lambda v: jnp.argsort(v, stable=True), e)
    c("sort_neg_zero", jnp.sort, np.array([0.0, -0.0, 0.0, -0.0, -1.0], np.float32))
    c("top_k_nan", lambda v: lax.top_k(v, 4), e)
    c("lexsort", lambda a, b: jnp.lexsort((a, b)), randn((10,), "int32"), randn((10,), "int32", seed=2))
    c("sort_multi_operand", lambda a, b: lax.sort((a, b), num_keys=2), randn((10,), "int32") % 3, randn((10,), seed=2))
    c("sort_complex", jnp.sort, randn((8,), "complex64"))
    c("unique_static", lambda v: jnp.unique(v, size=8, fill_value=-1), np.array([3, 1, 3, 2, 1, 7, 0, 0], np.int32))
    c("unique_counts", lambda v: jnp.unique(v, return_counts=True, return_inverse=True, size=6, fill_value=0),
      np.array([3, 1, 3, 2, 1, 7, 0, 0], np.int32))
    c("searchsorted", lambda a, v: jnp.searchsorted(a, v), np.sort(randn((10,))), randn((7,), seed=3))
    c("searchsorted_right_int", lambda a, v: jnp.searchsorted(a, v, side="right"),
      np.array([1, 2, 2, 3, 5], np.int32), np.array([0, 2, 3, 6], np.int32))
    for method in ["scan", "sort", "compare_all"]:
        c(f"searchsorted_{method}", lambda a, v, m=method: jnp.searchsorted(a, v, method=m),
          np.sort(randn((10,))), randn((7,), seed=3))
    c("median", jnp.median, randn((9, 4)))
    c("quantile", lambda v: jnp.quantile(v, np.array([0.1, 0.5, 0.9], np.float32), axis=0), randn((9, 4)), rtol=1e-5, atol=1e-6)
    c("argpartition", lambda v: jnp.sort(jnp.take_along_axis(v, jnp.argpartition(v, 3, axis=-1)[..., :3], -1), -1), randn((3, 8)))
    c("sort_vmap", jax.vmap(jnp.sort), randn((3, 5)))


@case("arrays", "arrays_slow")
def shape_ops(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    dts = ["float32", "int8", "bool", "complex64", "bfloat16", "uint32"]
    for dt in (dts if c.slow else dts[:4]):
        x = randn((3, 4, 5), dt)
        t = f"[{dt}]"
        c("pad" + t, lambda v: jnp.pad(v, ((1, 0), (0, 2), (3, 1))), x)
        c("pad_neg_interior" + t, lambda v: lax.pad(v, v.dtype.type(1) if v.dtype != np.bool_ else True,
                                                    ((-1, 2, 1), (1, -2, 0), (0, 0, 2))), x)
        c("pad_edge" + t, lambda v: jnp.pad(v, 2, mode="edge"), x[0])
        c("pad_reflect" + t, lambda v: jnp.pad(v, 2, mode="reflect"), x[0])
        c("pad_wrap" + t, lambda v: jnp.pad(v, ((1, 3), (2, 0)), mode="wrap"), x[0])
        c("concat" + t, lambda a, b: jnp.concatenate([a, b, a], axis=1), x, x[:, :2])
        c("stack" + t, lambda a, b: jnp.stack([a, b], axis=-1), x, x)
        c("reshape" + t, lambda v: v.reshape(5, 12).T.reshape(-1, 2), x)
        c("transpose" + t, lambda v: jnp.transpose(v, (2, 0, 1)), x)
        c("flip" + t, lambda v: jnp.flip(v, (0, 2)), x)
        c("roll" + t, lambda v: jnp.roll(v, (2, -7), axis=(1, 2)), x)
        c("roll_dynamic" + t, lambda v, s: jnp.roll(v, s, axis=1), x, np.int32(-3))
        c("tile" + t, lambda v: jnp.tile(v, (2, 1, 2)), x)
        c("repeat" + t, lambda v: jnp.repeat(v, 3, axis=1), x)
        c("repeat_array" + t, lambda v: jnp.repeat(v, np.array([1, 0, 2, 3]), axis=1, total_repeat_length=6), x)
        c("slice_strided" + t, lambda v: v[::-2, 1::3, -1:0:-2], x)
        c("broadcast_to" + t, lambda v: jnp.broadcast_to(v[:, :1], (2, 3, 4, 5)), x)
        c("expand_squeeze" + t, lambda v: jnp.squeeze(v[None, :, 1:2], (0, 2)), x)
        c("rot90" + t, lambda v: jnp.rot90(v, 1, axes=(1, 2)), x)
        c("triu_tril" + t, lambda v: (jnp.triu(v, 1), jnp.tril(v, -1)), x)
        c("diag" + t, lambda v: (jnp.diagonal(v, 1, 1, 2), jnp.diag(v[0, 0])), x)
        c("split" + t, lambda v: jnp.split(v, [1, 3], axis=1), x)
        c("iota_eye" + t, lambda v: (jnp.eye(4, 5, 1, dtype=v.dtype), jnp.arange(7, dtype=v.dtype)
                                     if v.dtype != np.bool_ else jnp.arange(2) > 0), x)
    c("meshgrid", lambda a, b: jnp.meshgrid(a, b), randn((3,)), randn((4,)))
    c("where_3arg", jnp.where, randn((3, 4)) > 0, randn((3, 4)), np.float32(2))
    c("nonzero_size", lambda v: jnp.nonzero(v > 0, size=6, fill_value=-1), randn((3, 4)))
    c("argwhere_size", lambda v: jnp.argwhere(v > 0, size=5), randn((3, 4)))
    c("clip_nan_bounds", lambda v: jnp.clip(v, -1.0, 1.0), edge_values("float32"))
    c("select_n", lambda p, a, b, d: lax.select_n(p, a, b, d), np.array([0, 1, 2, 1], np.int32),
      randn((4,)), randn((4,), seed=1), randn((4,), seed=2))
    c("bincount", lambda v: jnp.bincount(v, length=5), np.array([0, 1, 1, 4, 3, 9, -1], np.int32))
    c("histogram", lambda v: jnp.histogram(v, bins=5, range=(-2, 2)), randn((30,)))
    c("polyval", lambda p, v: jnp.polyval(p, v), randn((4,)), randn((6,), seed=1), rtol=1e-6, atol=1e-6)
    c("convolve_1d", lambda a, b: jnp.convolve(a, b, mode="full"), randn((9,)), randn((4,), seed=1), rtol=1e-5, atol=1e-6)
    c("interp", lambda xq, xp, fp: jnp.interp(xq, xp, fp), randn((6,)), np.sort(randn((8,), seed=1)), randn((8,), seed=2),
      rtol=1e-6, atol=1e-6)
