"""Library routines: random numbers, linear algebra, FFT."""

from .harness import case
from .inputs import randn


@case("programs", "programs_slow")
def random(c):
    import jax
    import jax.numpy as jnp
    np = c.np
    seeds = np.array([0, 42, 2**31 - 1], np.uint32)
    for impl in ["threefry2x32", "rbg"] + (["unsafe_rbg"] if c.slow else []):
        t = f"[{impl}]"
        mk = lambda s, impl=impl: jax.random.key(s, impl=impl)  # noqa: E731
        bits_fn = lambda s, mk=mk: jax.random.key_data(jax.random.split(mk(s), 3))  # noqa: E731
        for s in (seeds if c.slow else seeds[:1]):
            c("split" + t, bits_fn, s)
            c("bits" + t, lambda s, mk=mk: jax.random.bits(mk(s), (5, 3), jnp.uint32), s)
            c("bits_u8" + t, lambda s, mk=mk: jax.random.bits(mk(s), (7,), jnp.uint8), s)
            c("uniform" + t, lambda s, mk=mk: jax.random.uniform(mk(s), (6,), minval=-2, maxval=3), s)
            c("normal" + t, lambda s, mk=mk: jax.random.normal(mk(s), (6,)), s, ulps=4, atol=1e-6)
            c("bernoulli" + t, lambda s, mk=mk: jax.random.bernoulli(mk(s), 0.3, (10,)), s)
            if impl != "threefry2x32" and not c.slow:
                continue  # the rest only builds on bits: the default run checks it on threefry
            c("categorical" + t, lambda s, mk=mk: jax.random.categorical(mk(s), jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(9,)), s)
            c("permutation" + t, lambda s, mk=mk: jax.random.permutation(mk(s), 10), s)
            c("randint" + t, lambda s, mk=mk: jax.random.randint(mk(s), (8,), -5, 1000), s)
            c("fold_in" + t, lambda s, mk=mk: jax.random.key_data(jax.random.fold_in(mk(s), 7)), s)
            c("choice" + t, lambda s, mk=mk: jax.random.choice(mk(s), 10, (4,), replace=False), s)
            c("truncated_normal" + t, lambda s, mk=mk: jax.random.truncated_normal(mk(s), -1.0, 1.5, (6,)), s, ulps=8, atol=1e-6)
            c("gamma" + t, lambda s, mk=mk: jax.random.gamma(mk(s), jnp.array([0.5, 1.0, 3.0])), s, rtol=1e-4, atol=1e-6)
    c("PRNGKey_legacy", lambda s: jax.random.uniform(jax.random.PRNGKey(s), (4,)), np.uint32(3))
    c("vmap_split", lambda s: jax.vmap(lambda k: jax.random.normal(k, (2,)))(jax.random.split(jax.random.key(s), 4)),
      np.uint32(1), ulps=4, atol=1e-6)


@case("programs", "x64")
def linalg(c):
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax import lax
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    tol = {"rtol": 1e-9, "atol": 1e-9} if dt == "float64" else {"rtol": 2e-4, "atol": 2e-4}
    a = randn((4, 4), dt)
    spd = (a @ a.T + 4 * np.eye(4)).astype(dt)
    b = randn((4, 2), dt, seed=1)
    c("cholesky", jnp.linalg.cholesky, spd, **tol)
    c("solve", jnp.linalg.solve, a, b, **tol)
    c("inv", jnp.linalg.inv, a, **tol)
    c("det", jnp.linalg.det, a, **tol)
    c("slogdet", jnp.linalg.slogdet, a, **tol)
    c("lu", jsl.lu, a, **tol)
    c("lu_factor", jsl.lu_factor, a, **tol)
    c("triangular_solve", lambda m, r: lax.linalg.triangular_solve(m, r, left_side=True, lower=True),
      np.tril(spd).astype(dt), b, **tol)
    c("solve_triangular_T", lambda m, r: jsl.solve_triangular(m, r, trans=1, lower=False), np.triu(spd).astype(dt), b, **tol)
    c("cho_solve", lambda m, r: jsl.cho_solve(jsl.cho_factor(m), r), spd, b, **tol)
    # Factorizations are unique only up to signs; compare invariant quantities.
    c("qr_reconstruct", lambda m: (lambda q, r: (q @ r, jnp.abs(jnp.diag(r))))(*jnp.linalg.qr(m)), a, **tol)
    c("eigh_values", lambda m: jnp.linalg.eigh(m)[0], spd, **tol)
    c("svd_values", lambda m: jnp.linalg.svd(m, compute_uv=False), a, **tol)
    c("eig_values_sorted", lambda m: jnp.sort_complex(jnp.linalg.eigvals(m)), a, **tol)
    c("pinv", jnp.linalg.pinv, randn((5, 3), dt), **tol)
    c("lstsq", lambda m, r: jnp.linalg.lstsq(m, r)[0], randn((5, 3), dt), randn((5,), dt, seed=2), **tol)
    c("matrix_power", lambda m: jnp.linalg.matrix_power(m, 3), a, **tol)
    c("norm_fro_2", lambda m: (jnp.linalg.norm(m), jnp.linalg.norm(m, 1), jnp.linalg.norm(m[0])), a, **tol)
    c("expm", jsl.expm, a * 0.3, **tol)


@case("programs", "x64")
def fft(c):
    import jax.numpy as jnp
    np = c.np
    x64 = "x64" in c.cfg
    cdt = "complex128" if x64 else "complex64"
    rdt = "float64" if x64 else "float32"
    tol = {"rtol": 1e-10, "atol": 1e-10} if x64 else {"rtol": 2e-5, "atol": 2e-5}
    z = randn((4, 8), cdt)
    r = randn((4, 8), rdt)
    c("fft", jnp.fft.fft, z, **tol)
    c("ifft", jnp.fft.ifft, z, **tol)
    c("fft_n_pad", lambda v: jnp.fft.fft(v, n=11), z, **tol)
    c("rfft", jnp.fft.rfft, r, **tol)
    c("irfft", jnp.fft.irfft, np.fft.rfft(r).astype(cdt), **tol)
    c("irfft_odd_n", lambda v: jnp.fft.irfft(v, n=7), np.fft.rfft(r).astype(cdt), **tol)
    c("fft2", jnp.fft.fft2, z, **tol)
    c("fftn_3d", jnp.fft.fftn, randn((3, 4, 5), cdt), **tol)
    c("rfftn", jnp.fft.rfftn, randn((3, 4, 6), rdt), **tol)
    c("irfftn", lambda v: jnp.fft.irfftn(v, s=(4, 6)), randn((4, 4), cdt), **tol)
    c("fft_axis0_norm_ortho", lambda v: jnp.fft.fft(v, axis=0, norm="ortho"), z, **tol)
    c("fftshift_freq", lambda v: jnp.fft.fftshift(jnp.fft.fftfreq(8) + v), r[0], **tol)
