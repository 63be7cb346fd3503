"""Benchmarks: the same JAX workloads on stablehlo_ref, XLA CPU and the C++
StableHLO reference interpreter. Run ``python -m benchmarks --help``."""
