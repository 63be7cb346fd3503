"""The JAX sweep: real JAX programs on stablehlo_ref compared with XLA CPU.

``harness`` holds the machinery (configurations, ``@case`` registry, the
Checker, the subprocess protocol, XFAIL); the other modules hold the cases by
op family.  ``tests/test_jax_sweep.py`` is the pytest side and the subprocess
entry.  See docs/testing.md.
"""
