"""Check any PJRT plugin against the reference: a conformance kit for CI.

    stablehlo-ref check-plugin PATH.so [--only AREA] [--json out.json] [--md out.md]

Modules: ``plugin`` (load a .so by path, call its C API through ctypes),
``core`` (checks, outcomes, selection), ``capabilities`` (what a plugin
declares it lacks: skips), ``runner`` (checks in subprocesses, a crash is a
result), ``report`` (text, JSON, Markdown), ``capi_checks`` (area capi),
``cli`` (the check-plugin command). See docs/plugin-checker.md.
"""
