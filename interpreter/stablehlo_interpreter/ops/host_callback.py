"""Host callbacks: ``custom_call @stablehlo_ref.host_callback``.

A program calls back into Python (``jax.debug.print``, ``jax.pure_callback``,
``io_callback`` lowered by stablehlo_pjrt) through this custom call. The
program itself holds no reference to a Python object: its backend_config is
``{index = i}``, an index into the table of callables the *embedder* attaches
to the compiled program (:attr:`Program.host_callbacks`, set once after
compile). The interpreter never looks a callable up by name or address, so a
module can only call what the code that compiled it handed over.

Operands are ``[token,] *args`` and results ``[token,] *results`` (a token
first when the call is ordered: JAX threads its effect tokens through it).
The callable receives read-only numpy views of the operands (no copy; it
must not keep them past the call or write to them) and returns a sequence of
arrays matching the non-token results; they are converted to the declared
dtypes and checked for shape. An exception raised by the callable fails the
run as an ExecutionError naming this op and its location, with the
exception's text.
"""

import numpy as np

from ..errors import ExecutionError
from ..registry import Unsupported, custom_call
from ..types import TOKEN, TensorType, TokenType

TARGET = "stablehlo_ref.host_callback"


def _config(op):
    cfg = op.attrs.get("backend_config")
    if cfg is None or cfg == "":
        cfg = op.attrs.get("mhlo.backend_config")
    if not isinstance(cfg, dict) or "index" not in cfg:
        raise Unsupported(f"@{TARGET} needs backend_config = {{index = <i64>}}, got {cfg!r}")
    return cfg


def _read_only(a):
    if isinstance(a, np.ndarray):
        v = a.view()
        v.flags.writeable = False
        return v
    return a


@custom_call(TARGET, special=True)
def host_callback(op):
    """@stablehlo_ref.host_callback([token,] *args) -> ([token,] *results)
    {backend_config = {index}}: calls ``program.host_callbacks[index]``."""
    index = int(_config(op)["index"])
    if index < 0:
        raise Unsupported(f"@{TARGET}: negative callback index {index}")
    token_in = bool(op.operand_types) and isinstance(op.operand_types[0], TokenType)
    token_out = bool(op.result_types) and isinstance(op.result_types[0], TokenType)
    if any(isinstance(t, TokenType) for t in op.operand_types[int(token_in):]) or \
            any(isinstance(t, TokenType) for t in op.result_types[int(token_out):]):
        raise Unsupported(f"@{TARGET}: a token is allowed only as the first operand/result")
    out_types = op.result_types[int(token_out):]
    for t in out_types:
        if not isinstance(t, TensorType) or any(d is None for d in t.shape):
            raise Unsupported(f"@{TARGET}: result type {t!r} (static tensors only)")
    specs = [(np.dtype(t.dtype), tuple(int(d) for d in t.shape)) for t in out_types]
    where = op.where()
    n_results = op.num_results

    def run(ctx, regions, *operands):
        table = getattr(ctx.program, "host_callbacks", ())
        if index >= len(table):
            raise ExecutionError(
                f"{where}: host callback #{index} is not in this program's callback "
                f"table ({len(table)} entries): the embedder must set "
                "Program.host_callbacks to the callables the module was lowered with",
                op.name, op.location)
        args = operands[1:] if token_in else operands
        outs = table[index](*[_read_only(a) for a in args])
        outs = () if outs is None else tuple(outs)
        if len(outs) != len(specs):
            raise ExecutionError(
                f"{where}: host callback #{index} returned {len(outs)} value(s), "
                f"the program expects {len(specs)}", op.name, op.location)
        results = []
        for i, (v, (dtype, shape)) in enumerate(zip(outs, specs)):
            a = np.asarray(v)
            if a.shape != shape:
                raise ExecutionError(
                    f"{where}: host callback #{index} result #{i} has shape {a.shape}, "
                    f"the program expects {shape}", op.name, op.location)
            # A fresh array the program owns (the callable may keep its own).
            results.append(np.array(a, dtype=dtype, order="C", copy=True))
        if token_out:
            results.insert(0, TOKEN)
        if n_results == 1:
            return results[0]
        return tuple(results)
    return run
