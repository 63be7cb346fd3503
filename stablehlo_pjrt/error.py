"""PJRT errors.

Handlers raise `PjrtError(code, message)`; the C trampoline in _shim.c turns
the exception into a `PJRT_Error*` carrying that code and message (any other
exception becomes INTERNAL with its type name).  The PJRT_Error objects
themselves, and PJRT_Error_Destroy/Message/GetCode, live in C so that jaxlib
can free errors at any time, including after Python has shut down.
"""

from __future__ import annotations

from ._capi import ErrorCode

CODE_NAMES = {v: k for k, v in vars(ErrorCode).items() if not k.startswith("_")}


class PjrtError(Exception):
    """An error reported to the PJRT caller with a specific status code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.pjrt_code = int(code)

    @property
    def code_name(self) -> str:
        return CODE_NAMES.get(self.pjrt_code, str(self.pjrt_code))


def invalid_argument(message: str) -> PjrtError:
    return PjrtError(ErrorCode.INVALID_ARGUMENT, message)


def failed_precondition(message: str) -> PjrtError:
    return PjrtError(ErrorCode.FAILED_PRECONDITION, message)


def unimplemented(message: str) -> PjrtError:
    return PjrtError(ErrorCode.UNIMPLEMENTED, message)


def not_found(message: str) -> PjrtError:
    return PjrtError(ErrorCode.NOT_FOUND, message)


def internal(message: str) -> PjrtError:
    return PjrtError(ErrorCode.INTERNAL, message)


def new_error_pointer(code: int, message: str) -> int:
    """Allocates a C PJRT_Error* (owned by whoever receives it)."""
    from . import _shim
    return _shim.error_new(int(code), message)


def error_pointer_info(ptr: int) -> tuple[int, str] | None:
    """(code, message) of a C PJRT_Error*, None for NULL."""
    from . import _shim
    return _shim.error_info(ptr)
