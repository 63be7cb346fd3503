"""Dynamic-shape ops, and programs of testdata/dynamic/ run with real sizes.

Upstream only round-trips testdata/dynamic/ through serialization; here a few
varied modules are run with arguments of several sizes and compared with XLA
CPU. For the reference, the module's `@main` becomes a private function
called by a new static-typed `@main` that passes the dimension variable as a
constant; jax's shape refinement (stablehlo-refine-shapes) then makes every
shape static and jaxlib's CPU client compiles and runs it.
"""

import os
import re

import ml_dtypes
import numpy as np
import pytest
from conftest import SUITE  # noqa: E402  (../shared/stablehlo-suite)

import stablehlo_interpreter as shi
from stablehlo_interpreter import dtypes

SUITE = str(SUITE)
DYN = os.path.join(SUITE, "testdata", "dynamic")


def run(text, *args):
    return shi.compile(text).run(*args)


# --------------------------------------------------------------------------
# Kernel-level tests, numpy references


def test_dynamic_broadcast_in_dim_shapes_from_operand():
    prog = shi.compile("""
    func.func @main(%x: tensor<?x1xf32>, %shape: tensor<3xi64>) -> tensor<?x?x?xf32> {
      %r = stablehlo.dynamic_broadcast_in_dim %x, %shape, dims = [0, 2]
          : (tensor<?x1xf32>, tensor<3xi64>) -> tensor<?x?x?xf32>
      return %r : tensor<?x?x?xf32>
    }""")
    for n, m, k in [(3, 2, 4), (1, 5, 1), (0, 2, 3)]:
        x = np.arange(n, dtype=np.float32).reshape(n, 1)
        (r,) = prog.run(x, np.array([n, m, k], np.int64))
        assert r.shape == (n, m, k)
        np.testing.assert_array_equal(r, np.broadcast_to(x[:, None, :], (n, m, k)))


def test_dynamic_broadcast_in_dim_rejects_bad_shape():
    prog = shi.compile("""
    func.func @main(%x: tensor<?xf32>, %shape: tensor<1xi32>) -> tensor<?xf32> {
      %r = stablehlo.dynamic_broadcast_in_dim %x, %shape, dims = [0]
          : (tensor<?xf32>, tensor<1xi32>) -> tensor<?xf32>
      return %r : tensor<?xf32>
    }""")
    with pytest.raises(shi.ExecutionError, match="cannot broadcast"):
        prog.run(np.ones(3, np.float32), np.array([4], np.int32))


def test_dynamic_reshape_and_iota():
    prog = shi.compile("""
    func.func @main(%x: tensor<?xi32>, %shape: tensor<2xi32>) -> (tensor<?x?xi32>, tensor<?x?xf32>) {
      %r = stablehlo.dynamic_reshape %x, %shape : (tensor<?xi32>, tensor<2xi32>) -> tensor<?x?xi32>
      %i = stablehlo.dynamic_iota %shape, dim = 1 : (tensor<2xi32>) -> tensor<?x?xf32>
      return %r, %i : tensor<?x?xi32>, tensor<?x?xf32>
    }""")
    for a, b in [(2, 3), (6, 1), (0, 4)]:
        x = np.arange(a * b, dtype=np.int32)
        r, i = prog.run(x, np.array([a, b], np.int32))
        np.testing.assert_array_equal(r, x.reshape(a, b))
        assert i.dtype == np.float32
        np.testing.assert_array_equal(i, np.broadcast_to(np.arange(b, dtype=np.float32), (a, b)))


def test_dynamic_pad_negative_and_interior():
    prog = shi.compile("""
    func.func @main(%x: tensor<?x?xi64>, %lo: tensor<2xi64>, %hi: tensor<2xi64>,
                    %in: tensor<2xi64>) -> tensor<?x?xi64> {
      %v = stablehlo.constant dense<-1> : tensor<i64>
      %r = stablehlo.dynamic_pad %x, %v, %lo, %hi, %in
          : (tensor<?x?xi64>, tensor<i64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<?x?xi64>
      return %r : tensor<?x?xi64>
    }""")
    x = np.arange(1, 7, dtype=np.int64).reshape(2, 3)
    (r,) = prog.run(x, np.array([1, -1]), np.array([0, 2]), np.array([1, 1]))
    # Rows: pad 1 before, 1 between; cols: 1 between, crop the first, 2 after.
    full = np.full((4, 7), -1, np.int64)
    full[1::2, 0:5:2] = x
    np.testing.assert_array_equal(r, full[:, 1:])


