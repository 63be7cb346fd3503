"""jnp.linalg / jax.scipy.linalg decompositions on stablehlo_ref vs XLA CPU.

These primitives (eigh, svd, eig, schur, hessenberg, tridiagonal, geqp3)
have no platform-independent JAX lowering; stablehlo_pjrt/lowerings.py
provides them for the plugin platform. Each dtype mode runs in one fresh
subprocess (`python test_linalg_lowerings.py x32|x64`, JAX_ENABLE_X64 is
process global) that prints one JSON line per check; pytest reports every
check as its own test.

Unique results (eigenvalues, singular values, pinv, compact Householder
forms, ...) are compared with XLA CPU directly; eigen/singular/Schur vectors,
defined only up to sign or phase, through reconstruction and orthonormality.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import traceback

import pytest

HERE = os.path.abspath(__file__)
MARK = "@@LINALG_CHECK@@ "
MODES = {"x32": ("float32", "complex64"), "x64": ("float64", "complex128")}

CHECKS: dict[str, object] = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------------------
# Helpers used inside the subprocesses.


def _env():
    import jax
    import numpy as np
    return jax, np


class Calls:
    """Many (fn, args) computed in ONE jitted program per backend.

    XLA CPU compilation dominates the run time, so each check collects its
    computations with ``add`` and ``run`` compiles them together once for
    XLA CPU and once for stablehlo_ref; ``run`` returns
    {key: (XLA CPU result, stablehlo_ref result)} as numpy pytrees.
    """

    def __init__(self):
        self.items = []

    def add(self, key, fn, *args):
        self.items.append((key, fn, args))
        return key

    def run(self):
        jax, np = _env()
        items = self.items

        def program(*flat):
            out, i = [], 0
            for _, fn, args in items:
                out.append(fn(*flat[i:i + len(args)]))
                i += len(args)
            return out

        flat = [x for _, _, args in items for x in args]
        outs = []
        for dev in (jax.devices("cpu")[0], jax.devices("stablehlo_ref")[0]):
            res = jax.jit(program)(*jax.device_put(flat, dev))
            outs.append(jax.tree.map(np.asarray, res))
        return {key: (outs[0][i], outs[1][i]) for i, (key, _, _) in enumerate(items)}


def tol(dtype):
    _, np = _env()
    return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def close(got, want, dtype, what, scale=1.0):
    _, np = _env()
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.size == 0:
        return
    err = np.max(np.abs(got.astype(np.complex128) - want.astype(np.complex128)))
    bound = tol(dtype) * scale * max(1.0, float(np.max(np.abs(want))))
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"


def H(x):
    _, np = _env()
    return np.conj(np.swapaxes(x, -1, -2))


def matrix(shape, dtype, seed=0):
    _, np = _env()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def hermitian(shape, dtype, seed=0):
    x = matrix(shape, dtype, seed)
    return ((x + H(x)) / 2).astype(dtype)


def eye_like(n, batch, dtype):
    _, np = _env()
    return np.broadcast_to(np.eye(n, dtype=dtype), batch + (n, n))


def same_multiset(got, want, dtype, what):
    """Eigenvalues of a non-normal matrix: equal up to order."""
    _, np = _env()
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    for idx in np.ndindex(*got.shape[:-1]):
        g, w = list(got[idx]), list(want[idx])
        for x in w:
            j = int(np.argmin([abs(x - y) for y in g]))
            assert abs(x - g[j]) <= 10 * tol(dtype) * max(1.0, abs(x)), \
                f"{what}: eigenvalue {x} missing, nearest {g[j]}"
            g.pop(j)


def dtypes_of(mode):
    return MODES[mode]


SQUARE = [(5, 5), (2, 3, 4, 4)]
RECT = [(5, 3), (3, 5), (2, 4, 3)]


# ---------------------------------------------------------------------------
# Checks: check(mode) raises AssertionError on mismatch.


@check
def eigh(mode):
    jax, np = _env()
    import jax.numpy as jnp
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in SQUARE:
            a = hermitian(shape, dt)
            c.add(("eigh", dt, shape), jnp.linalg.eigh, a)
            c.add(("eigvalsh", dt, shape), jnp.linalg.eigvalsh, a)
        for uplo in ("L", "U"):
            m = matrix((4, 4), dt, 1)   # not Hermitian: only one triangle is read
            c.add(("uplo", dt, uplo), lambda x, u=uplo: jnp.linalg.eigh(
                x, UPLO=u, symmetrize_input=False)[0], m)
    r = c.run()
    for dt in dtypes_of(mode):
        for shape in SQUARE:
            a = hermitian(shape, dt)
            (wc, vc), (w, v) = r[("eigh", dt, shape)]
            close(w, wc, dt, f"eigh w {dt}{shape}")
            assert v.dtype == vc.dtype and v.shape == vc.shape
            close(a @ v, v * w[..., None, :], dt, f"eigh A V = V w {dt}{shape}", 10)
            close(H(v) @ v, eye_like(shape[-1], shape[:-2], dt), dt, f"eigh V^H V {dt}{shape}", 10)
            wc, w = r[("eigvalsh", dt, shape)]
            close(w, wc, dt, f"eigvalsh {dt}{shape}")
        for uplo in ("L", "U"):
            wc, w = r[("uplo", dt, uplo)]
            close(w, wc, dt, f"eigh UPLO={uplo} {dt}")


@check
def eigh_subset_by_index(mode):
    jax, np = _env()
    for dt in dtypes_of(mode):
        a = hermitian((2, 6, 6), dt)
        v, w = jax.jit(lambda x: jax.lax.linalg.eigh(x, subset_by_index=(2, 5)))(
            jax.device_put(a, jax.devices("stablehlo_ref")[0]))
        v, w = np.asarray(v), np.asarray(w)
        want = np.linalg.eigvalsh(a.astype(np.complex128))[..., 2:5]
        close(w, want.astype(w.dtype), dt, "eigh subset w")
        assert v.shape == (2, 6, 3)
        close(a @ v, v * w[..., None, :], dt, "eigh subset A V = V w", 10)


@check
def svd(mode):
    jax, np = _env()
    import jax.numpy as jnp
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in RECT + SQUARE[:1]:
            a = matrix(shape, dt)
            for full in (True, False):
                c.add(("svd", dt, shape, full),
                      functools.partial(jnp.linalg.svd, full_matrices=full), a)
            c.add(("s", dt, shape), functools.partial(jnp.linalg.svd, compute_uv=False), a)
        c.add(("qr", dt), lambda x: jax.lax.linalg.svd(
            x, compute_uv=False, algorithm=jax.lax.linalg.SvdAlgorithm.QR), matrix(RECT[-1], dt))
    r = c.run()
    for dt in dtypes_of(mode):
        for shape in RECT + SQUARE[:1]:
            a = matrix(shape, dt)
            k = min(shape[-2:])
            for full in (True, False):
                (uc, sc, vc), (u, s, vh) = r[("svd", dt, shape, full)]
                close(s, sc, dt, f"svd s {dt}{shape} full={full}")
                assert u.shape == uc.shape and vh.shape == vc.shape, (u.shape, uc.shape)
                assert u.dtype == uc.dtype and vh.dtype == vc.dtype
                us = u[..., :, :k] * s[..., None, :].astype(u.dtype)
                close(us @ vh[..., :k, :], a, dt, f"svd U S V^H = A {dt}{shape}", 10)
                close(H(u) @ u, eye_like(u.shape[-1], shape[:-2], dt), dt, "svd U^H U", 10)
                close(vh @ H(vh), eye_like(vh.shape[-2], shape[:-2], dt), dt, "svd V^H V", 10)
            sc, s = r[("s", dt, shape)]
            close(s, sc, dt, f"svd compute_uv=False {dt}{shape}")
        sc, s = r[("qr", dt)]
        close(s, sc, dt, f"svd algorithm=QR {dt}")


@check
def svd_subset_by_index(mode):
    jax, np = _env()
    dt = dtypes_of(mode)[0]
    a = matrix((6, 4), dt)
    u, s, vh = jax.jit(lambda x: jax.lax.linalg.svd(x, full_matrices=False,
                                                    subset_by_index=(1, 3)))(
        jax.device_put(a, jax.devices("stablehlo_ref")[0]))
    want = np.linalg.svd(a.astype(np.float64), compute_uv=False)[1:3]
    close(np.asarray(s), want.astype(dt), dt, "svd subset s")
    assert u.shape == (6, 2) and vh.shape == (2, 4)
    close(np.asarray(u).T @ a @ np.asarray(vh).T, np.diag(want).astype(dt), dt, "svd subset", 10)


@check
def svd_based(mode):
    """pinv, matrix_rank, lstsq, norm(ord=2/-2/'nuc'), cond: all through svd."""
    jax, np = _env()
    import jax.numpy as jnp
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in [(5, 3), (2, 3, 4)]:
            a = matrix(shape, dt)
            c.add(("pinv", dt, shape), jnp.linalg.pinv, a)
            for ord_ in (2, -2, "nuc"):
                c.add(("norm", dt, shape, ord_),
                      functools.partial(jnp.linalg.norm, ord=ord_, axis=(-2, -1)), a)
        c.add(("cond", dt), jnp.linalg.cond, matrix((4, 4), dt))
        low = (matrix((6, 2), dt, 3) @ matrix((2, 5), dt, 4)).astype(dt)   # rank 2
        c.add(("rank2", dt), jnp.linalg.matrix_rank, low)
        c.add(("rank", dt), jnp.linalg.matrix_rank, matrix((2, 3, 3), dt))
        c.add(("lstsq", dt), jnp.linalg.lstsq, matrix((6, 4), dt), matrix((6, 2), dt, 5))
    r = c.run()
    for key, (want, got) in r.items():
        name, dt = key[0], key[1]
        if name == "rank2":
            assert int(got) == int(want) == 2, (got, want)
        elif name == "rank":
            assert np.array_equal(got, want), (got, want)
        elif name == "lstsq":
            for part, g, w in zip(("x", "resid", "rank", "s"), got, want):
                if part == "rank":
                    assert int(g) == int(w)
                else:
                    close(g, w, dt, f"lstsq {part} {dt}", 10)
        else:
            close(got, want, dt, str(key), 10)


@check
def eig(mode):
    jax, np = _env()
    import jax.numpy as jnp
    c = Calls()
    both_sides = functools.partial(jax.lax.linalg.eig, compute_left_eigenvectors=True,
                                   compute_right_eigenvectors=True)
    for dt in dtypes_of(mode):
        for shape in SQUARE:
            a = matrix(shape, dt)
            c.add(("eig", dt, shape), jnp.linalg.eig, a)
            c.add(("eigvals", dt, shape), jnp.linalg.eigvals, a)
            c.add(("left", dt, shape), both_sides, a)
    r = c.run()
    for dt in dtypes_of(mode):
        for shape in SQUARE:
            a = matrix(shape, dt)
            (wc, vc), (w, v) = r[("eig", dt, shape)]
            assert w.dtype == wc.dtype and v.dtype == vc.dtype, (w.dtype, wc.dtype)
            same_multiset(w, wc, dt, f"eig w {dt}{shape}")
            close(a @ v, v * w[..., None, :], dt, f"eig A V = V w {dt}{shape}", 10)
            # geev normalisation: unit 2-norm, largest component real.
            close(np.linalg.norm(v, axis=-2), np.ones(shape[:-1], v.real.dtype), dt, "eig |v| = 1")
            big = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
            assert np.max(np.abs(big.imag)) <= 10 * tol(dt), "eig: largest component not real"
            wc, w = r[("eigvals", dt, shape)]
            same_multiset(w, wc, dt, f"eigvals {dt}{shape}")
            (wc, vlc, vrc), (w, vl, vr) = r[("left", dt, shape)]
            same_multiset(w, wc, dt, f"eig(left) w {dt}{shape}")
            close(H(vl) @ a, w[..., :, None] * H(vl), dt, f"eig vl^H A = w vl^H {dt}{shape}", 10)
            close(a @ vr, vr * w[..., None, :], dt, f"eig(left) A vr {dt}{shape}", 10)


@check
def schur(mode):
    jax, np = _env()
    import jax.scipy.linalg as jsl
    shapes = [(5, 5), (2, 4, 4)]
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in shapes:
            c.add(("schur", dt, shape), jsl.schur, matrix(shape, dt))
            c.add(("t", dt, shape), lambda x: jsl.schur(x)[0], matrix(shape, dt))
    r = c.run()
    for dt in dtypes_of(mode):
        for shape in shapes:
            a = matrix(shape, dt)
            (tc, zc), (t, z) = r[("schur", dt, shape)]
            assert t.dtype == tc.dtype and z.dtype == zc.dtype
            n = shape[-1]
            close(z @ t @ H(z), a, dt, f"schur Z T Z^H = A {dt}{shape}", 10)
            close(H(z) @ z, eye_like(n, shape[:-2], dt), dt, f"schur Z unitary {dt}{shape}", 10)
            real = not np.issubdtype(np.dtype(dt), np.complexfloating)
            below = np.tril(np.ones((n, n), bool), -2 if real else -1)
            assert np.all(t[..., below] == 0), "schur: T not (quasi-)triangular"
            # Same eigenvalues (the diagonal blocks) as XLA CPU.
            same_multiset(np.linalg.eigvals(t.astype(np.complex128)),
                          np.linalg.eigvals(tc.astype(np.complex128)), dt, "schur eigenvalues")
            _, t1 = r[("t", dt, shape)]
            close(t1, t, dt, "schur without vectors")


@check
def hessenberg(mode):
    jax, np = _env()
    import jax.scipy.linalg as jsl
    shapes = [(5, 5), (2, 4, 4)]
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in shapes:
            c.add((dt, shape), functools.partial(jsl.hessenberg, calc_q=True), matrix(shape, dt))
    for (dt, shape), ((hc, qc), (h, q)) in c.run().items():
        # gehrd is deterministic (no pivoting): equal to XLA CPU's.
        close(h, hc, dt, f"hessenberg H {dt}{shape}", 10)
        close(q, qc, dt, f"hessenberg Q {dt}{shape}", 10)
        close(q @ h @ H(q), matrix(shape, dt), dt, f"hessenberg Q H Q^H = A {dt}{shape}", 10)


@check
def tridiagonal(mode):
    jax, np = _env()
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in [(5, 5), (2, 4, 4)]:
            for lower in (True, False):
                c.add((dt, shape, lower), functools.partial(jax.lax.linalg.tridiagonal,
                                                            lower=lower), hermitian(shape, dt))
    for (dt, shape, lower), (outc, out) in c.run().items():
        for name, g, w in zip(("a", "d", "e", "taus"), out, outc):
            close(g, w, dt, f"tridiagonal {name} lower={lower} {dt}{shape}", 10)


@check
def qr_pivoting(mode):
    jax, np = _env()
    import jax.scipy.linalg as jsl
    from jax._src.lax.linalg import geqp3
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in [(5, 3), (3, 5), (2, 4, 4)]:
            c.add(("qr", dt, shape), functools.partial(jsl.qr, pivoting=True), matrix(shape, dt))
        # geqp3 with columns fixed in front by jpvt.
        c.add(("geqp3", dt), geqp3, matrix((5, 4), dt, 2), np.array([0, 1, 0, 1], np.int32))
    for key, (want, got) in c.run().items():
        dt = key[1]
        if key[0] == "qr":
            (qc, rc, pc), (q, r, p) = want, got
            assert np.array_equal(p, pc), (p, pc)
            close(q, qc, dt, f"qr pivoting Q {key}", 10)
            close(r, rc, dt, f"qr pivoting R {key}", 10)
        else:
            (ac, jc, tc), (a2, j2, t2) = want, got
            assert np.array_equal(j2, jc), (j2, jc)
            close(a2, ac, dt, "geqp3 fixed columns a", 10)
            close(t2, tc, dt, "geqp3 fixed columns taus", 10)


@check
def grad_and_vmap(mode):
    jax, np = _env()
    import jax.numpy as jnp
    dt = dtypes_of(mode)[0]
    c = Calls()
    c.add("svd", jax.grad(lambda x: jnp.linalg.svd(x, compute_uv=False).sum()), matrix((4, 4), dt))
    c.add("eigh", jax.grad(lambda x: (jnp.linalg.eigvalsh(x) ** 2).sum()), hermitian((4, 4), dt))
    c.add("vmap", jax.vmap(jnp.linalg.eigvalsh), hermitian((3, 4, 4), dt))
    for key, (want, got) in c.run().items():
        close(got, want, dt, f"grad/vmap {key}", 10)


@check
def nan_and_empty(mode):
    jax, np = _env()
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    dt = dtypes_of(mode)[1]
    a = matrix((2, 3, 3), dt)
    a[1, 0, 0] = np.nan          # only the second matrix fails
    e = np.zeros((0, 0), dt)
    c = Calls()
    for name, fn in [("eigh", jnp.linalg.eigh), ("svd", jnp.linalg.svd),
                     ("eig", jnp.linalg.eig), ("schur", jsl.schur)]:
        c.add(("nan", name), fn, a)
        if name != "schur":
            c.add(("empty", name), fn, e)
    for (kind, name), (outc, out) in c.run().items():
        for g, w in zip(jax.tree.leaves(out), jax.tree.leaves(outc)):
            assert g.shape == w.shape and g.dtype == w.dtype, name
            if kind == "nan":
                assert np.array_equal(np.isnan(g), np.isnan(w)), f"{name}: NaN pattern differs"
                assert not np.isnan(g[0]).any() and np.isnan(g[1]).all(), name


@check
def unsupported_is_clear(mode):
    """Parameter combinations XLA CPU rejects fail with an error naming them."""
    jax, np = _env()
    dt = dtypes_of(mode)[0]
    ref = jax.devices("stablehlo_ref")[0]
    x = jax.device_put(matrix((3, 3), dt), ref)
    for fn, words in [
        (lambda y: jax.lax.linalg.svd(y, algorithm=jax.lax.linalg.SvdAlgorithm.JACOBI),
         ("svd", "JACOBI")),
        (lambda y: jax.lax.linalg.schur(y, sort_eig_vals=True), ("schur", "sort_eig_vals")),
    ]:
        try:
            jax.jit(fn)(x)
        except NotImplementedError as e:
            assert all(w in str(e) for w in words), str(e)
        else:
            raise AssertionError(f"no error for {words}")


@check
def lu_getrf(mode):
    """lu: getrf's pivots and permutation exactly as XLA CPU's, LU close.

    Both call LAPACK getrf (XLA CPU in the element type, the interpreter in
    f64 then rounded): on these random matrices no two pivot candidates are
    close, so the pivots agree exactly.
    """
    jax, np = _env()
    import jax.scipy.linalg as jsl
    c = Calls()
    shapes = [(6, 6), (2, 3, 5, 5), (7, 4), (4, 7), (0, 0), (3, 0), (0, 3), (2, 0, 4)]
    for dt in dtypes_of(mode):
        for shape in shapes:
            a = matrix(shape, dt, 3)
            c.add(("lu", dt, shape), jax.lax.linalg.lu, a)
        sing = np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]], dtype=dt)
        c.add(("lu", dt, "singular"), jax.lax.linalg.lu, sing)
        c.add(("piv2perm", dt), lambda p: jax.lax.linalg.lu_pivots_to_permutation(p, 6),
              np.array([[3, 3, 5, 4], [0, 1, 2, 3]], np.int32))
        c.add(("scipy_lu", dt), jsl.lu, matrix((5, 5), dt, 4))
        c.add(("lu_factor", dt), jsl.lu_factor, matrix((5, 5), dt, 5))
    r = c.run()
    for dt in dtypes_of(mode):
        for shape in shapes + ["singular"]:
            (luc, pc, permc), (lu, p, perm) = r[("lu", dt, shape)]
            np.testing.assert_array_equal(p, pc, err_msg=f"pivots {dt}{shape}")
            np.testing.assert_array_equal(perm, permc, err_msg=f"perm {dt}{shape}")
            assert p.dtype == pc.dtype == np.int32 and perm.dtype == np.int32
            close(lu, luc, dt, f"lu {dt}{shape}", 10)
        want, got = r[("piv2perm", dt)]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, [[3, 0, 5, 4, 1, 2], np.arange(6)])
        for key in ("scipy_lu", "lu_factor"):
            for g, w in zip(*reversed(r[(key, dt)])):
                if np.asarray(w).dtype.kind in "iu":
                    np.testing.assert_array_equal(g, w, err_msg=f"{key} {dt}")
                else:
                    close(g, w, dt, f"{key} {dt}", 10)


@check
def lu_solvers(mode):
    """solve / inv / det / slogdet / expm / cho_solve / solve_triangular (all via lu / trsm)."""
    jax, np = _env()
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    c = Calls()
    for dt in dtypes_of(mode):
        for shape in [(6, 6), (3, 4, 4), (0, 0)]:
            a = matrix(shape, dt, 6) + 3 * eye_like(shape[-1], shape[:-2], dt)
            b = matrix(shape[:-1] + (2,), dt, 7)
            c.add(("solve", dt, shape), jnp.linalg.solve, a, b)
            c.add(("inv", dt, shape), jnp.linalg.inv, a)
            c.add(("det", dt, shape), jnp.linalg.det, a)
            c.add(("slogdet", dt, shape), lambda x: tuple(jnp.linalg.slogdet(x)), a)
            c.add(("expm", dt, shape), jsl.expm, a * 0.2)
        for left in (True, False):
            for lower in (True, False):
                for trans in (0, 1, 2):
                    for unit in (False, True):
                        a = matrix((5, 5), dt, 8) + 4 * eye_like(5, (), dt)
                        b = matrix((5, 3) if left else (3, 5), dt, 9)
                        c.add(("trsm", dt, left, lower, trans, unit),
                              lambda x, y, l=left, lo=lower, t=trans, u=unit:
                              jax.lax.linalg.triangular_solve(
                                  x, y, left_side=l, lower=lo, transpose_a=t > 0,
                                  conjugate_a=t == 2, unit_diagonal=u), a, b)
        # A zero on the diagonal: inf/NaN as XLA CPU (no singularity check).
        z = np.triu(matrix((3, 3), dt, 10))
        z[1, 1] = 0
        c.add(("trsm_singular", dt), lambda x, y: jax.lax.linalg.triangular_solve(
            x, y, left_side=True, lower=False), z, np.ones((3, 1), dt))
    r = c.run()
    for dt in dtypes_of(mode):
        for shape in [(6, 6), (3, 4, 4), (0, 0)]:
            for k in ("solve", "inv", "det", "slogdet", "expm"):
                want, got = r[(k, dt, shape)]
                for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                    close(g, w, dt, f"{k} {dt}{shape}", 20)
        for key in [k for k in r if k[0] == "trsm" and k[1] == dt]:
            want, got = r[key]
            close(got, want, dt, f"triangular_solve {key}", 10)
        want, got = r[("trsm_singular", dt)]
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))


@check
def qr_lapack(mode):
    """qr (geqrf + orgqr/ungqr) and ormqr: compact forms equal to XLA CPU's."""
    jax, np = _env()
    import jax.numpy as jnp
    c = Calls()
    shapes = [(6, 4), (4, 6), (2, 5, 5), (0, 3), (3, 0)]
    for dt in dtypes_of(mode):
        for shape in shapes:
            a = matrix(shape, dt, 11)
            c.add(("geqrf", dt, shape), lambda x: tuple(jnp.linalg.qr(x, mode="raw")), a)
            for m in ("reduced", "complete"):
                c.add(("qr", dt, shape, m), lambda x, m=m: tuple(jnp.linalg.qr(x, mode=m)), a)
        h = matrix((6, 4), dt, 12)
        taus = matrix((3,), dt, 13)
        c.add(("hp", dt), jax.lax.linalg.householder_product, h, taus)
        for left in (True, False):
            for tr in (False, True):
                if not hasattr(jax.lax.linalg, "ormqr"):
                    break  # jax.lax.linalg.ormqr is public from JAX 0.10.0
                cc = matrix((6, 2) if left else (2, 6), dt, 14)
                c.add(("ormqr", dt, left, tr), lambda x, t, y, l=left, tr=tr:
                      jax.lax.linalg.ormqr(x, t, y, left=l, transpose=tr), h, taus, cc)
    r = c.run()
    for dt in dtypes_of(mode):
        for key in [k for k in r if k[1] == dt]:
            want, got = r[key]
            for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                close(g, w, dt, f"{key}", 10)


