"""What the groups of area ``capi`` share: small programs and the helpers
that expect an error."""

from __future__ import annotations

import ctypes
from ctypes import c_void_p

import numpy as np

from ... import _capi as C
from ..core import Failed, Unsupported
from ..plugin import (
    Client,
    PluginError,
)

E = C.ErrorCode

ADD_ONE = """
module @add_one {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %c = stablehlo.constant dense<1.0> : tensor<4xf32>
    %0 = stablehlo.add %a, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""

TWO_OUTPUTS = """
module @two_outputs {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<i32>) -> (tensor<i32>, tensor<3x2xf32>, tensor<2x3xi1>) {
    %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %z = stablehlo.constant dense<0.0> : tensor<2x3xf32>
    %1 = stablehlo.compare GT, %a, %z : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    return %b, %0, %1 : tensor<i32>, tensor<3x2xf32>, tensor<2x3xi1>
  }
}
"""

DONATE = """
module @donate {
  func.func public @main(%a: tensor<8xf32> {tf.aliasing_output = 0 : i32}) -> tensor<8xf32> {
    %0 = stablehlo.multiply %a, %a : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""


def _expect_error(fn, what: str, codes=None):
    """Runs ``fn``; it must raise a PluginError (with one of ``codes``).
    UNIMPLEMENTED where another code is expected is ``unsupported``: a plugin
    without the function cannot show how it refuses bad arguments."""
    try:
        fn()
    except PluginError as e:
        if codes and e.unimplemented and E.UNIMPLEMENTED not in codes:
            raise Unsupported(f"{what}: {e}") from None
        if codes and e.code not in codes:
            raise Failed(f"{what}: error code {e} (expected one of "
                         f"{[_code_name(c) for c in codes]})") from None
        if not e.message.strip():
            raise Failed(f"{what}: error with an empty message") from None
        return e
    raise Failed(f"{what}: the call succeeded, an error was expected")


def _serialized(ctx, exe) -> bytes:
    """PJRT_Executable_Serialize of ``exe``: its bytes (the plugin's copy freed)."""
    s = ctx.plugin.call("PJRT_Executable_Serialize", C.Executable_Serialize_Args(
        executable=exe.executable))
    blob = C.read_bytes(s.serialized_bytes, s.serialized_bytes_size)
    if s.serialized_executable_deleter:
        ctypes.CFUNCTYPE(None, c_void_p)(s.serialized_executable_deleter)(
            s.serialized_executable)
    return blob


def _code_name(c):
    return {v: k for k, v in vars(E).items() if not k.startswith("_")}.get(c, str(c))


def round_trip_and_close(client: Client, failure: str) -> None:
    """Sends a small array through ``client`` and back (Failed(``failure``)
    if it changes), then closes the client."""
    try:
        x = np.arange(4, dtype=np.float32)
        b = client.from_host(x)
        if not np.array_equal(b.to_host(), x):
            raise Failed(failure)
        b.destroy()
    finally:
        client.close()