def test_real_dynamic_slice_strided_and_out_of_bounds():
    prog = shi.compile("""
    func.func @main(%x: tensor<?x4xf32>, %s: tensor<2xi32>, %l: tensor<2xi32>,
                    %k: tensor<2xi32>) -> tensor<?x?xf32> {
      %r = stablehlo.real_dynamic_slice %x, %s, %l, %k
          : (tensor<?x4xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }""")
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    (r,) = prog.run(x, np.array([1, 0], np.int32), np.array([5, 4], np.int32),
                    np.array([2, 3], np.int32))
    np.testing.assert_array_equal(r, x[1:5:2, 0:4:3])
    with pytest.raises(Exception, match="real_dynamic_slice"):
        prog.run(x, np.array([0, 0], np.int32), np.array([6, 4], np.int32),
                 np.array([1, 1], np.int32))


def test_get_dimension_size_of_dynamic_arg():
    prog = shi.compile("""
    func.func @main(%x: tensor<?x3xf32>) -> tensor<i32> {
      %r = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
      return %r : tensor<i32>
    }""")
    for n in (0, 1, 7):
        (r,) = prog.run(np.zeros((n, 3), np.float32))
        assert r.shape == () and r.dtype == np.int32 and int(r) == n


# --------------------------------------------------------------------------
# testdata/dynamic modules against XLA CPU


def _xla_cpu():
    jax = pytest.importorskip("jax")
    try:
        return jax, jax.devices("cpu")[0]
    except Exception as e:  # pragma: no cover - depends on the jax install
        pytest.skip(f"no XLA CPU backend: {e}")


def _type_str(a):
    dims = "".join(f"{d}x" for d in a.shape)
    return f"tensor<{dims}{dtypes.to_element_type(a.dtype)}>"


def _main_signature(text):
    """(input types, result types) of @main, as printed MLIR types."""
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    with jmlir.make_ir_context():
        module = ir.Module.parse(text)
        for op in module.body.operations:
            if ir.StringAttr(op.attributes["sym_name"]).value == "main":
                ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                return [str(t) for t in ft.inputs], [str(t) for t in ft.results]
    raise AssertionError("no @main")


def xla_reference(text, dim_values, data):
    """Run @main of a dynamic module on XLA CPU with the dimension variables
    ``dim_values`` (its leading scalar arguments) and the arrays ``data``."""
    jax, device = _xla_cpu()
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    ins, outs = _main_signature(text)
    nd = len(dim_values)
    assert len(ins) == nd + len(data)
    body = re.sub(r"func\.func public @main\(", "func.func private @main_dyn(", text, count=1)
    lines = []
    params = ", ".join(f"%d{i}: {_type_str(a)}" for i, a in enumerate(data))
    lines.append(f"  func.func public @main({params}) -> ({', '.join(outs)}) {{")
    call_args = []
    for i, v in enumerate(dim_values):
        lines.append(f"    %n{i} = stablehlo.constant dense<{v}> : {ins[i]}")
        call_args.append(f"%n{i}")
    for i, a in enumerate(data):
        lines.append(f"    %c{i} = stablehlo.convert %d{i} : ({_type_str(a)}) -> {ins[nd + i]}")
        call_args.append(f"%c{i}")
    lines.append(f"    %r:{len(outs)} = call @main_dyn({', '.join(call_args)}) : "
                 f"({', '.join(ins)}) -> ({', '.join(outs)})")
    rets = ", ".join(f"%r#{i}" for i in range(len(outs)))
    lines.append(f"    return {rets} : {', '.join(outs)}")
    lines.append("  }")
    end = body.rfind("}")
    wrapped = body[:end] + "\n".join(lines) + "\n" + body[end:]
    with jmlir.make_ir_context():
        module = ir.Module.parse(wrapped)
        refined = jmlir.refine_polymorphic_shapes(module)
        code = jmlir.module_to_bytecode(refined)
    exe = device.client.compile_and_load(code, xc.DeviceList((device,)), xc.CompileOptions())
    bufs = [jax.device_put(a, device) for a in data]
    return [np.asarray(r) for r in exe.execute(bufs)]


