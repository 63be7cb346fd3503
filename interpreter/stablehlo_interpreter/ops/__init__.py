"""Op kernels. Importing this package registers every kernel.

One module per op family; each kernel's docstring names the spec section
(openxla/stablehlo docs/spec.md) it implements.
"""

import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
