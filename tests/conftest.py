"""Shared test configuration.

The StableHLO conformance files live beside the checkout, in
``../shared/stablehlo-suite`` (CI clones main next to ``shared/``);
``STABLEHLO_SUITE`` overrides the location.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = Path(os.environ.get("STABLEHLO_SUITE", REPO.parent / "shared" / "stablehlo-suite"))
