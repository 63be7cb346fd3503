"""Tokens, point-to-point channels and host streams.

spec: after_all, create_token, send, recv ("Point-to-point communication"),
infeed, outfeed ("Streaming communication"). Channels and feeds live on the
process grid (:mod:`stablehlo_interpreter.parallel`); a single-process run uses
a 1x1 grid kept in the execution context, so its outfeed is readable as
``ctx.state["process_grid"].outfeed[(0, 0)]``. To feed a single process, run it
with ``grid=ProcessGrid(1, 1, infeed=[...])``.
"""

import numpy as np

from ..parallel import GridError
from ..registry import kernel
from ..types import TOKEN, TensorType, TokenType, conforms, describe
from .collectives import _channel_id, _groups_permute_style, _zeros, grid_of


@kernel("stablehlo.after_all")
def after_all(op):
    """spec: after_all. Only orders execution; produces a token."""
    return lambda *tokens: TOKEN


@kernel("stablehlo.create_token")
def create_token(op):
    """create_token: the pre-after_all spelling of `after_all()` (no inputs)."""
    return lambda: TOKEN


def _check_payload(op, values, types, what):
    """Payload values must match the op's result types (count, dtype, shape)."""
    if len(values) != len(types):
        raise GridError(f"{op.name}: {what} has {len(values)} value(s), the op "
                        f"produces {len(types)}")
    out = []
    for i, (v, t) in enumerate(zip(values, types)):
        if isinstance(t, TokenType):
            out.append(TOKEN)
            continue
        v = np.asarray(v)
        if isinstance(t, TensorType) and v.dtype != t.dtype and v.dtype.kind == t.dtype.kind \
                and np.can_cast(v.dtype, t.dtype):
            v = v.astype(t.dtype)  # e.g. Python ints fed as int64 into an i32 infeed
        if not conforms(v, t) and not (getattr(t, "quant", None) is not None
                                       and v.dtype == t.dtype):
            raise GridError(f"{op.name}: value #{i} of the {what} is {describe(v)}, "
                            f"the op expects {t!r}")
        out.append(v)
    return out


def _pair_routes(op):
    """source_target_pairs of send/recv as process pairs, or None without pairs.

    Grouped like collective_permute (cross_replica if channel_id <= 0, else
    cross_partition); the spec's send/recv name the pairs without saying how.
    """
    pairs = op.attrs.get("source_target_pairs")
    if not isinstance(pairs, np.ndarray) or pairs.size == 0:
        return None
    groups, _ = _groups_permute_style(op, "source_target_pairs")
    return groups


@kernel("stablehlo.send", special=True, traits=("quant_aware",))
def send(op):
    """spec: send. Puts `inputs` on channel `channel_id`; produces a token.

    Sends are buffered (a FIFO per channel): execution order across processes
    is implementation-defined except for the ordering a recv imposes.
    """
    channel = _channel_id(op)
    routes = _pair_routes(op)

    def run(ctx, regions, *operands):
        inputs = operands[:-1]
        grid = grid_of(ctx)
        if routes is None:
            grid.send(ctx.process, channel, inputs)
        else:
            for src, dst in routes(grid):
                if src == ctx.process:
                    grid.send(ctx.process, channel, inputs, target=dst)
        return TOKEN
    return run


@kernel("stablehlo.recv", special=True, traits=("quant_aware",))
def recv(op):
    """spec: recv. Takes the oldest values sent on `channel_id`; results are the
    payload then a token. With source_target_pairs, a process that is no
    target receives zeros (as collective_permute)."""
    channel = _channel_id(op)
    routes = _pair_routes(op)
    payload_types = op.result_types[:-1]

    def run(ctx, regions, token):
        grid = grid_of(ctx)
        if routes is not None and not any(dst == ctx.process for _, dst in routes(grid)):
            values = [_zeros(t, t.shape) for t in payload_types]
        else:
            target = None if routes is None else ctx.process
            values = grid.recv(ctx.process, channel, target=target)
        return _check_payload(op, list(values), payload_types, "received message") + [TOKEN]
    return run


@kernel("stablehlo.infeed", special=True, traits=("quant_aware",))
def infeed(op):
    """spec: infeed. Reads the next item of the infeed; results are the payload
    then a token."""
    payload_types = op.result_types[:-1]

    def run(ctx, regions, token):
        item = grid_of(ctx).next_infeed(ctx.process)
        if callable(item):
            item = item(ctx)
        values = [item] if isinstance(item, np.ndarray) else list(item)
        return _check_payload(op, values, payload_types, "infeed item") + [TOKEN]
    return run


@kernel("stablehlo.outfeed", special=True, traits=("quant_aware",))
def outfeed(op):
    """spec: outfeed. Appends `inputs` to this process's outfeed; produces a token."""
    def run(ctx, regions, *operands):
        grid_of(ctx).add_outfeed(ctx.process, operands[:-1])
        return TOKEN
    return run
