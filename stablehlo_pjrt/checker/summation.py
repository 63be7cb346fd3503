"""The summation-order cause as the programs area applies it: the bound
lives in the oracle (stablehlo_pjrt/oracle/summation.py), one engine for
the checker, ``stablehlo-ref compare`` and ``oracle.compare``."""

from ..oracle.summation import SUMMING, explain, within  # noqa: F401
