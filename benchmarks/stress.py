"""Load and threads on the stablehlo_ref plugin (issue 13).

    JAX_PLATFORMS=stablehlo_ref python -m benchmarks.stress [--threads 8]
        [--per-thread 1000] [--rss-runs 10000]

1. ``--threads`` threads each run ``--per-thread`` executes of a mix of jitted
   programs (elementwise, matmul, reduction, while loop, scatter) on
   different inputs, every result checked against numpy.
2. One program executed ``--rss-runs`` times; the resident set size is
   sampled every 1,000 executes after a warm-up, and the growth between the
   first and last sample is reported (flat: a few MB of allocator noise).
Exit status 1 on a wrong result or an exception in any thread.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def programs():
    import jax
    import jax.numpy as jnp

    def loop(x):
        return jax.lax.fori_loop(0, 5, lambda i, c: c * 0.5 + i, x)

    def scat(x, i):
        return x.at[i].add(1.0)
    return [
        (jax.jit(lambda x, y: x * y + 1.0), lambda r: (r.standard_normal(16, np.float32),
                                                       r.standard_normal(16, np.float32)),
         lambda x, y: x * y + np.float32(1.0)),
        (jax.jit(lambda x, y: x @ y), lambda r: (r.standard_normal((8, 8), np.float32),
                                                 r.standard_normal((8, 8), np.float32)),
         lambda x, y: x @ y),
        (jax.jit(lambda x: jnp.sum(x, axis=0)), lambda r: (r.integers(-9, 9, (6, 5), np.int32),),
         lambda x: x.sum(axis=0, dtype=np.int32)),
        (jax.jit(loop), lambda r: (r.standard_normal(4, np.float32),),
         lambda x: _loop_np(x)),
        (jax.jit(scat), lambda r: (r.standard_normal(5, np.float32), r.integers(0, 5)),
         lambda x, i: _scat_np(x, i)),
    ]


def _loop_np(x):
    c = x.copy()
    for i in range(5):
        c = c * np.float32(0.5) + np.float32(i)
    return c


def _scat_np(x, i):
    y = x.copy()
    y[i] += 1
    return y


def threads_run(n_threads: int, per_thread: int) -> tuple[int, list[str], float]:
    progs = programs()
    rng0 = np.random.default_rng(0)
    for f, make, _ in progs:  # compile once, outside the timed part
        f(*make(rng0))
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()

    def worker(k):
        r = np.random.default_rng(100 + k)
        try:
            for j in range(per_thread):
                f, make, ref = progs[(j + k) % len(progs)]
                args = make(r)
                got = np.asarray(f(*args))
                want = ref(*args)
                if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    with lock:
                        errors.append(f"thread {k} execute {j}: wrong result")
                    return
                with lock:
                    done[0] += 1
        except Exception as e:  # reported, and the run fails
            with lock:
                errors.append(f"thread {k}: {type(e).__name__}: {e}")
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return done[0], errors, time.perf_counter() - t0


def rss_run(runs: int) -> tuple[list[tuple[int, float]], float]:
    import jax
    f = jax.jit(lambda x, y: (x @ y).sum() + x.mean())
    x = np.ones((32, 32), np.float32)
    for _ in range(200):  # warm-up: caches, allocator pools
        f(x, x).block_until_ready()
    samples = [(0, rss_mb())]
    t0 = time.perf_counter()
    for i in range(1, runs + 1):
        f(x, x).block_until_ready()
        if i % 1000 == 0:
            samples.append((i, rss_mb()))
    return samples, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--per-thread", type=int, default=1000)
    ap.add_argument("--rss-runs", type=int, default=10000)
    a = ap.parse_args(argv)
    import jax
    print(f"backend: {jax.default_backend()}")
    n, errors, secs = threads_run(a.threads, a.per_thread)
    print(f"threads: {a.threads} x {a.per_thread}: {n} correct executes in {secs:.1f} s "
          f"({n / secs:.0f}/s); {len(errors)} error(s)")
    for e in errors[:10]:
        print("  " + e)
    samples, secs = rss_run(a.rss_runs)
    growth = samples[-1][1] - samples[1][1] if len(samples) > 2 else 0.0
    print(f"rss: {a.rss_runs} executes in {secs:.1f} s; RSS MB at "
          + ", ".join(f"{i}:{m:.1f}" for i, m in samples)
          + f"; growth after the first 1,000: {growth:+.1f} MB")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
