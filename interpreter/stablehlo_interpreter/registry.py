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

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

# A builder: called once per op occurrence with the compiler's Op, returns
# the runtime callable.
Builder = Callable[[Any], Callable[..., Any]]
F = TypeVar("F", bound=Callable[..., Any])

KERNELS: dict[str, Builder] = {}
SPECIAL: set[str] = set()
CUSTOM_CALLS: dict[str, tuple[Builder, bool]] = {}
COMPOSITES: dict[str, Builder] = {}
# custom_call targets known not to run here: target (or "prefix*") -> reason.
REJECTED_CUSTOM_CALLS: dict[str, str] = {}

# Traits: properties of an op that code other than its kernel needs (which
# ops fusion may chain, fold may run at compile time, ...). They are given
# where the kernel is registered (``kernel(..., traits=...)``) and asked with
# :func:`with_trait` / :func:`has_trait`, so that an op's properties live in
# one place. The vocabulary, and who asks for each:
TRAITS: dict[str, str] = {
    "elementwise": "elementwise on any shape; a batched region body (regions.py) may hold it",
    "fusible": "may be a member of a fused elementwise chain (fusion.py)",
    "exact": "result bits fixed by the spec whatever the numpy loop (fusion.py passes 0-d operands)",
    "cheap": "one memory-bound pass: alone, gains nothing from chunking (fusion.py)",
    "foldable": "run at compile time when every operand is a constant (fold.py), once before "
                "a generated loop when every operand is loop-invariant (loopgen.py)",
    "view": "the kernel returns a view of its operand, no memory of its own, or a small array "
            "(broadcast_in_dim fills results of at most 4096 elements): fold.py skips its "
            "size check",
    "reducer": "a commutative binary op a reduce body may be recognised as (regions.reducer_kind)",
    "quant_aware": "the kernel takes quantized storage values as they are (quant.py)",
    "quant_same_params": "only selects, copies or moves elements: runs on storage values when "
                         "every quantized operand and result has the same parameters (quant.py)",
    "commutative": "a binary op whose operands may be swapped (loopgen.py picks the NaN order "
                   "of its scalar forms)",
    "moves_elements": "its result's elements are not where its operand's are, even at equal "
                      "shapes: sharding propagation treats it as no elementwise op "
                      "(stablehlo_pjrt/spmd.py)",
    "keeps_tiling": "XLA tiles its result like its first tiled operand of the same rank "
                    "(stablehlo_pjrt/spmd.py)",
    "chlo_broadcast": "has a chlo.broadcast_<name> form: the op after broadcasting its "
                      "operands (ops/chlo.py)",
    "direct_composite": "its kernel also runs stablehlo.composite ops of its name directly, "
                        "instead of their decomposition (registered as a composite)",
    "jax_composite": "a chlo op JAX's lowering of the same-named primitive may wrap in "
                     "stablehlo.composite, run directly here (stablehlo_pjrt/lowerings.py)",
    # How much a conforming backend's result may differ from the exact one:
    # the error model the oracle judges another backend's ops by
    # (stablehlo_pjrt/oracle/isolate.py, causes.py, summation.py).
    "no_rounding": "moves, selects or picks operand elements, or computes an exact "
                   "function of them: every conforming backend gives the same bits",
    "one_rounding": "an IEEE basic operation: the exact result rounded once to the element "
                    "type",
    "summing": "sums terms in an order the spec leaves to the implementation (bounded by "
               "gamma_n * sum|terms|)",
    "transcendental": "an elementwise function whose accuracy the spec leaves to the "
                      "implementation (measured in ULPs against a correctly rounded truth)",
    "fourier": "a discrete Fourier transform through log2(n) butterfly stages (bounded by "
               "((1+eta)^L - 1) * sum|x|, oracle/bounds.py fft_factor)",
    "judged_whole": "the oracle runs it, body and all, as one unit instead of op by op",
}
_OP_TRAITS: dict[str, frozenset[str]] = {}       # op name -> its traits
_WITH_TRAIT: dict[str, frozenset[str]] = {}      # trait -> op names (a cache)


