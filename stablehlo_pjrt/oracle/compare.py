"""Run a JAX function on stablehlo_ref and on another backend; diff the outputs."""

from __future__ import annotations

import numpy as np

from stablehlo_interpreter import ComparisonReport, compare_outputs

REFERENCE_PLATFORM = "stablehlo_ref"


def _device(platform: str):
    import jax
    try:
        devices = jax.devices(platform)
    except RuntimeError as e:
        raise RuntimeError(
            f"backend {platform!r} is not available in this process ({e}); "
            "the oracle needs both platforms at once: leave JAX_PLATFORMS unset or "
            f"set it to e.g. 'cpu,{REFERENCE_PLATFORM}'") from None
    if not devices:
        raise RuntimeError(f"backend {platform!r} has no devices")
    return devices[0]


def run_on(platform: str, fn, *args):
    """``jax.jit(fn)(*args)`` with every input committed to ``platform``'s
    first device (so the computation runs there); returns the outputs as a
    list of (name, numpy array) in tree order."""
    import jax
    dev = _device(platform)
    placed = jax.device_put(args, dev)
    out = jax.jit(fn)(*placed)
    leaves = jax.tree_util.tree_leaves_with_path(out)
    return [(f"output{jax.tree_util.keystr(path)}" if path else "output",
             np.asarray(jax.device_get(leaf))) for path, leaf in leaves]


def compare(fn, *args, against: str = "cpu", rtol=None, atol=None, ulp=None,
            reference: str = REFERENCE_PLATFORM) -> ComparisonReport:
    """Runs ``fn(*args)`` under ``jax.jit`` on the reference (stablehlo_ref)
    and on the ``against`` platform and compares every output leaf.

    Integers and bools must be equal; floats within ``rtol``/``atol``
    (defaults per dtype, see stablehlo_interpreter/compare.py) or within ``ulp``
    representable values if given; NaN matches only NaN. Returns a
    :class:`~stablehlo_interpreter.ComparisonReport`: ``report.ok``, and
    ``str(report)`` names each differing output with its max abs/rel error,
    where the worst element is and how many elements differ.
    """
    ref = run_on(reference, fn, *args)
    other = run_on(against, fn, *args)
    ref_names = [n for n, _ in ref]
    other_names = [n for n, _ in other]
    if ref_names != other_names:
        raise AssertionError(f"the output trees differ: {ref_names} on {reference}, "
                             f"{other_names} on {against}")
    return compare_outputs([v for _, v in ref], [v for _, v in other], names=ref_names,
                           rtol=rtol, atol=atol, ulp=ulp,
                           reference_name=reference, other_name=against)
