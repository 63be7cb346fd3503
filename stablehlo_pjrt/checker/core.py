"""Checks, their outcomes and the registry the runner enumerates.

A check is a function ``fn(ctx, *params)`` registered under an id
``area.group.name[param]``. It passes by returning (a string it returns is
kept as a note on the passed result: why a difference is not a failure); it reports a failure by
raising :class:`Failed` (with the detail and, for programs, the first
divergent op), a capability the plugin lacks by raising :class:`Unsupported`
(or letting a PJRT UNIMPLEMENTED error escape), and a check that does not
apply by raising :class:`Skipped`. Anything else it raises is a failure whose
detail is the exception. A crash or hang of the process is found by the
runner (see ``runner.py``), not here.

An environment failure is not the plugin's: a client that cannot be created,
a device out of memory or missing (see :func:`environment_error`) makes the
result ``error``, with the cause and the fix, never ``failed``.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .context import Context

STATUSES = ("passed", "failed", "unsupported", "crashed", "skipped", "error")
AREAS = ("capi", "programs", "frameworks")


class Failed(AssertionError):
    def __init__(self, detail: str, op: str | None = None) -> None:
        super().__init__(detail)
        self.detail, self.op = detail, op


class Unsupported(Exception):
    """The plugin answered UNIMPLEMENTED or refused to compile."""


class Skipped(Exception):
    """The check does not apply (capability not declared, kit-side limit)."""


class EnvironmentFailure(Exception):
    """The machine, not the plugin, failed the check (its message says the
    cause and the fix): the result is ``error``."""


# (pattern of the error text, cause, fix): failures of the machine the
# plugin runs on, not of the plugin. XLA's CUDA plugin reports a GPU held by
# other clients as "no supported devices found" or CUDA_ERROR_OUT_OF_MEMORY,
# and a cuBLAS handle it could not allocate as "No BLAS support in stream".
_ENVIRONMENT = [
    (r"RESOURCE_EXHAUSTED|out of memory|OUT_OF_MEMORY|No BLAS support",
     "the device ran out of memory",
     "run fewer workers (-j 1), or pass the plugin's allocator options with --create-option "
     "(XLA's GPU plugins: --create-option preallocate=false)"),
    (r"no supported devices found|CUDA_ERROR_NO_DEVICE|no devices? (found|available)|"
     r"device (is )?(busy|unavailable)",
     "the plugin found no usable device",
     "check that the device is visible to this process (CUDA_VISIBLE_DEVICES, nvidia-smi) and "
     "not held by another process; run fewer workers (-j 1)"),
]


def environment_error(function: str | None, message: str) -> str | None:
    """'cause; fix' when ``message`` (an error of PJRT ``function``) is a
    failure of the environment rather than of the plugin, else None."""
    for pattern, cause, fix in _ENVIRONMENT:
        if re.search(pattern, message, re.IGNORECASE):
            return f"{cause}; fix: {fix}"
    if function == "PJRT_Client_Create":
        return ("the plugin could not create a client; fix: check the device is present and "
                "free, and pass the client options the plugin needs with --create-option "
                "KEY=VALUE (or create_options in the --capabilities file)")
    return None


def environment_key(detail: str) -> str:
    """``detail`` with numbers blanked: the same environment error repeating
    (with other sizes or addresses) has one key."""
    return re.sub(r"\d+", "N", detail.splitlines()[0] if detail else "")[:200]


# A check: fn(ctx, *params) -> None, or a note (str) on a passed result.
CheckFn = Callable[..., "str | None"]


@dataclass
class Check:
    id: str
    area: str
    group: str
    fn: Callable[..., Any]
    params: tuple[Any, ...] = ()
    requires: tuple[Any, ...] = ()     # capability names (see capabilities.py)
    doc: str = ""


@dataclass
class Result:
    id: str
    area: str
    group: str
    status: str
    detail: str = ""
    op: str | None = None
    seconds: float = 0.0
    notes: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = {"id": self.id, "area": self.area, "group": self.group,
             "status": self.status, "seconds": round(self.seconds, 4)}
        if self.detail:
            d["detail"] = self.detail
        if self.op:
            d["op"] = self.op
        if self.notes:
            d["notes"] = self.notes
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Result":
        return cls(d["id"], d["area"], d["group"], d["status"], d.get("detail", ""),
                   d.get("op"), d.get("seconds", 0.0), d.get("notes", []))


class Registry:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}

    def add(self, check: Check) -> None:
        if check.id in self.checks:
            raise ValueError(f"duplicate check id {check.id}")
        self.checks[check.id] = check

    def check(self, area: str, group: str, name: str | None = None,
              params: list[Any] | None = None,
              requires: tuple[str, ...] | Callable[..., tuple[str, ...]] = (),
              ids: list[str] | None = None) -> Callable[[CheckFn], CheckFn]:
        """Decorator: registers ``fn`` once, or once per entry of ``params``
        (each a tuple of arguments; ``ids`` names them)."""
        def deco(fn: CheckFn) -> CheckFn:
            base = f"{area}.{group}.{name or fn.__name__}"
            if params is None:
                assert not callable(requires), "requires(*params) needs params"
                self.add(Check(base, area, group, fn, (), tuple(requires), fn.__doc__ or ""))
            else:
                for k, p in enumerate(params):
                    p = p if isinstance(p, tuple) else (p,)
                    label = ids[k] if ids else ",".join(str(x) for x in p)
                    req = requires(*p) if callable(requires) else tuple(requires)
                    self.add(Check(f"{base}[{label}]", area, group, fn, p, tuple(req),
                                   fn.__doc__ or ""))
            return fn
        return deco


# The checks declared by module-level functions (capi/, framework_checks.py):
# ``@check(area, group, ...)`` adds them here as their module is imported;
# registry.build copies them into a run's registry.
DECLARED = Registry()


def check(area: str, group: str, name: str | None = None, params: list[Any] | None = None,
          requires: tuple[str, ...] | Callable[..., tuple[str, ...]] = (),
          ids: list[str] | None = None) -> Callable[[CheckFn], CheckFn]:
    """Decorator: registers a module-level check function (see
    :meth:`Registry.check`)."""
    return DECLARED.check(area, group, name, params, requires, ids)


def run_check(check: Check, ctx: Context) -> Result:
    """Runs one check in this process and classifies how it ended."""
    from .plugin import EventTimeout, PluginError
    t0 = time.perf_counter()
    status, detail, op, notes = "passed", "", None, []
    try:
        missing = [r for r in check.requires if not ctx.capabilities.allows(r)]
        if missing:
            raise Skipped(f"requires {', '.join(missing)} (not declared by the plugin)")
        note = check.fn(ctx, *check.params)
        if isinstance(note, str):
            notes.append(note)
    except Failed as e:
        status, detail, op = "failed", e.detail, e.op
    except Unsupported as e:
        status, detail = "unsupported", str(e)
    except EnvironmentFailure as e:
        status, detail = "error", f"environment: {e}"
    except Skipped as e:
        status, detail = "skipped", str(e)
    except PluginError as e:
        env = environment_error(e.function, str(e))
        if env is not None:
            status, detail, op = "error", f"environment: {e}\ncause: {env}", e.function
        elif e.unimplemented:
            status, detail = "unsupported", str(e)
        else:
            status, detail, op = "failed", f"unexpected error: {e}", e.function
    except EventTimeout as e:
        status, detail, op = "failed", str(e), e.function
    except Exception as e:  # noqa: BLE001 - any escape is the check's result
        tb = traceback.extract_tb(e.__traceback__)
        where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
        status, detail = "failed", f"{type(e).__name__}: {e}{where}"
    return Result(check.id, check.area, check.group, status, detail, op,
                  time.perf_counter() - t0, notes)


def select(checks: list[Check], only: list[str] | tuple[Any, ...] = (),
           exclude: list[str] | tuple[Any, ...] = ()) -> list[Check]:
    """Checks whose id starts with, or whose area/group equals, one of ``only``
    (all if empty), minus those matching ``exclude``."""
    def match(c: Check, pats: list[str] | tuple[Any, ...]) -> bool:
        return any(c.id.startswith(p) or c.area == p or c.group == p or
                   f"{c.area}.{c.group}" == p or p in c.id for p in pats)
    out = [c for c in checks if not only or match(c, only)]
    return [c for c in out if not match(c, exclude)] if exclude else out


def shard(checks: list[Check], k: int, n: int) -> list[Check]:
    """The ``k``-th (from 1) of ``n`` interleaved parts of ``checks``: every
    area is spread over the parts, so they take about the same time."""
    return [c for i, c in enumerate(checks) if i % n == k - 1]
