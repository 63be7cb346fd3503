"""Area ``capi``: the plugin's PJRT C API behaviour, driven the way a
framework drives it (see ../plugin.py), each result compared with what
pjrt_c_api.h promises and with what the reference plugin does.

The groups follow XLA's own C API test (xla/pjrt/c/pjrt_c_api_test.cc) and
add what it cannot check from inside one build: struct sizes of older and
newer callers, every element type and host-buffer semantics, error codes of
bad arguments, and behaviour after errors. One module per group; each check
is a module-level function registered by ``@check(area, group)``
(checker.core); importing this package registers them all, in this order.
"""

import importlib

# The groups in the order the report lists them.
GROUPS = ("version", "struct_size", "attributes", "client", "transfers", "events", "compile",
          "executable", "serialization", "buffers", "multidevice", "errors")

for _group in GROUPS:
    importlib.import_module(f"{__name__}.{_group}")