def _rand(shape, dtype, rng):
    return (rng.standard_normal(shape) * 4).astype(dtype)


# (file, element type of the data arguments, sizes for the dimension variables)
CASES = [
    ("argmax_1_dynamic.mlir", np.float32, (1, 3, 6)),
    ("slice_in_dim_stride_2_odd_dynamic.mlir", np.float32, (1, 4, 5)),
    ("pad_poly_padding_config_dynamic.mlir", np.float32, (1, 2, 3)),
    ("squeeze_dynamic.mlir", np.float32, (0, 1, 4)),
    ("vmap_redimensions_float32_3_4_5_newsizes_3_20_dimensions_2_0_1_dynamic.mlir",
     np.float32, (1, 2)),
    ("vmap_reduce_min_bfloat16_2_3_dynamic.mlir", ml_dtypes.bfloat16, (1, 3, 8)),
    ("dot_general_dynamic.mlir", np.float32, (1, 3)),
    ("vmap_broadcast_in_dim_parameter_combinations_float32_2_out2_3_broadcastdimensions_0"
     "_dynamic.mlir", np.float32, (1, 3)),
    ("dynamic_update_slice.mlir", np.float32, (1, 5)),
    ("concatenate_dynamic.mlir", np.float32, (1, 3)),
    ("jnp_pad_mode_constant_dynamic.mlir", np.float32, (1, 4)),
]


def _split_signature(text, n):
    """(number of leading dimension-variable args, data shapes with `?` = n)."""
    ins, _ = _main_signature(text)
    nd = 0
    while nd < len(ins) and re.fullmatch(r"tensor<i(32|64)>", ins[nd]):
        nd += 1
    shapes = []
    for t in ins[nd:]:
        m = re.match(r"tensor<((?:[0-9?]+x)*)[a-z0-9]+>", t)
        dims = [d for d in m.group(1).split("x") if d]
        shapes.append(tuple(n if d == "?" else int(d) for d in dims))
    return nd, shapes


@pytest.mark.parametrize("fname,dtype,sizes", CASES, ids=[c[0][:40] for c in CASES])
def test_dynamic_module_matches_xla_cpu(fname, dtype, sizes):
    """Every `?` is the same dimension variable n (files with several
    variables get the same value for each)."""
    path = os.path.join(DYN, fname)
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    text = open(path).read()
    prog = shi.compile(text)
    rng = np.random.default_rng(len(fname))
    for n in sizes:
        nd, shapes = _split_signature(text, n)
        data = [_rand(s, dtype, rng) for s in shapes]
        ours = prog.run(*[np.array(n, np.int64)] * nd, *data)
        ref = xla_reference(text, [n] * nd, data)
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            assert a.shape == b.shape, (n, a.shape, b.shape)
            assert a.dtype == b.dtype
            if dtypes.is_float(a.dtype):
                np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                           rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(a, b)


def test_every_dynamic_module_has_kernels_for_this_helper():
    """Every op of this file's families used in testdata/dynamic compiles."""
    import glob

    from stablehlo_interpreter.errors import UnsupportedOpsError
    mine = {"stablehlo." + n for n in (
        "iota broadcast_in_dim broadcast reshape transpose slice dynamic_slice "
        "dynamic_update_slice concatenate pad reverse reduce dot_general dot "
        "get_dimension_size dynamic_broadcast_in_dim dynamic_reshape dynamic_iota "
        "dynamic_pad real_dynamic_slice").split()}
    files = sorted(glob.glob(os.path.join(DYN, "*.mlir")))
    if not files:
        pytest.skip("no testdata/dynamic")
    bad = []
    for path in files:
        try:
            shi.compile(open(path).read())
        except UnsupportedOpsError as e:
            for line in str(e).splitlines()[1:]:
                if line.strip().split(" at ")[0] in mine:
                    bad.append((os.path.basename(path), line.strip()))
    assert not bad, bad[:10]
