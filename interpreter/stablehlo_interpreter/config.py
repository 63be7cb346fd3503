"""The interpreter's switches: every ``STABLEHLO_REF_*`` environment variable
it reads, declared once here and read here only.

Each :class:`Setting` has a name, a parser (its type), a default, a one-line
doc and when it is read:

* ``"first use"``: read the first time the code asks, then kept (the value
  a process starts with; :func:`reload` forgets it, for tests);
* ``"each use"``: read every time the code asks (switches that tests and
  users flip while a process runs, or that are checked once per compile or
  per run, where reading them costs nothing measurable);
* ``"import"``: read when the module that uses it is imported, because a
  hot path reads it as a module constant (see the setting's doc).

:func:`describe` lists every setting with its current value (``stablehlo-ref
config`` prints it); ``docs/debugging.md`` documents each switch once, and a
test checks that every setting declared here is documented there. The PJRT
plugin declares its own settings with the same :class:`Setting` type in
``stablehlo_pjrt/config.py`` and lists both.

A value that does not parse is a :class:`ConfigError` naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

_OFF = ("", "0", "false", "off", "no")
_ENVIRON = os.environ
# ``NAME in os.environ`` encodes the key and raises a KeyError internally per
# miss; os.environ keeps the encoded variables in ``_data`` (kept in sync by
# its setters), where the test is one dict lookup. Settings checked on every
# run (STABLEHLO_REF_TRACE_OPS) use it.
_ENVIRON_DATA = getattr(_ENVIRON, "_data", None)


class ConfigError(ValueError):
    """An environment variable holds a value its setting cannot parse."""


def flag(raw: str) -> bool:
    """On/off: ``0``, ``false``, ``off``, ``no`` and the empty string are off."""
    return raw.strip().lower() not in _OFF


def integer(minimum: int | None = None) -> Callable[[str], int]:
    """A parser of integers, raised to ``minimum`` when below it."""
    def parse(raw: str) -> int:
        value = int(raw.strip())
        return value if minimum is None else max(minimum, value)
    parse.__name__ = "integer" if minimum is None else f"integer >= {minimum}"
    return parse


def seconds(raw: str) -> float:
    """A duration in seconds (a float)."""
    return float(raw.strip())


def text(raw: str) -> str:
    """The value as it is."""
    return raw


def choice(*choices: str, off: str | None = None) -> Callable[[str], str]:
    """One of ``choices`` (lower-cased); the off spellings of :func:`flag`
    give ``off`` when it is given."""
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if off is not None and value in _OFF:
            return off
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value
    parse.__name__ = "|".join(choices)
    return parse


@dataclass(frozen=True, eq=False)
class Setting(Generic[T]):
    """One environment variable: its name, parser, default and doc.

    ``value()`` is the parsed value (the default when the variable is unset
    or, for text settings, empty). ``read`` says when it is read (see the
    module docstring)."""

    name: str
    parse: Callable[[str], T]
    default: T
    doc: str
    read: str = "first use"
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _key: object = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.read not in ("first use", "each use", "import"):
            raise ValueError(f"{self.name}: read must be 'first use', 'each use' or 'import'")
        key = _ENVIRON.encodekey(self.name) if _ENVIRON_DATA is not None else self.name
        object.__setattr__(self, "_key", key)

    def raw(self) -> str | None:
        """The variable's text, or None when it is unset."""
        return _ENVIRON.get(self.name)

    def is_set(self) -> bool:
        """Whether the variable is set at all (one dict lookup)."""
        if _ENVIRON_DATA is not None:
            return self._key in _ENVIRON_DATA
        return self.name in _ENVIRON

    def value(self) -> T:
        cache = self._cache
        if self.read != "each use" and "value" in cache:
            return cast(T, cache["value"])
        raw = _ENVIRON.get(self.name)
        if cache.get("raw", self) == raw:    # parsed before: the same text
            return cast(T, cache["value"])
        value = self._parse(raw)
        cache["raw"], cache["value"] = raw, value
        return value

    def _parse(self, raw: str | None) -> T:
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{self.name}={raw!r}: not a valid value "
                              f"({getattr(self.parse, '__name__', 'value')}: {e})") from None

    def forget(self) -> None:
        """Read the variable again at the next :meth:`value`."""
        self._cache.clear()


def _known(settings: Iterable[Setting[Any]]) -> dict[str, Setting[Any]]:
    out: dict[str, Setting[Any]] = {}
    for s in settings:
        if s.name in out:
            raise ValueError(f"setting {s.name} declared twice")
        out[s.name] = s
    return out


# ---------------------------------------------------------------------------
# The interpreter's settings. docs/debugging.md documents each one.

TRACE_OPS: Setting[str] = Setting(
    "STABLEHLO_REF_TRACE_OPS", choice("1", "on", "true", "yes", "nan", off="0"), "0",
    "trace every op as it runs (1), and stop at the first NaN/inf from finite inputs (nan)",
    read="each use")
VALIDATE: Setting[bool] = Setting(
    "STABLEHLO_REF_VALIDATE", flag, False,
    "check every op's results against its declared type (kernel development)",
    read="import")
NO_FOLD: Setting[bool] = Setting(
    "STABLEHLO_REF_NO_FOLD", flag, False,
    "keep ops whose operands are all constants in the plan instead of running them at compile time",
    read="import")
FAST_LOOPS: Setting[str] = Setting(
    "STABLEHLO_REF_FAST_LOOPS", choice("1", "on", "true", "yes", "print", "always", off="0"), "1",
    "compile hot while loops to Python (1), off (0), print the code (print), every loop at once (always)",
    read="import")
