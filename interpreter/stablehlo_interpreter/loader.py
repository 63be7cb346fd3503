"""Loading modules: MLIR text, MLIR bytecode, or StableHLO portable artifacts."""

from __future__ import annotations

import re
import threading
from typing import Any

from . import config as _config
from . import isolate
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


# Loaded modules share a context, a fresh one every STABLEHLO_REF_CONTEXT_SHARE loads.
# Making a context (dialect registration, its thread pool) costs 1-2 ms, more
# than compiling a small program, and JAX compiles one program per jit and per
# eager op. One context for the whole process would grow without bound
# (attributes, types and op names are uniqued per context and never freed);
# a context is freed once the last module loaded into it is gone.
_shared = [None, 0]  # (context, modules loaded into it); under MLIR_LOCK


def module_context():
    """The context the next loaded module goes into (call under MLIR_LOCK)."""
    ctx, uses = _shared
    if ctx is None or uses >= _config.CONTEXT_SHARE.value():
        ctx, uses = new_context(), 0
    _shared[0], _shared[1] = ctx, uses + 1
    return ctx


class Module:
    """A parsed module and the MLIR context that owns it."""

    def __init__(self, context: Any, module: Any, source_kind: str) -> None:
        self.context = context
        self.mlir = module
        self.source_kind = source_kind

    @property
    def text(self) -> str:
        with MLIR_LOCK, self.context:
            return str(self.mlir)


def load(data: str | bytes, *, name: str = "<input>", trusted: bool = False) -> Module:
    """Parse ``data`` into a :class:`Module`.

    ``data`` is MLIR text (str, or bytes that decode as text), MLIR bytecode,
    or a StableHLO portable artifact (versioned VHLO bytecode, which is what
    JAX sends through PJRT). Raises :class:`LoadError` on anything else.
    """
    if isinstance(data, Module):
        return data
    from jaxlib.mlir import ir
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, (str, bytes)):
        raise LoadError(f"{name}: expected MLIR text (str) or bytecode (bytes), "
                        f"got {type(data).__name__}")
    if isinstance(data, bytes) and data.startswith(b"ML\xefR"):
        return _load_bytecode(data, name, trusted)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LoadError(
                f"{name}: expected MLIR text, MLIR bytecode or a StableHLO "
                "portable artifact; the bytes are neither UTF-8 text (invalid byte at "
                f"offset {e.start}) nor start with the MLIR bytecode magic 'ML\\xefR'") from None
    check_text_nesting(data, name)
    check_text_names(data, name)
    with MLIR_LOCK:
        ctx = module_context()
        with ctx:
            if "!quant.uniform<" in data:
                # jaxlib's StableHLO verifier rejects quantized types as they
                # are; quant.py rewrites them into a form it accepts.
                from .quant import rewrite_quantized_text
                data = rewrite_quantized_text(data)
            with _Diagnostics(ctx) as diags:
                try:
                    module = ir.Module.parse(data)
                except Exception as e:
                    module = _parse_with_newer_ops(data)
                    if module is None:
                        msg = _message(e, diags)
                        cut = truncation_hint(data)
                        err = LoadError(f"{name}: expected a StableHLO module in MLIR text "
                                        f"form; parsing failed:\n{msg}"
                                        + (f"\nhint: {cut}" if cut else ""))
                        # An op name cut short is not an op the interpreter lacks.
                        err.unknown_ops = [] if cut else _unknown_ops(msg, name)
                        err.truncated = bool(cut)
                        raise err from None
            if "vhlo." in data[:4096] and _has_vhlo(module):
                raise LoadError(f"{name}: textual VHLO is not supported; pass the portable "
                                "artifact bytes instead")
            return Module(ctx, module, "text")


# How deep regions/blocks/brackets may nest. MLIR's parsers recurse once per
# level and overflow the C stack (a segfault) at about 2,500 levels; JAX
# programs nest a few dozen levels (each jit/scan/cond/while adds one or two).


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def check_text_nesting(text, name="<input>"):
    """Refuse text whose brackets nest deeper than STABLEHLO_REF_MAX_NESTING, before MLIR
    sees it: `{ ( [ <` outside string literals open a level, `} ) ] >` close
    one (not the `>` of `->`). Linear and vectorized (a regex drops string
    literals, numpy sums the rest); no parsing."""
    limit = _config.MAX_NESTING.value()
    opens = text.count("{") + text.count("(") + text.count("[") + text.count("<")
    if opens <= limit:
        return
    import numpy as np
    stripped = _STRING.sub('""', text) if '"' in text else text
    b = np.frombuffer(stripped.encode("utf-8", "replace"), dtype=np.uint8)
    step = np.zeros(b.shape, dtype=np.int32)
    for c in b"{([<":
        step[b == c] = 1
    for c in b"})]":
        step[b == c] = -1
    gt = b == ord(">")
    gt[1:] &= b[:-1] != ord("-")  # the arrow of a function type closes nothing
    step[gt] = -1
    depth = np.cumsum(step)
    over = np.flatnonzero(depth > limit)
    if over.size:
        line = int(np.count_nonzero(b[:over[0]] == ord("\n"))) + 1
        raise LoadError(
            f"{name}:{line}: brackets/regions nest deeper than {limit} levels "
            "(MLIR's parser recurses once per level and would overflow the stack; "
            "STABLEHLO_REF_MAX_NESTING raises the limit)")


