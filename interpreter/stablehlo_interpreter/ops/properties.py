"""Properties (`<{...}>`) of ops the bindings do not know (check.*,
interpreter.*): decoded from the op's printed text, shared by the check and
interpreter-op kernels."""

from ..attrs import decode_text
from ..mlir_text import matching_bracket, split_top
from ..registry import Unsupported


def op_properties(op):
    """Decoded `<{...}>` properties of an unregistered op (parsed from its text).

    Decoded from text, entry by entry: the bindings abort the process when
    handing out some attributes (dense complex tensors) as objects."""
    if op.raw is None:
        return {}
    text = op.raw.get_asm(print_generic_op_form=True, large_elements_limit=None)
    start = text.find("<{")
    if start < 0:
        return {}
    i = matching_bracket(text, start + 1)
    body = text[start + 2:i]
    out = {}
    for entry in split_top(body):
        key, _, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not key:
            continue
        try:
            out[key] = decode_text(value)
        except Exception as e:
            raise Unsupported(f"cannot decode property {key} = {value[:80]}: {e}") from None
    return out
