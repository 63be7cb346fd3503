"""Loading modules: MLIR text, MLIR bytecode, or StableHLO portable artifacts."""

import threading

from .errors import LoadError

# MLIR contexts are not safe to use from several threads at once; all parsing
# and compiling (the only MLIR work we do) happens under this lock.
MLIR_LOCK = threading.RLock()

_REGISTRY = None


def _registry():
    global _REGISTRY
    if _REGISTRY is None:
        from jaxlib.mlir import ir
        from jaxlib.mlir._mlir_libs import _jax_mlir_ext
        reg = ir.DialectRegistry()
        _jax_mlir_ext.register_dialects(reg)
        _REGISTRY = reg
    return _REGISTRY


def new_context():
    """A fresh MLIR context with func, stablehlo, chlo and friends loaded.

    Each loaded module gets its own context: attributes are uniqued per
    context and never freed, so sharing one would grow memory forever.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import chlo, stablehlo
    ctx = ir.Context()
    ctx.append_dialect_registry(_registry())
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    try:
        from jaxlib.mlir.dialects import sdy
        sdy.register_dialect(ctx)
    except Exception:  # shardy is optional for the interpreter
        pass
    # The conformance suites use the `check` dialect, which jaxlib does not
    # ship; its ops parse in generic form as unregistered ops.
    ctx.allow_unregistered_dialects = True
    return ctx


class Module:
    """A parsed module and the MLIR context that owns it."""

    def __init__(self, context, module, source_kind):
        self.context = context
        self.mlir = module
        self.source_kind = source_kind

    @property
    def text(self):
        with MLIR_LOCK, self.context:
            return str(self.mlir)


def load(data, *, name="<input>"):
    """Parse ``data`` into a :class:`Module`.

    ``data`` is MLIR text (str, or bytes that decode as text), MLIR bytecode,
    or a StableHLO portable artifact (versioned VHLO bytecode, which is what
    JAX sends through PJRT). Raises :class:`LoadError` on anything else.
    """
    if isinstance(data, Module):
        return data
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, (str, bytes)):
        raise LoadError(f"{name}: expected MLIR text (str) or bytecode (bytes), "
                        f"got {type(data).__name__}")
    with MLIR_LOCK:
        ctx = new_context()
        errors = []
        with ctx:
            if isinstance(data, bytes) and data.startswith(b"ML\xefR"):
                # Bytecode: a portable artifact is VHLO inside MLIR bytecode;
                # plain StableHLO bytecode parses directly.
                try:
                    return Module(ctx, stablehlo.deserialize_portable_artifact(ctx, data),
                                  "portable-artifact")
                except Exception as e:  # not VHLO: try as plain bytecode
                    errors.append(f"as a portable artifact: {_first_line(e)}")
                try:
                    return Module(ctx, ir.Module.parse(data), "bytecode")
                except Exception as e:
                    errors.append(f"as MLIR bytecode: {_first_line(e)}")
                raise LoadError(f"{name}: could not read MLIR bytecode ("
                                + "; ".join(errors) + ")")
            if isinstance(data, bytes):
                try:
                    data = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise LoadError(
                        f"{name}: expected MLIR text, MLIR bytecode or a StableHLO "
                        "portable artifact; the bytes are neither UTF-8 text nor "
                        "start with the MLIR bytecode magic 'ML\\xefR'") from None
            if "!quant.uniform<" in data:
                # jaxlib's StableHLO verifier rejects quantized types as they
                # are; quant.py rewrites them into a form it accepts.
                from .quant import rewrite_quantized_text
                data = rewrite_quantized_text(data)
            try:
                module = ir.Module.parse(data)
            except Exception as e:
                module = _parse_with_newer_ops(data)
                if module is None:
                    raise LoadError(f"{name}: expected a StableHLO module in MLIR text form; "
                                    f"parsing failed:\n{e}") from None
            if "vhlo." in data[:4096] and _has_vhlo(module):
                raise LoadError(f"{name}: textual VHLO is not supported; pass the portable "
                                "artifact bytes instead")
            return Module(ctx, module, "text")


# Ops (or op forms) of StableHLO newer than the dialect jaxlib 0.10.2 ships:
# jaxlib's verifier rejects them (collective_reduce does not exist there;
# collective_broadcast takes one operand). Written in generic form they parse
# as unregistered ops once renamed into this dialect, and the compiler maps
# the name back (NEWER_OP_PREFIX).
NEWER_OP_PREFIX = "stablehlo_next."
_NEWER_OPS = ("collective_reduce", "collective_broadcast")


def _parse_with_newer_ops(text):
    from jaxlib.mlir import ir
    renamed = text
    for n in _NEWER_OPS:
        renamed = renamed.replace(f'"stablehlo.{n}"', f'"{NEWER_OP_PREFIX}{n}"')
    if renamed == text:
        return None
    try:
        return ir.Module.parse(renamed)
    except Exception:
        return None


def _has_vhlo(module):
    for op in module.body.operations:
        if op.operation.name.startswith("vhlo."):
            return True
    return False


def _first_line(e):
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__