class Unsupported(Exception):
    """Raised by a builder at compile time: this op occurrence cannot run."""


def one_or_many(op: Any) -> Callable[[list[Any]], Any]:
    """The runtime adapter from the list of an op's results to what its
    kernel returns (see above): the single result, or the list itself."""
    if op.num_results == 1:
        return lambda vals: vals[0]
    return lambda vals: vals


def _add_traits(name: str, traits: Iterable[str]) -> None:
    traits = frozenset(traits)
    if not traits:
        return
    unknown = traits - TRAITS.keys()
    if unknown:
        raise ValueError(f"{name}: unknown trait(s) {sorted(unknown)} (registry.TRAITS lists them)")
    _OP_TRAITS[name] = _OP_TRAITS.get(name, frozenset()) | traits
    _WITH_TRAIT.clear()


def with_trait(trait: str) -> frozenset[str]:
    """The names of the registered ops that have ``trait`` (see TRAITS)."""
    found = _WITH_TRAIT.get(trait)
    if found is None:
        if trait not in TRAITS:
            raise KeyError(f"unknown trait {trait!r} (registry.TRAITS lists them)")
        found = frozenset(n for n, ts in _OP_TRAITS.items() if trait in ts)
        _WITH_TRAIT[trait] = found
    return found


def has_trait(name: str, trait: str) -> bool:
    """Whether op ``name`` has ``trait`` (False for an unknown op)."""
    return trait in _OP_TRAITS.get(name, ())


def traits_of(name: str) -> frozenset[str]:
    """The traits of op ``name``."""
    return _OP_TRAITS.get(name, frozenset())


def kernel(*names: str, special: bool = False,
           traits: Iterable[str] = ()) -> Callable[[F], F]:
    """Register ``builder`` under one or more op names, with their ``traits``
    (names from TRAITS)."""
    traits = tuple(traits)

    def deco(builder: F) -> F:
        for name in names:
            if name in KERNELS and KERNELS[name] is not builder:
                raise RuntimeError(f"kernel for {name} registered twice")
            KERNELS[name] = builder
            if special:
                SPECIAL.add(name)
            else:
                SPECIAL.discard(name)
            _add_traits(name, traits)
        if "direct_composite" in traits:
            composite(*names)(builder)
        return builder
    return deco


