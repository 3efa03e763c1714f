"""``anyshape-canonicalize-shapes``: shape facts explicit and cheap in torch-dialect IR.

Rewrites so far:
- **dim rooting**: every shape query (``aten.size.int``, ``aten.size`` +
  ``__getitem__``, ``aten.numel``, ``aten.dim``) of any value becomes the same
  fact over function-argument dims (see ``shape_analysis.py``): static dims
  fold to constants, derived dims (``2*s0``, ``s0*s1``, ``s0//2``) become scalar
  arithmetic, and dims equal by a shared symbol read one SSA value, the
  ``aten.size.int`` of the first argument dim bound to it, placed at the entry.
- **iota-indexed lookups** become slices (``iota_lookups.py``).
- **dynamic iota**: ``aten.arange(end)``, ``arange.start(0, end)`` and
  ``arange.start_step(0, end, 1)`` with an integer dtype, where ``end`` is
  ``aten.size.int x, d``, become ``anyshape.iota_like x {dim = d}``: the
  length is read from ``x`` where the values are produced, not carried as a
  scalar into a generic arange (Gluon-NLP's ``arange_like``). Other aranges
  keep their exact semantics.
"""

import dataclasses

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.shape_analysis import ShapeAnalysis
from anyshape.passes.iota_lookups import rewrite_iota_lookup
from anyshape.passes.structural_reshapes import rewrite_identity_expand, rewrite_view
from anyshape.passes.torch_ir import (constant_int, defining_op, dtype_code, int_constant,
                                      int_type, is_none, size_query, static_info_cast,
                                      vtensor_type)

# arange overload -> (index of start or None for 0, index of end, index of step or
# None for 1, index of dtype)
_ARANGE_OPERANDS = {
    "torch.aten.arange": (None, 0, None, 1),
    "torch.aten.arange.start": (0, 1, None, 2),
    "torch.aten.arange.start_step": (0, 1, 2, 3),
}


def arange_to_iota(op, rewriter) -> bool:
    start_at, end_at, step_at, dtype_at = _ARANGE_OPERANDS[op.operation.name]
    operands = op.operands
    if start_at is not None and constant_int(operands[start_at]) != 0:
        return False
    if step_at is not None and constant_int(operands[step_at]) != 1:
        return False
    query = size_query(operands[end_at])
    result = vtensor_shape(op.results[0].type)
    if query is None or result is None or len(result[0]) != 1:
        return False
    code = dtype_code(result[1])
    dtype = operands[dtype_at]
    if code is None or not (is_none(dtype) or constant_int(dtype) == code):
        return False  # a float arange, or a dtype that disagrees with the result
    ref, dim = query
    length = vtensor_shape(ref.type)[0][dim]
    with ir.InsertionPoint(op), op.location:
        iota = ir.Operation.create(
            "anyshape.iota_like", results=[vtensor_type([length], result[1])], operands=[ref],
            attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)}).result
        replacement = static_info_cast(iota, op.results[0].type)
    rewriter.replace_op(op, [replacement])
    return True


class _ScalarBuilder:
    """Materializes dim expressions as torch scalar ops; one SSA value per root."""

    def __init__(self, analysis: ShapeAnalysis):
        self.analysis = analysis
        self.block = analysis.block
        self._roots: dict[sympy.Symbol, ir.Value] = {}
        for op in self.block.operations:  # reuse the entry's existing root queries
            op = op.operation
            query = size_query(op.results[0]) if op.name == "torch.aten.size.int" else None
            if query and isinstance(query[0].owner, ir.Block):
                expr = analysis.dim(query[0], query[1])
                if (isinstance(expr, sympy.Symbol) and expr not in self._roots
                        and analysis.root_of(expr) == (query[0].arg_number, query[1])):
                    self._roots[expr] = op.results[0]
        for query in self._roots.values():  # every use of a root must come after it
            self._place_at_entry(query.owner.operation)

    def root(self, symbol: sympy.Symbol) -> ir.Value | None:
        if symbol in self._roots:
            return self._roots[symbol]
        root = self.analysis.root_of(symbol)
        if root is None:
            return None
        arg, axis = root
        with ir.InsertionPoint.at_block_begin(self.block), ir.Location.unknown():
            axis_value = int_constant(axis)
            query = ir.Operation.create("torch.aten.size.int", results=[int_type()],
                                        operands=[self.block.arguments[arg], axis_value])
        self._place_at_entry(query)
        self._roots[symbol] = query.result
        return query.result

    def _place_at_entry(self, query: ir.Operation) -> None:
        """Right after the argument bindings (IREE's torch input replaces every use
        of a bound argument with a value defined at its binding, so a query above
        it would break dominance), or first in the block; its constant just before."""
        axis = query.operands[1].owner.operation
        binding = self._last_argument_binding()
        if binding is not None:
            query.move_after(binding)
            axis.move_after(binding)
        else:
            first = self.block.operations[0].operation
            axis.move_before(first)
            query.move_after(axis)

    def _last_argument_binding(self) -> ir.Operation | None:
        last = None
        for op in self.block.operations:
            op = op.operation
            if op.name == "torch.bind_symbolic_shape" and isinstance(op.operands[0].owner, ir.Block):
                last = op
        return last

    def build(self, expr) -> ir.Value | None:
        """Scalar ops computing ``expr`` at the current insertion point."""
        if expr is None:
            return None
        if expr.is_Integer:
            return int_constant(int(expr))
        if isinstance(expr, sympy.Symbol):
            return self.root(expr)
        if isinstance(expr, (sympy.Mul, sympy.Add)):
            if isinstance(expr, sympy.Mul) and any(not a.is_Integer and a.is_Rational for a in expr.args):
                return None  # a fraction: not an integer expression
            parts = [self.build(a) for a in expr.args]
            if any(p is None for p in parts):
                return None
            op_name = "torch.aten.mul.int" if isinstance(expr, sympy.Mul) else "torch.aten.add.int"
            value = parts[0]
            for part in parts[1:]:
                value = ir.Operation.create(op_name, results=[int_type()], operands=[value, part]).result
            return value
        if isinstance(expr, (sympy.floor, sympy.ceiling)):
            numerator, denominator = sympy.fraction(sympy.together(expr.args[0]))
            if not denominator.is_Integer:
                return None
            if isinstance(expr, sympy.ceiling):
                numerator = numerator + denominator - 1
            top = self.build(sympy.expand(numerator))
            if top is None:
                return None
            return ir.Operation.create("torch.aten.floordiv.int", results=[int_type()],
                                       operands=[top, int_constant(int(denominator))]).result
        if isinstance(expr, sympy.Mod):
            a, b = self.build(expr.args[0]), self.build(expr.args[1])
            if a is None or b is None:
                return None
            return ir.Operation.create("torch.aten.remainder.int", results=[int_type()],
                                       operands=[a, b]).result
        return None


