"""Exceptions raised by the interpreter.

Every failure the interpreter can detect surfaces as a subclass of
:class:`InterpreterError`, with a message that names the op, its source
location and what is wrong. Nothing here ever aborts the host process.
"""

from __future__ import annotations


class InterpreterError(Exception):
    """Base class of every error the interpreter raises."""


class LoadError(InterpreterError):
    """The input could not be parsed as a StableHLO module."""


class CompileError(InterpreterError):
    """The module parsed but cannot be turned into an executable plan."""


class UnsupportedOpsError(CompileError):
    """The module uses ops the interpreter cannot run.

    ``unsupported`` is a list of ``(op_name, location, reason)`` tuples, one
    per offending op occurrence, in program order.
    """

    def __init__(self, unsupported: list[tuple[str, str, str]]) -> None:
        self.unsupported = list(unsupported)
        lines = [f"  {name} at {loc}: {why}" for name, loc, why in self.unsupported]
        names = sorted({u[0] for u in self.unsupported})
        super().__init__(
            f"module uses {len(self.unsupported)} op(s) the interpreter cannot run "
            f"({', '.join(names)}):\n" + "\n".join(lines))


class ExecutionError(InterpreterError):
    """An op failed while the plan was running."""

    def __init__(self, message: str, op_name: str | None = None,
                 location: str | None = None) -> None:
        self.op_name = op_name
        self.location = location
        super().__init__(message)


class Interrupt(Exception):
    """A stop raised into a running plan from outside it (the plugin's
    execute deadline, delivered asynchronously in the running thread).

    The op that was running reports it like any failure (an
    :class:`ExecutionError` whose ``__cause__`` it is). Code that falls back
    from a failed optimisation (``except Exception``: a loop that cannot be
    generated, a sort that cannot run whole-array) re-raises it first: the
    stop may land there, and swallowed it would let the run go on past its
    deadline, for ever in an endless loop."""


class CheckFailure(ExecutionError):
    """A ``check.*`` op (the conformance suites' assertions) did not hold."""


class ArgumentError(ExecutionError):
    """An argument does not match its parameter's type (or cannot be cast
    to it without changing its value)."""