FUSION: Setting[bool] = Setting(
    "STABLEHLO_REF_FUSION", flag, True,
    "run elementwise chains as fused, chunked steps, feeding the reduces they compute the "
    "operand of, with small calls inlined, and while loops of one chain tiled (read when a "
    "plan first runs)",
    read="each use")
CHAIN_VM: Setting[bool] = Setting(
    "STABLEHLO_REF_CHAIN_VM", flag, True,
    "run a fused chain's runs of exact elementwise ops (integer, bit, compare, select, convert, "
    "float basic arithmetic) on the C block machine _chains (read when a fused step is made)",
    read="each use")
ROW_FUSION: Setting[bool] = Setting(
    "STABLEHLO_REF_ROW_FUSION", flag, True,
    "let a fused chain run the elementwise ops on the results of the row reduces it feeds chunk "
    "by chunk (layer norm's rsqrt(var + eps)), and its arithmetic with rows broadcast over a "
    "chunk as one C loop (_sums.row_op: softmax's x - max and e / sum; read when a plan first "
    "runs)",
    read="each use")
THREADS: Setting[int | None] = Setting(
    "STABLEHLO_REF_THREADS", integer(minimum=1), None,
    "threads a fused elementwise chain may use (unset: the usable cores, at most 4)",
    read="each use")
MALLOC: Setting[bool] = Setting(
    "STABLEHLO_REF_MALLOC", flag, True,
    "raise glibc's malloc thresholds at the first compile so freed memory stays for the next run")
PROBE_DIR: Setting[str] = Setting(
    "STABLEHLO_REF_PROBE_DIR", text, "",
    "directory interpreter.probe ops write their values to (empty: keep them in memory)",
    read="each use")
FULL_LOCATIONS: Setting[bool] = Setting(
    "STABLEHLO_REF_FULL_LOCATIONS", flag, False,
    "error messages show a location's whole call stack instead of the user's frame",
    read="each use")
ISOLATE: Setting[bool] = Setting(
    "STABLEHLO_REF_ISOLATE", flag, True,
    "read untrusted MLIR bytecode in a helper process, so that a crashing parser cannot take this one down",
    read="each use")
ISOLATE_TIMEOUT: Setting[float] = Setting(
    "STABLEHLO_REF_ISOLATE_TIMEOUT", seconds, 60.0,
    "seconds the bytecode helper process may take to read one module",
    read="each use")
GRID_TIMEOUT: Setting[float] = Setting(
    "STABLEHLO_REF_GRID_TIMEOUT", seconds, 60.0,
    "seconds a device of a multi-device run waits for the others at a collective",
    read="each use")
SMALL_GEMM_MACS: Setting[int] = Setting(
    "STABLEHLO_REF_SMALL_GEMM_MACS", integer(minimum=0), 1 << 28,
    "float matmuls and LAPACK calls below this many multiply-adds run on one BLAS thread (0: never)",
    read="import")
CONTEXT_SHARE: Setting[int] = Setting(
    "STABLEHLO_REF_CONTEXT_SHARE", integer(minimum=1), 64,
    "modules loaded into one MLIR context before a fresh one is made")
MAX_NESTING: Setting[int] = Setting(
    "STABLEHLO_REF_MAX_NESTING", integer(minimum=1), 500,
    "deepest bracket/region nesting of MLIR text accepted before MLIR parses it")

NUMERICS: Setting[str] = Setting(
    "STABLEHLO_REF_NUMERICS", choice("accurate", "spec"), "accurate",
    "numerics of programs compiled without numerics=: accurate (most accurate result) or spec "
    "(bit-identical to the C++ reference interpreter; docs/numerics.md)",
    read="each use")

SETTINGS: tuple[Setting[Any], ...] = (
    TRACE_OPS, VALIDATE, NO_FOLD, FAST_LOOPS, FUSION, CHAIN_VM, ROW_FUSION, THREADS, MALLOC, PROBE_DIR,
    FULL_LOCATIONS, ISOLATE, ISOLATE_TIMEOUT, GRID_TIMEOUT, SMALL_GEMM_MACS, CONTEXT_SHARE,
    MAX_NESTING, NUMERICS,
)
_known(SETTINGS)   # no name twice


def describe(settings: Iterable[Setting[Any]] = SETTINGS) -> list[dict[str, object]]:
    """Each setting with its current value: ``name``, ``value`` (parsed, or
    the error text of a value that does not parse), ``raw`` (the variable's
    text, None when unset), ``default``, ``read`` and ``doc``."""
    rows = []
    for s in settings:
        raw = s.raw()
        try:
            value: object = s._parse(raw)
        except ConfigError as e:
            value = f"invalid: {e}"
        rows.append({"name": s.name, "value": value, "raw": raw, "default": s.default,
                     "read": s.read, "doc": s.doc})
    return rows


def format_settings(settings: Iterable[Setting[Any]] = SETTINGS) -> str:
    """:func:`describe` as text, one setting per line plus its doc."""
    lines = []
    for row in describe(settings):
        where = "set" if row["raw"] is not None else "default"
        lines.append(f"{row['name']}={row['value']!r} ({where}; read {row['read']})")
        lines.append(f"    {row['doc']}")
    return "\n".join(lines)


def reload(settings: Iterable[Setting[Any]] = SETTINGS) -> None:
    """Forget the values read so far (tests that change the environment)."""
    for s in settings:
        s.forget()


def child_environ(drop: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child process, without the variables
    in ``drop`` and with ``extra`` added."""
    env = dict(_ENVIRON)
    for name in drop:
        env.pop(name, None)
    env.update(extra or {})
    return env


def any_set(names: Iterable[str]) -> bool:
    """Whether any of the (non-STABLEHLO) variables ``names`` is set, such as
    glibc's malloc tunables that :mod:`heap` must leave alone."""
    return any(n in _ENVIRON for n in names)