def _root_patterns(builder: _ScalarBuilder):
    analysis = builder.analysis

    def replace_with(op, rewriter, expr) -> bool:
        if expr is None:
            return False
        with ir.InsertionPoint(op), op.location:
            value = builder.build(expr)
        if value is None or value == op.results[0]:
            return False
        rewriter.replace_op(op, [value])
        return True

    def size_int(op, rewriter) -> bool:
        query = size_query(op.results[0])
        if query is None:
            return False
        expr = analysis.dim(*query)
        if isinstance(expr, sympy.Symbol) and builder.root(expr) == op.results[0]:
            return False  # already the canonical root
        return replace_with(op, rewriter, expr)

    def getitem_of_size(op, rewriter) -> bool:
        producer = defining_op(op.operands[0])
        index = constant_int(op.operands[1])
        if producer is None or producer.name != "torch.aten.size" or index is None:
            return False
        tensor = producer.operands[0]
        shape = vtensor_shape(tensor.type)
        if shape is None:
            return False
        index = index + len(shape[0]) if index < 0 else index
        return replace_with(op, rewriter, analysis.dim(tensor, index))

    def numel(op, rewriter) -> bool:
        dims = analysis.dims.get(op.operands[0])
        if dims is None or any(d is None for d in dims):
            return False
        return replace_with(op, rewriter, sympy.Mul(*dims) if dims else sympy.Integer(1))

    def rank(op, rewriter) -> bool:
        shape = vtensor_shape(op.operands[0].type)
        return shape is not None and replace_with(op, rewriter, sympy.Integer(len(shape[0])))

    def view(op, rewriter) -> bool:
        return rewrite_view(op, rewriter, analysis, builder)

    def expand(op, rewriter) -> bool:
        return rewrite_identity_expand(op, rewriter, analysis)

    return [("torch.aten.size.int", size_int), ("torch.aten.__getitem__.t", getitem_of_size),
            ("torch.aten.numel", numel), ("torch.aten.dim", rank),
            ("torch.aten.view", view), ("torch.aten.reshape", view),
            ("torch.aten.expand", expand)]


def _lookup_patterns(builder: _ScalarBuilder):
    def lookup(op, rewriter) -> bool:
        return rewrite_iota_lookup(op, rewriter, builder.analysis, builder)

    return [("torch.aten.embedding", lookup), ("torch.aten.index_select", lookup)]


def hoist_argument_bindings(func: ir.Operation) -> None:
    """Argument bindings right after the symbolic ints they use, duplicates erased.

    torch.export can bind an argument again further down; the root queries go
    after the argument bindings (see ``_place_at_entry``), so those must all be
    at the top of the function.
    """
    block = func.regions[0].blocks[0]
    last_symbol, seen, bindings = None, set(), []
    for op in block.operations:
        op = op.operation
        if op.name == "torch.symbolic_int":
            last_symbol = op
        elif op.name == "torch.bind_symbolic_shape" and isinstance(op.operands[0].owner, ir.Block):
            bindings.append(op)
    for op in bindings:
        key = (op.operands[0].arg_number, tuple(str(v.get_name()) for v in op.operands[1:]),
               str(op.attributes["shape_expressions"]))
        if key in seen:
            op.erase()
            continue
        seen.add(key)
        if last_symbol is not None:
            op.move_after(last_symbol)
            last_symbol = op


def _functions(module_op: ir.Operation):
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks) == 1:
            yield op.operation


@register
@dataclasses.dataclass
class CanonicalizeShapesPass(ModulePass):
    argument = "anyshape-canonicalize-shapes"
    description = ("Make shape facts explicit: shape queries rooted at argument dims, "
                   "aranges over a tensor's size as anyshape.iota_like")

    def apply(self, module_op):
        functions = list(_functions(module_op))
        for func in functions:
            hoist_argument_bindings(func)
        builders = [_ScalarBuilder(ShapeAnalysis(func)) for func in functions]
        for func, builder in zip(functions, builders):
            apply_patterns(func, _root_patterns(builder))
        apply_patterns(module_op, [(name, arange_to_iota) for name in _ARANGE_OPERANDS])
        for func, builder in zip(functions, builders):
            apply_patterns(func, _lookup_patterns(builder))
