"""Check any PJRT plugin against the reference: a conformance kit for CI.

    stablehlo-ref check-plugin PATH.so [--only AREA] [--create-option KEY=VALUE]
                                       [--json out.json] [--md out.md]

Modules: ``plugin`` (load a .so by path, call its C API through ctypes, the
checker's own dtype table), ``core`` (checks, outcomes, the ``@check``
decorator, environment errors, selection), ``capabilities`` (what a plugin
declares it lacks: skips; the client options it needs), ``options``
(client-create options, accelerator defaults), ``probe`` (what the plugin
is, read before the run), ``runner`` (checks in subprocesses, a crash is a
result), ``progress`` (live progress), ``report`` (text, JSON, Markdown),
``capi/`` (area capi, one module per group), ``program_checks`` (area
programs), ``framework_checks`` (area frameworks), ``cli`` (the
check-plugin and bisect commands). See docs/plugin-checker.md.
"""
