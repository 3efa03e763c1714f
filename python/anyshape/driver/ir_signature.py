"""A module signature read from torch-dialect IR, for artifacts compiled from a file.

``anyshape.compile`` records the signature from the exported program; a
module that arrives as MLIR text (``anyshape-compile``) carries the same facts
in its function type, ``torch.symbolic_int`` and ``torch.bind_symbolic_shape``
as imported, or in ``anyshape.dims`` argument attributes once ``anyshape-lower``
has run.
"""

from __future__ import annotations

import re

from anyshape.dialects import DIMS_ATTR, vtensor_shape
from anyshape.mlir import ir
from anyshape.runtime.signature import ModuleSignature, Symbol, TensorSpec

_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
           "si64": "int64", "si32": "int32", "si16": "int16", "si8": "int8", "ui8": "uint8",
           "i1": "bool"}


def _tensor_spec(name: str, type_: ir.Type) -> TensorSpec:
    shape = vtensor_shape(type_)
    if shape is None or shape[1] not in _DTYPES:
        raise ValueError(f"{name}: expected a !torch.vtensor with a known dtype, got {type_}")
    sizes, dtype = shape
    return TensorSpec(name, _DTYPES[dtype], ["?" if d is None else d for d in sizes])


def find_function(module: ir.Module, name: str) -> ir.Operation:
    functions = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            functions[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
    if name not in functions:
        raise ValueError(f"function: expected a function of the module "
                         f"({', '.join('@' + f for f in functions) or 'it has none'}), got @{name}")
    return functions[name]


def signature_from_module(module: ir.Module, function: str = "main") -> ModuleSignature:
    func = find_function(module, function)
    block = func.regions[0].blocks[0]
    inputs = [_tensor_spec(f"arg{i}", arg.type) for i, arg in enumerate(block.arguments)]
    func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    outputs = [_tensor_spec(f"output_{i}", t) for i, t in enumerate(func_type.results)]

    symbols: dict[str, Symbol] = {}
    symbol_of_value = {}
    for op in block.operations:
        op = op.operation
        if op.name == "torch.symbolic_int":
            name = ir.StringAttr(op.attributes["symbol_name"]).value
            lo = ir.IntegerAttr(op.attributes["min_val"]).value if "min_val" in op.attributes else None
            hi = ir.IntegerAttr(op.attributes["max_val"]).value if "max_val" in op.attributes else None
            symbols[name] = Symbol(name, lo, hi if hi is not None and hi < 2**62 else None)
            symbol_of_value[op.results[0]] = name
        elif op.name == "torch.bind_symbolic_shape":
            bound, *operands = op.operands
            if not isinstance(bound.owner, ir.Block) or bound.owner != block:
                continue
            spec = inputs[bound.arg_number]
            affine = ir.AffineMapAttr(op.attributes["shape_expressions"]).value
            names = [symbol_of_value.get(operand) for operand in operands]
            for axis, expr in enumerate(affine.results):
                dim = _linear_dim(expr, names)
                if dim is not None and spec.dims[axis] == "?":
                    spec.dims[axis] = dim
    _read_dim_facts(func, function, inputs, symbols)
    for spec in inputs:
        for axis, dim in enumerate(spec.dims):
            if dim == "?":  # dynamic but unbound: any size the runtime accepts
                name = f"{spec.name}_dim{axis}"
                symbols[name] = Symbol(name, 0, None)
                spec.dims[axis] = name
    tree = {"kind": "leaf"} if len(outputs) == 1 else \
        {"kind": "tuple", "children": [{"kind": "leaf"}] * len(outputs)}
    return ModuleSignature(inputs, outputs, symbols, tree)


# What the runtime's argument check can evaluate (with sympy): sums of integer
# multiples of symbols. Other expressions (floordiv, products) stay unchecked.
_SYMBOL = re.compile(r"[A-Za-z_]\w*")
_LINEAR = re.compile(r"-?(\d+\*)?[A-Za-z_]\w*( [+-] ((\d+\*)?[A-Za-z_]\w*|\d+))*")


def _linear_dim(expr, names: list[str | None]) -> str | None:
    """A bound dim as the runtime's check reads it: a symbol's name, or a sum
    of integer multiples of symbols and a constant (``s54 + s70``: a mask as
    long as the cache and the new tokens together); None for anything else."""
    if isinstance(expr, ir.AffineSymbolExpr):
        return names[expr.position] if expr.position < len(names) else None
    terms = []

    def collect(e, sign: int = 1) -> bool:
        if isinstance(e, ir.AffineAddExpr):
            return collect(e.lhs, sign) and collect(e.rhs, sign)
        if isinstance(e, ir.AffineConstantExpr):
            terms.append((sign * e.value, None))
            return True
        if isinstance(e, ir.AffineSymbolExpr):
            name = names[e.position] if e.position < len(names) else None
            terms.append((sign, name))
            return name is not None
        if isinstance(e, ir.AffineMulExpr):
            for factor, other in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
                if isinstance(factor, ir.AffineConstantExpr):
                    return collect(other, sign * factor.value)
        return False

    if not collect(expr):
        return None
    text = ""
    for coefficient, name in terms:
        term = str(abs(coefficient)) if name is None else \
            (name if abs(coefficient) == 1 else f"{abs(coefficient)}*{name}")
        if not text:
            text = term if coefficient >= 0 else f"-{term}"
        else:
            text += f" {'+' if coefficient >= 0 else '-'} {term}"
    return text if _LINEAR.fullmatch(text) else None


def _read_dim_facts(func: ir.Operation, name: str, inputs: list[TensorSpec],
                    symbols: dict[str, Symbol]) -> None:
    if "arg_attrs" not in func.attributes:
        return
    for number, (spec, attrs) in enumerate(zip(inputs, ir.ArrayAttr(func.attributes["arg_attrs"]))):
        attrs = ir.DictAttr(attrs)
        if DIMS_ATTR not in attrs:
            continue
        for fact in ir.ArrayAttr(attrs[DIMS_ATTR]):
            axis, expr, low, high = _read_fact(fact, f"@{name} argument {number}", len(spec.dims))
            if spec.dims[axis] != "?":
                continue
            if _SYMBOL.fullmatch(expr):
                symbols[expr] = Symbol(expr, low, high)
                spec.dims[axis] = expr
            elif _LINEAR.fullmatch(expr):
                spec.dims[axis] = expr


def _read_fact(fact: ir.Attribute, where: str, rank: int) -> tuple[int, str, int, int | None]:
    """(axis, expr, min, max) of one ``anyshape.dims`` entry, checked."""
    try:
        fact = ir.DictAttr(fact)
        axis = ir.IntegerAttr(fact["axis"]).value
        expr = ir.StringAttr(fact["expr"]).value
        low = ir.IntegerAttr(fact["min"]).value
        high = ir.IntegerAttr(fact["max"]).value if "max" in fact else None
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"{where}: expected {DIMS_ATTR} entries with integer axis and min, an "
                         f"optional integer max and a string expr, got {fact}") from None
    if not 0 <= axis < rank:
        raise ValueError(f"{where}: expected {DIMS_ATTR} axes in [0, {rank - 1}] (the "
                         f"argument has rank {rank}), got axis {axis}")
    return axis, expr, low, high