def truncation_hint(text):
    """A sentence saying the text looks cut short (it ends with regions or
    brackets still open), or None. Only called once parsing has failed."""
    stripped = _STRING.sub('""', text) if '"' in text else text
    stripped = re.sub(r"//[^\n]*", "", stripped)
    open_braces = stripped.count("{") - stripped.count("}")
    open_parens = stripped.count("(") - stripped.count(")")
    if open_braces <= 0 and open_parens <= 0:
        return None
    what = ", ".join(f"{n} unclosed '{c}'" for n, c in ((open_braces, "{"), (open_parens, "("))
                     if n > 0)
    return (f"the text ends with {what}: the file may be cut short (an incomplete "
            "download or copy); check its end")


_ESCAPE = re.compile(r'\\([0-9A-Fa-f]{2})|\\(.)', re.S)
_SIMPLE_ESCAPES = {"n": b"\n", "t": b"\t", "\\": b"\\", '"': b'"'}


def _literal_bytes(literal):
    """The bytes an MLIR string literal (without its quotes) stands for."""
    out, pos = bytearray(), 0
    for e in _ESCAPE.finditer(literal):
        out += literal[pos:e.start()].encode("utf-8")
        out += (bytes([int(e.group(1), 16)]) if e.group(1) else
                _SIMPLE_ESCAPES.get(e.group(2), e.group(2).encode("utf-8")))
        pos = e.end()
    out += literal[pos:].encode("utf-8")
    return bytes(out)


def check_text_names(text, name="<input>"):
    """Refuse a quoted attribute name (a string literal followed by ``=``)
    that is not UTF-8 once its escapes are decoded (``{"\\FF" = 1}``): the
    MLIR bindings terminate the process when the compiler reads such a name
    (found by the attribute fuzz kind; bytecode gets the same check in the
    isolation helper). Only text with a backslash is scanned."""
    if "\\" not in text:
        return
    for m in _STRING.finditer(text):
        literal = m.group(0)[1:-1]
        if "\\" not in literal or not text[m.end():m.end() + 64].lstrip().startswith("="):
            continue
        data = _literal_bytes(literal)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            line = text.count("\n", 0, m.start()) + 1
            raise LoadError(
                f"{name}:{line}: the attribute name {m.group(0)[:40]} is not valid UTF-8 "
                "once its escapes are decoded (the MLIR Python bindings abort reading such "
                "a name)") from None


def _load_bytecode(data, name, trusted=False):
    """Bytecode or a portable artifact: read first in the isolated helper
    (isolate.py), then here. Bytes that are bytecode are never parsed as text.
    ``trusted``: the caller serialized these bytes itself from a module MLIR
    already read (a round trip), so the helper is skipped."""
    if isolate.enabled() and not trusted:
        try:
            isolate.check_bytecode(data)
        except isolate.Rejected as e:
            raise LoadError(f"{name}: could not read MLIR bytecode: {e}") from None
    with MLIR_LOCK:
        ctx = module_context()
        with ctx:
            with _Diagnostics(ctx) as diags:
                try:
                    module, kind = isolate.read_in_this_process(ctx, data)
                except ValueError as e:
                    raise LoadError(f"{name}: could not read MLIR bytecode: "
                                    f"{_message(e, diags)}") from None
            return Module(ctx, module, kind)


class _Diagnostics:
    """Collects MLIR's diagnostics while parsing, so that a LoadError carries
    the reason MLIR gave (the exception text alone is often just "Unable to
    parse module assembly")."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.messages = []
        self._handler = None

    def __enter__(self):
        def handler(d):
            try:
                self.messages.append(f"{d.location}: {d.message}")
                for n in d.notes:
                    self.messages.append(f"  note: {n.location}: {n.message}")
            except Exception:
                self.messages.append("<diagnostic not printable>")
            return False  # let MLIR attach it to the exception as well
        try:
            self._handler = self.ctx.attach_diagnostic_handler(handler)
        except Exception:
            self._handler = None
        return self

    def __exit__(self, *exc):
        if self._handler is not None:
            try:
                self._handler.detach()
            except Exception:
                pass
        # Break self -> handler -> callback -> self: the bindings' handler
        # object keeps the context alive and is invisible to the cyclic GC,
        # so the cycle leaked every context (and its 2 threads) otherwise.
        self._handler = None
        self.ctx = None
        return False


_UNKNOWN_OP = re.compile(
    r"(?:error: )?(\"[^\"]*\":\d+:\d+|loc\([^)]*\)|[^\s:]+:\d+:\d+): "
    r"(?:custom op '([\w.$-]+)' is unknown|unregistered operation '([\w.$-]+)' found)")


def _unknown_ops(message, name="<input>"):
    """``(op, location, diagnostic)`` for each op MLIR's parser did not know
    (dialect ops only: a bare word is text that is not MLIR at all)."""
    out = []
    for m in _UNKNOWN_OP.finditer(message):
        op = m.group(2) or m.group(3)
        if "." not in op:
            continue
        loc = m.group(1)
        if loc.startswith('"-":') and not name.startswith("<"):
            loc = name + loc[3:]
        elif loc.startswith('"'):
            loc = loc[1:].replace('":', ":", 1)
        line_end = message.find("\n", m.start())
        diag = message[m.start():line_end if line_end >= 0 else None]
        if diag.startswith("error: "):
            diag = diag[len("error: "):]
        out.append((op, loc, diag.split(": ", 1)[-1]))
    return out


def _message(e, diags):
    text = isolate._text(e)
    missing = [m for m in diags.messages if m.split(": ", 1)[-1] not in text]
    if missing:
        text += "\n" + "\n".join(missing)
    return text


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