@check
def registered_primitives(mode):
    """Every linalg primitive without a default rule has a stablehlo_ref rule."""
    jax, np = _env()
    import jax._src.lax.linalg as L
    from jax._src.interpreters import mlir

    from stablehlo_pjrt import lowerings
    jax.devices("stablehlo_ref")
    rules = mlir._platform_specific_lowerings["stablehlo_ref"]
    names = sorted(p.name for p in lowerings.primitives_without_lowering())
    missing = [p.name for p in lowerings.primitives_without_lowering() if p not in rules]
    assert not missing, missing
    assert L.svd_p in rules
    for name in ("eig", "eigh", "geqp3", "hessenberg", "schur", "tridiagonal"):
        assert name in names, names


# ---------------------------------------------------------------------------
# Subprocess entry point and pytest side.


def _main(mode):
    os.environ["JAX_ENABLE_X64"] = "1" if mode == "x64" else "0"
    import jax
    jax.config.update("jax_enable_x64", mode == "x64")
    for name, fn in CHECKS.items():
        try:
            fn(mode)
            res = {"name": name, "ok": True}
        except BaseException as e:  # noqa: BLE001 - report every check
            res = {"name": name, "ok": False,
                   "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}
        print(MARK + json.dumps(res), flush=True)


_PROCS: dict = {}
_RESULTS: dict = {}


def _start_all():
    """Start one subprocess per mode at once (they run in parallel)."""
    if _PROCS:
        return
    for mode in MODES:
        env = dict(os.environ)
        env["JAX_PLATFORMS"] = "cpu,stablehlo_ref"
        env["JAX_ENABLE_X64"] = "1" if mode == "x64" else "0"
        _PROCS[mode] = subprocess.Popen([sys.executable, HERE, mode], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)


def _run_mode(mode):
    if mode not in _RESULTS:
        _start_all()
        proc = _PROCS[mode]
        try:
            stdout, stderr = proc.communicate(timeout=600)  # ~20 s of CPU; a loaded 2-core machine stretches it
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        results = {}
        for line in stdout.splitlines():
            if line.startswith(MARK):
                r = json.loads(line[len(MARK):])
                results[r["name"]] = r
        _RESULTS[mode] = (results, proc.returncode, stderr)
    return _RESULTS[mode]


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", list(CHECKS))
def test_linalg(mode, name):
    results, rc, stderr = _run_mode(mode)
    if name not in results:
        pytest.fail(f"subprocess gave no result for {name} (rc={rc})\n{stderr[-4000:]}")
    r = results[name]
    assert r["ok"], r["error"]


if __name__ == "__main__":
    _main(sys.argv[1])
