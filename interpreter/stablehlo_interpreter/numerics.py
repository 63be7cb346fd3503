"""The interpreter's numerics mode: ``"accurate"`` (default) or ``"spec"``.

* ``accurate``: the most accurate result the element type can hold (sums in a
  wide accumulator or pairwise, correctly rounded functions); the oracle's
  answer.
* ``spec``: what the C++ StableHLO reference interpreter computes: every op
  in its element type, in that interpreter's order (sequential reductions,
  windows and contractions; see docs/numerics.md).

``compile(..., numerics=)`` selects it per program; without it the
environment variable ``STABLEHLO_REF_NUMERICS`` does (config.NUMERICS, read
at each compile, so a process may set it before compiling).
"""

from . import config
from .errors import CompileError

ACCURATE = "accurate"
SPEC = "spec"
MODES = (ACCURATE, SPEC)


def resolve(numerics=None):
    """The mode ``numerics`` names, or the environment's (default accurate)."""
    if numerics is None:
        try:
            return config.NUMERICS.value()
        except config.ConfigError as e:
            raise CompileError(str(e)) from None
    if numerics not in MODES:
        raise CompileError(f"numerics={numerics!r}: unknown numerics mode (choose one of "
                           f"{', '.join(MODES)})")
    return numerics
