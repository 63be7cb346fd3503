"""PJRT errors.

Handlers raise `PjrtError(code, message)`; the C trampoline in _shim.c turns
the exception into a `PJRT_Error*` carrying that code and message (any other
exception becomes INTERNAL with its type name).  The PJRT_Error objects
themselves, and PJRT_Error_Destroy/Message/GetCode, live in C so that jaxlib
can free errors at any time, including after Python has shut down.
"""

from __future__ import annotations

from ._capi import ErrorCode


class PjrtError(Exception):
    """An error reported to the PJRT caller with a specific status code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.pjrt_code = int(code)


def invalid_argument(message: str) -> PjrtError:
    return PjrtError(ErrorCode.INVALID_ARGUMENT, message)


def failed_precondition(message: str) -> PjrtError:
    return PjrtError(ErrorCode.FAILED_PRECONDITION, message)


def unimplemented(message: str) -> PjrtError:
    return PjrtError(ErrorCode.UNIMPLEMENTED, message)

