"""``anyshape-lower``: anyshape ops to upstream ops, symbolic-shape bookkeeping to attributes.

- ``anyshape.iota_like %ref {dim}`` becomes the dynamic iota
  ``linalg.generic`` over ``tensor.empty(tensor.dim %ref, dim)`` yielding
  ``linalg.index 0``, bridged to and from the torch dialect with ``torch_c``.
- No ``torch.symbolic_int`` or ``torch.bind_symbolic_shape`` is left:
  torch-mlir's linalg backend pipeline cannot lower them, and IREE's torch
  input, which can, drops each symbol's minimum (``min_val = 16`` reaches it
  as ``umin = 1``). Bindings on values other than function arguments add
  nothing (their facts are already in the IR's shapes and in the shape
  passes' rewrites). A binding on an argument becomes the argument attribute
  ``anyshape.dims``: one dictionary per dynamic dim, ``{axis, expr, min,
  max, divisor}``, where ``expr`` is the dim's affine expression over symbol
  names in a canonical text (equal dims of different arguments compare
  equal), ``min``/``max`` its range from the symbols' ranges (at least 1:
  sizes are positive; no ``max`` when torch's bound is unbounded, >= 2^62)
  and ``divisor`` the gcd of its coefficients when it is a pure multiple
  (``2*s0``), else 1. A builtin attribute every MLIR consumer ignores;
  ``anyshape.iree.dim_facts`` turns it into IREE's ``util.assume.int``.
"""

import dataclasses
import math

from anyshape.dialects import DIMS_ATTR, IotaLikeOp, builtin_tensor_text, vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, PassFailure, apply_patterns, register
from anyshape.passes.torch_ir.values import is_a

# torch.export states "no upper bound" as a huge max_val (int64 max and the like).
UNBOUNDED = 2**62


def builtin_tensor_type(vtensor: ir.Type) -> ir.Type | None:
    """The builtin tensor type torch_c bridges ``vtensor`` to (signless integers)."""
    text = builtin_tensor_text(vtensor)
    return None if text is None else ir.Type.parse(text)


def _create(name: str, results, operands, attributes=None) -> ir.Operation:
    return ir.Operation.create(name, results=results, operands=operands,
                               attributes=attributes or {})


def lower_iota_like(op, rewriter) -> bool:
    """``anyshape.iota_like(x) {dim = d}`` -> a ``linalg.generic`` writing each
    element's index into a ``tensor.empty`` of size ``tensor.dim(x, d)``."""
    ref = op.operands[0]
    dim = ir.IntegerAttr(op.attributes["dim"]).value
    ref_tensor_type = builtin_tensor_type(ref.type)
    result_type = op.results[0].type
    result_tensor_type = builtin_tensor_type(result_type)
    if ref_tensor_type is None or result_tensor_type is None:
        return False
    element = ir.RankedTensorType(result_tensor_type).element_type
    index = ir.IndexType.get()
    with ir.InsertionPoint(op), op.location:
        ref_tensor = _create("torch_c.to_builtin_tensor", [ref_tensor_type], [ref]).result
        sizes = []
        if ir.RankedTensorType(result_tensor_type).is_dynamic_dim(0):
            position = _create("arith.constant", [index], [],
                               {"value": ir.IntegerAttr.get(index, dim)}).result
            sizes.append(_create("tensor.dim", [index], [ref_tensor, position]).result)
        empty = _create("tensor.empty", [result_tensor_type], sizes).result
        identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(1))
        generic = ir.Operation.create(
            "linalg.generic", results=[result_tensor_type], operands=[empty],
            attributes={
                "indexing_maps": ir.ArrayAttr.get([identity]),
                "iterator_types": ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")]),
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 1]),
            },
            regions=1)
        body = generic.regions[0].blocks.append(element)
        with ir.InsertionPoint(body):
            position = _create("linalg.index", [index], [], {"dim": ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), 0)}).result
            value = _create("arith.index_cast", [element], [position]).result
            _create("linalg.yield", [], [value])
        iota = _create("torch_c.from_builtin_tensor", [result_type], [generic.result]).result
    rewriter.replace_op(op, [iota])
    return True


# --- symbolic shapes to argument facts ---------------------------------------

@dataclasses.dataclass(frozen=True)
class Symbol:
    name: str
    min: int
    max: float  # math.inf: unbounded


