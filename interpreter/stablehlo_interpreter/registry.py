"""The one registry that maps StableHLO op names to kernels.

A *builder* is called once per op occurrence at compile time with an
:class:`~stablehlo_interpreter.compiler.Op` (decoded attributes, types,
compiled regions) and returns the runtime callable.

* Plain kernels (the default) return ``fn(*operands)``.
* Special kernels (``special=True``: ops with regions, or ops that need the
  execution context such as replica_id or rng) return
  ``fn(ctx, regions, *operands)`` where ``regions`` are callables
  ``region(*args) -> list`` bound to this execution.

The runtime callable returns the op's single result, or a sequence of results
when the op has zero or several results. Builders raise :class:`Unsupported`
for attribute combinations they cannot run; the compiler collects those with
the missing kernels into one :class:`UnsupportedOpsError`.
"""

KERNELS = {}
SPECIAL = set()
CUSTOM_CALLS = {}
COMPOSITES = {}
# custom_call targets known not to run here: target (or "prefix*") -> reason.
REJECTED_CUSTOM_CALLS = {}


class Unsupported(Exception):
    """Raised by a builder at compile time: this op occurrence cannot run."""


def one_or_many(op):
    """The runtime adapter from the list of an op's results to what its
    kernel returns (see above): the single result, or the list itself."""
    if op.num_results == 1:
        return lambda vals: vals[0]
    return lambda vals: vals


def kernel(*names, special=False):
    """Register ``builder`` under one or more op names."""
    def deco(builder):
        for name in names:
            if name in KERNELS and KERNELS[name] is not builder:
                raise RuntimeError(f"kernel for {name} registered twice")
            KERNELS[name] = builder
            if special:
                SPECIAL.add(name)
            else:
                SPECIAL.discard(name)
        return builder
    return deco


def wrap_kernel(name, wrap):
    """Make programs compiled from now on run ``wrap(fn)`` where the plain
    kernel of op ``name`` would run ``fn`` (the plugin's fault injection,
    stablehlo_pjrt/faults.py, breaks one kernel this way). Raises KeyError
    when no kernel is registered under ``name`` and ValueError for a special
    kernel (an op with regions or that needs the execution context), whose
    runtime callable takes more than the operands."""
    builder = KERNELS.get(name)
    if builder is None:
        raise KeyError(name)
    if name in SPECIAL:
        raise ValueError(f"{name} is a special kernel (regions or execution context)")

    def wrapped(op, _builder=builder):
        return wrap(_builder(op))
    wrapped.__doc__ = builder.__doc__
    wrapped.__name__ = builder.__name__
    KERNELS[name] = wrapped


def simple(*names):
    """Register a kernel that needs nothing from the op: ``fn`` is the kernel."""
    def deco(fn):
        def builder(op, _fn=fn):
            return _fn
        builder.__doc__ = fn.__doc__
        builder.__name__ = fn.__name__
        kernel(*names)(builder)
        return fn
    return deco


def custom_call(*targets, special=False):
    """Register a builder for ``stablehlo.custom_call @target``.

    Builders have the same contract as op builders; ``special`` ones get
    ``fn(ctx, regions, *operands)``.
    """
    def deco(builder):
        for t in targets:
            CUSTOM_CALLS[t] = (builder, special)
        return builder
    return deco


def composite(*names):
    """Register a plain builder that runs ``stablehlo.composite`` ops with one
    of ``names`` directly instead of through their decomposition (the builder
    gets the composite op; see ops/control.py)."""
    def deco(builder):
        for n in names:
            if n in COMPOSITES and COMPOSITES[n] is not builder:
                raise RuntimeError(f"composite {n} registered twice")
            COMPOSITES[n] = builder
        return builder
    return deco


def reject_custom_call(reason, *targets):
    """Record why ``custom_call @target`` cannot run (a trailing ``*`` in a
    target matches a prefix), for the compiler's error message."""
    for t in targets:
        REJECTED_CUSTOM_CALLS[t] = reason


def custom_call_rejection(target):
    """The recorded reason ``target`` cannot run, or None."""
    reason = REJECTED_CUSTOM_CALLS.get(target)
    if reason is None and target:
        for pattern, why in REJECTED_CUSTOM_CALLS.items():
            if pattern.endswith("*") and target.startswith(pattern[:-1]):
                return why
    return reason