def wrap_kernel(name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
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

    def wrapped(op: Any, _builder: Builder = builder) -> Callable[..., Any]:
        return wrap(_builder(op))
    wrapped.__doc__ = builder.__doc__
    wrapped.__name__ = builder.__name__
    KERNELS[name] = wrapped


def override_builder(name: str, make: Callable[[Builder], Builder]) -> None:
    """Replace op ``name``'s builder by ``make(current)``, a builder that may
    fall back to the current one (the spec numerics mode's builders do,
    ops/spec_elementwise.py). The replacement keeps the current builder's
    name, doc and :class:`KernelInfo`; the op keeps its traits."""
    current = KERNELS[name]
    builder = make(current)
    builder.__doc__ = current.__doc__
    builder.__name__ = current.__name__
    info = getattr(current, "kernel_info", None)
    if info is not None:
        builder.kernel_info = info  # type: ignore[attr-defined]
    KERNELS[name] = builder


def simple(*names: str, traits: Iterable[str] = ()) -> Callable[[F], F]:
    """Register a kernel that needs nothing from the op: ``fn`` is the kernel."""
    def deco(fn: F) -> F:
        def builder(op: Any, _fn: F = fn) -> F:
            return _fn
        builder.__doc__ = fn.__doc__
        builder.__name__ = fn.__name__
        kernel(*names, traits=traits)(builder)
        return fn
    return deco


def custom_call(*targets: str, special: bool = False) -> Callable[[F], F]:
    """Register a builder for ``stablehlo.custom_call @target``.

    Builders have the same contract as op builders; ``special`` ones get
    ``fn(ctx, regions, *operands)``. A target registered twice (by another
    builder) is an error: each target has one home (docs/architecture.md).
    """
    def deco(builder: F) -> F:
        for t in targets:
            old = CUSTOM_CALLS.get(t)
            if old is not None and old[0] is not builder:
                raise RuntimeError(
                    f"custom_call target {t!r} registered twice: by "
                    f"{old[0].__module__}.{old[0].__qualname__} and "
                    f"{builder.__module__}.{builder.__qualname__}")
            CUSTOM_CALLS[t] = (builder, special)
        return builder
    return deco


class KernelInfo:
    """What the compiler may know of one runtime callable (the ``fn`` a
    builder returns, or a composite builder) beyond calling it. A builder
    attaches it with :func:`annotate`; the compiler reads it with
    :func:`kernel_info`. Every field is optional:

    * ``donate_first``: ``fn(out, *operands)`` computing the same result into
      its first operand's buffer; the compiler calls it when that operand
      dies at this step (compiler.py's DONATE_FIRST steps, loopgen.py).
    * ``invariant_ufunc``: ``(ufunc, bind)``: the kernel is ``ufunc`` applied
      with some operands fixed; ``bind(consts)`` gives the kernel with those
      operands bound, which fusion.py hoists out of its chunk loop.
    * ``regions_unused``: True when the kernel of an op with regions does not
      call them (a reduce whose body it recognised), so the compiler binds
      none per run.
    * ``composite_exact``: on a composite builder, True when running the op
      directly gives exactly its decomposition's results, so the composite
      runs directly whatever its decomposition (ops/control.py).
    * ``scalar_math``: on the builder of a transcendental whose f32/f16
      kernel evaluates a float64 function and rounds once: that function on
      a Python float (``math.sin``, ...), which loopgen.py's scalar loop
      bodies call instead of the kernel where the rounding is certain to
      agree (:func:`scalar_math`; tests/test_loopgen.py checks it value by
      value against the kernel).
    * ``into``: ``into(out, *operands)`` computing the kernel's result into
      ``out`` (a writable C-contiguous array of the result's shape and dtype
      sharing no memory with the operands) and returning it; fusion.py
      makes a chain's stored values in their chunks of the output with it.
    * ``reduction``: ``(reducer, dims)`` on the kernel of a ``reduce`` of one
      operand (of the result's element type) that is ``reducer.reduce(x,
      dims, init)`` (ops/reducers.py): fusion.py may then reduce the chunks
      of the elementwise chain that computes ``x`` as they are made
      (:meth:`Reducer.row_plan`).
    * ``branch``: on the kernel of an op that runs exactly one of its
      regions, without arguments, and returns that region's results (if,
      case): ``branch(selector, n_regions)`` is the index of the region its
      first operand selects. The compiler then binds only that region per
      run, and picks it at compile time when the selector is a constant.
    * ``in_range``: on a gather's kernel, ``in_range(operand, indices)``:
      the same gather for start indices known to lie in ``[0, m]``, ``m`` the
      least clamp bound of their components, so that it skips the clamp
      (index_chains.py, when the bounds mask of a ``mode="fill"`` gather
      proved it on the same indices).
    * ``unbound``: on the kernel of an op with regions,
      ``unbound(ctx, captures, operands)``: its run without bound regions
      where it has one (``captures``: each region's captured values), or
      None, when the compiler then binds the regions and calls the kernel
      as usual. The while op's C-run loop (loopvm.py) takes it: binding two
      regions costs more than the rest of a short loop's call.
    * ``shares``: True when the kernel splits a large operand among the
      pool's threads itself (pool.run_chunks), in one pass with one
      fix-up at its end (ops/fastmath.f32_kernel): alone, it gains nothing
      from fusion.py's chunks, whose per-chunk calls repeat that fix-up.
    * ``f32_loop``: on a float32 kernel of ops/fastmath.f32_kernel, the name
      of its ``_fastmath`` function (``"tanh_f32"``): chainvm.py runs that
      function's C loop inside a fused chain's block-machine program and
      recomputes the elements it flags with the chain's own kernels.
    """

    __slots__ = ("donate_first", "invariant_ufunc", "regions_unused", "composite_exact",
                 "scalar_math", "reduction", "into", "branch", "in_range", "unbound",
                 "shares", "f32_loop")

    def __init__(self, donate_first: Callable[..., Any] | None = None,
                 invariant_ufunc: tuple[Any, Callable[..., Any]] | None = None,
                 regions_unused: bool = False, composite_exact: bool = False,
                 scalar_math: Callable[[float], float] | None = None,
                 reduction: tuple[Any, tuple[int, ...]] | None = None,
                 into: Callable[..., Any] | None = None,
                 branch: Callable[[Any, int], int] | None = None,
                 in_range: Callable[..., Any] | None = None,
                 unbound: Callable[..., Any] | None = None,
                 shares: bool = False, f32_loop: str | None = None) -> None:
        self.donate_first = donate_first
        self.invariant_ufunc = invariant_ufunc
        self.regions_unused = regions_unused
        self.composite_exact = composite_exact
        self.scalar_math = scalar_math
        self.reduction = reduction
        self.into = into
        self.branch = branch
        self.in_range = in_range
        self.unbound = unbound
        self.shares = shares
        self.f32_loop = f32_loop


_NO_INFO = KernelInfo()


def annotate(fn: F, **fields: Any) -> F:
    """Attach (or update) ``fn``'s :class:`KernelInfo`; returns ``fn``.
    Unknown fields are an error."""
    info = getattr(fn, "kernel_info", None)
    if info is None:
        info = KernelInfo()
    for k, v in fields.items():
        if k not in KernelInfo.__slots__:
            raise TypeError(f"KernelInfo has no field {k!r}")
        setattr(info, k, v)
    fn.kernel_info = info  # type: ignore[attr-defined]
    return fn


def kernel_info(fn: Callable[..., Any]) -> KernelInfo:
    """``fn``'s :class:`KernelInfo` (all fields unset when it has none)."""
    info: KernelInfo = getattr(fn, "kernel_info", _NO_INFO)
    return info


def scalar_math(name: str) -> Callable[[float], float] | None:
    """The float64 scalar function op ``name``'s kernel stands for
    (``KernelInfo.scalar_math`` of its builder), or None. A builder replaced
    by :func:`wrap_kernel` has none: its op then runs its kernel."""
    builder = KERNELS.get(name)
    return None if builder is None else kernel_info(builder).scalar_math


def composite(*names: str) -> Callable[[F], F]:
    """Register a plain builder that runs ``stablehlo.composite`` ops with one
    of ``names`` directly instead of through their decomposition (the builder
    gets the composite op; see ops/control.py)."""
    def deco(builder: F) -> F:
        for n in names:
            if n in COMPOSITES and COMPOSITES[n] is not builder:
                raise RuntimeError(f"composite {n} registered twice")
            COMPOSITES[n] = builder
        return builder
    return deco


def reject_custom_call(reason: str, *targets: str) -> None:
    """Record why ``custom_call @target`` cannot run (a trailing ``*`` in a
    target matches a prefix), for the compiler's error message."""
    for t in targets:
        REJECTED_CUSTOM_CALLS[t] = reason


def custom_call_rejection(target: str) -> str | None:
    """The recorded reason ``target`` cannot run, or None."""
    reason = REJECTED_CUSTOM_CALLS.get(target)
    if reason is None and target:
        for pattern, why in REJECTED_CUSTOM_CALLS.items():
            if pattern.endswith("*") and target.startswith(pattern[:-1]):
                return why
    return reason