def _render(terms: dict[str, int]) -> str:
    """Canonical text of ``sum(coefficient * atom) + constant`` (constant under key "")."""
    parts = []
    for atom in sorted(a for a in terms if a):
        coefficient = terms[atom]
        if len(terms) > 1 or abs(coefficient) != 1:
            atom = _atom(atom)
        text = atom if abs(coefficient) == 1 else f"{abs(coefficient)}*{atom}"
        parts.append(("- " if coefficient < 0 else "+ ") + text)
    constant = terms.get("", 0)
    if constant or not parts:
        parts.append(("- " if constant < 0 else "+ ") + str(abs(constant)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _atom(text: str) -> str:
    return f"({text})" if " " in text else text


def _terms(expr, symbols: list[Symbol]) -> dict[str, int]:
    """``expr`` as a linear combination over atoms: symbol names, and the canonical
    text of each non-linear part (``s0*s1``, ``(s0 + 1) floordiv 2``)."""
    if isinstance(expr, ir.AffineConstantExpr):
        return {"": expr.value} if expr.value else {}
    if isinstance(expr, ir.AffineSymbolExpr):
        return {symbols[expr.position].name: 1}
    if not isinstance(expr, ir.AffineBinaryExpr):
        raise PassFailure(f"shape expression '{expr}' uses a dimension; torch binds symbols only")
    lhs, rhs = _terms(expr.lhs, symbols), _terms(expr.rhs, symbols)
    if isinstance(expr, ir.AffineAddExpr):
        total = dict(lhs)
        for atom, coefficient in rhs.items():
            total[atom] = total.get(atom, 0) + coefficient
        return {a: c for a, c in total.items() if c}
    if isinstance(expr, ir.AffineMulExpr):
        for scale, other in ((lhs, rhs), (rhs, lhs)):
            if set(scale) <= {""}:
                factor = scale.get("", 0)
                return {a: c * factor for a, c in other.items() if c * factor}
        if len(lhs) == len(rhs) == 1 and "" not in lhs and "" not in rhs:
            # One product of sorted factors, whatever the nesting: s1*(s0*s2) is s0*s1*s2.
            (left, a), (right, b) = *lhs.items(), *rhs.items()
            factors = [f for atom in (left, right)
                       for f in (atom.split("*") if " " not in atom else [f"({atom})"])]
            return {"*".join(sorted(factors)): a * b}
        return {"*".join(sorted((_atom(_render(lhs)), _atom(_render(rhs))))): 1}
    operator = {ir.AffineFloorDivExpr: "floordiv", ir.AffineCeilDivExpr: "ceildiv",
                ir.AffineModExpr: "mod"}[type(expr)]
    return {f"{_atom(_render(lhs))} {operator} {_atom(_render(rhs))}": 1}


def _range(expr, symbols: list[Symbol]) -> tuple[int, float] | None:
    """[lo, hi] of ``expr`` over the symbols' ranges (hi may be math.inf); None when
    the expression is outside what this bounds (a division by a non-constant)."""
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value, expr.value
    if isinstance(expr, ir.AffineSymbolExpr):
        symbol = symbols[expr.position]
        return symbol.min, symbol.max
    lhs, rhs = _range(expr.lhs, symbols), _range(expr.rhs, symbols)
    if lhs is None or rhs is None:
        return None
    if isinstance(expr, ir.AffineAddExpr):
        return lhs[0] + rhs[0], lhs[1] + rhs[1]
    if isinstance(expr, ir.AffineMulExpr):
        corners = [0 if 0 in (a, b) else a * b for a in lhs for b in rhs]
        return min(corners), max(corners)
    if rhs[0] != rhs[1] or rhs[0] <= 0:
        return None
    divisor = rhs[0]
    if isinstance(expr, ir.AffineFloorDivExpr):
        return lhs[0] // divisor, lhs[1] // divisor
    if isinstance(expr, ir.AffineCeilDivExpr):
        return -(-lhs[0] // divisor), -(-lhs[1] // divisor)
    if 0 <= lhs[0] and lhs[1] < divisor:  # mod of a range inside [0, divisor)
        return lhs
    return 0, divisor - 1


def dim_fact(axis: int, expr, symbols: list[Symbol]) -> ir.DictAttr:
    """The ``anyshape.dims`` entry of dim ``axis``, bound to ``expr``."""
    terms = _terms(expr, symbols)
    divisor = 1
    if terms and "" not in terms:
        divisor = math.gcd(*terms.values())
    lo, hi = _range(expr, symbols) or (1, math.inf)
    lo = -(-max(lo, 1) // divisor) * divisor
    i64 = ir.IntegerType.get_signless(64)
    entries = {"axis": ir.IntegerAttr.get(i64, axis), "expr": ir.StringAttr.get(_render(terms)),
               "min": ir.IntegerAttr.get(i64, lo), "divisor": ir.IntegerAttr.get(i64, divisor)}
    if hi < UNBOUNDED:
        entries["max"] = ir.IntegerAttr.get(i64, int(hi) - int(hi) % divisor)
    return ir.DictAttr.get(entries)


def _symbol(value: ir.Value, binding) -> Symbol:
    op = value.owner
    if not isinstance(op, (ir.Operation, ir.OpView)) or not is_a(op, torch_ops.SymbolicIntOp):
        raise PassFailure("torch.bind_symbolic_shape operand is not a torch.symbolic_int",
                          binding.location)
    attributes = op.attributes
    lo = ir.IntegerAttr(attributes["min_val"]).value if "min_val" in attributes else 0
    hi = ir.IntegerAttr(attributes["max_val"]).value if "max_val" in attributes else math.inf
    return Symbol(ir.StringAttr(attributes["symbol_name"]).value, lo,
                  math.inf if hi >= UNBOUNDED else hi)


def _entry_argument_of(value: ir.Value):
    """(function, argument number) when ``value`` is an argument of a func.func, else None."""
    if not isinstance(value.owner, ir.Block):
        return None
    function = value.owner.owner
    if function.operation.name != "func.func" or value.owner != function.regions[0].blocks[0]:
        return None
    return function, ir.BlockArgument(value).arg_number


def _set_argument_facts(function, facts: dict[int, dict[int, ir.DictAttr]]) -> None:
    count = len(function.regions[0].blocks[0].arguments)
    old = ir.ArrayAttr(function.attributes["arg_attrs"]) if "arg_attrs" in function.attributes \
        else None
    dictionaries = []
    for number in range(count):
        entries = {}
        if old is not None:
            existing = ir.DictAttr(old[number])
            entries = {existing[i].name: existing[i].attr for i in range(len(existing))}
        if number in facts:
            entries[DIMS_ATTR] = ir.ArrayAttr.get([facts[number][a] for a in sorted(facts[number])])
        dictionaries.append(ir.DictAttr.get(entries))
    function.attributes["arg_attrs"] = ir.ArrayAttr.get(dictionaries)


def _function_name(function) -> str:
    return ir.StringAttr(function.attributes["sym_name"]).value


@register
@dataclasses.dataclass
class LowerPass(ModulePass):
    argument = "anyshape-lower"
    description = ("Lower anyshape ops to tensor/linalg (through torch_c); symbolic-shape "
                   "bindings on arguments become 'anyshape.dims' argument attributes")

    def apply(self, module_op):
        apply_patterns(module_op, [(IotaLikeOp, lower_iota_like)])
        self._record_symbolic_shapes(module_op)

    def _record_symbolic_shapes(self, module_op) -> None:
        bindings, symbol_ops = [], []

        def visit(op):
            if is_a(op, torch_ops.BindSymbolicShapeOp):
                bindings.append(op)
            elif is_a(op, torch_ops.SymbolicIntOp):
                symbol_ops.append(op)
            return ir.WalkResult.ADVANCE

        module_op.walk(visit)
        for op in symbol_ops:
            if any(not is_a(use.owner, torch_ops.BindSymbolicShapeOp) for use in op.result.uses):
                name = ir.StringAttr(op.attributes["symbol_name"]).value
                raise PassFailure(f"torch.symbolic_int '{name}' is used by an op other than a "
                                  f"shape binding; anyshape-lower cannot erase it", op.location)
        functions = {}  # name -> (function, {argument: {axis: fact}})
        for binding in bindings:
            bound, *operands = binding.operands
            argument = _entry_argument_of(bound)
            if argument is None:
                continue
            function, number = argument
            sizes = _vtensor_sizes(bound.type, binding)
            symbols = [_symbol(v, binding) for v in operands]
            shape = ir.AffineMapAttr(binding.attributes["shape_expressions"]).value
            if len(shape.results) != len(sizes):
                raise PassFailure(f"torch.bind_symbolic_shape gives {len(shape.results)} sizes "
                                  f"for a rank-{len(sizes)} tensor", binding.location)
            _, by_argument = functions.setdefault(_function_name(function), (function, {}))
            facts = by_argument.setdefault(number, {})
            for axis, expr in enumerate(shape.results):
                if sizes[axis] is not None:
                    continue
                try:
                    fact = dim_fact(axis, expr, symbols)
                except PassFailure as failure:  # at the binding, not the whole module
                    raise PassFailure(str(failure), failure.location or binding.location) from None
                if facts.get(axis, fact) != fact:
                    raise PassFailure(f"two symbolic-shape bindings of argument {number} of "
                                      f"@{_function_name(function)} disagree on dim {axis}: "
                                      f"{facts[axis]} and {fact}", binding.location)
                facts[axis] = fact
        for function, by_argument in functions.values():
            _set_argument_facts(function, {n: f for n, f in by_argument.items() if f})
        for op in bindings:  # bindings first: they use the symbolic ints
            op.erase()
        for op in symbol_ops:
            op.erase()


def _vtensor_sizes(type_: ir.Type, binding) -> list[int | None]:
    shape = vtensor_shape(type_)
    if shape is None:
        raise PassFailure(f"torch.bind_symbolic_shape on a value of type {type_}; expected a "
                          f"ranked !torch.vtensor", binding.location)
    return shape[0]
