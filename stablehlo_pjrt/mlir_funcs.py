"""Finding and rewriting the functions of an MLIR module (jaxlib's bindings).

One home for what the SPMD planner (spmd.py), the oracle (oracle/bisect.py,
oracle/_lowering.py) and the plugin checker's summation bound
(oracle/summation.py) each need of a module's ``func.func`` ops. Call these
with the module's context entered and ``MLIR_LOCK`` held, as every use of
MLIR objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stablehlo_interpreter import attribute_text, decode_attribute

if TYPE_CHECKING:
    from jaxlib.mlir import ir


def func_name(op: ir.Operation) -> str:
    """The symbol name of a ``func.func`` op (decoded by the interpreter,
    which also reads names that are not UTF-8)."""
    return attribute_text(decode_attribute(op, "sym_name"))


def find_func(module: ir.Module, name: str) -> ir.Operation | None:
    """The ``func.func`` op named ``name`` in ``module`` (an ir.Module), or None."""
    for op in module.body.operations:
        o = op.operation
        if o.name == "func.func" and func_name(o) == name:
            return o
    return None


def entry_func(module: ir.Module) -> ir.Operation:
    """@main, or else the first public function (ValueError when there is none)."""
    main = find_func(module, "main")
    if main is not None:
        return main
    for op in module.body.operations:
        o = op.operation
        if o.name == "func.func" and (
                "sym_visibility" not in o.attributes
                or attribute_text(decode_attribute(o, "sym_visibility")) != "private"):
            return o
    raise ValueError("module has no @main and no public function")


def return_also(func, values) -> None:
    """Make ``func`` (one block, ending in ``func.return``) return its
    results followed by ``values`` (MLIR values its body defines): the
    return op, the function type and ``res_attrs`` (an empty dictionary
    for each new result) are rewritten."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func as func_dialect
    ret = list(func.regions[0].blocks[0].operations)[-1].operation
    values = list(ret.operands) + list(values)
    with ir.InsertionPoint(ret), ret.location:
        func_dialect.ReturnOp(values)
    n_new = len(values) - len(ret.operands)
    ret.erase()
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    func.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ftype.inputs), [v.type for v in values]))
    if "res_attrs" in func.attributes:
        old = list(ir.ArrayAttr(func.attributes["res_attrs"]))
        func.attributes["res_attrs"] = ir.ArrayAttr.get(
            old + [ir.DictAttr.get({}) for _ in range(n_new)])
