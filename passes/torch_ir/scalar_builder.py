"""Dim expressions (sympy, over argument-dim symbols) built back as torch scalar ops.

Every symbol is read by one ``aten.size.int`` of the argument dim it is rooted
at, placed at the function entry right after the argument bindings, so every
use anywhere in the function is dominated by it.
"""

from __future__ import annotations

import sympy

from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import int_constant
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, size_query
from anyshape.passes.torch_ir.values import is_a, typed


class ScalarBuilder:
    """Materializes dim expressions as torch scalar ops; one SSA value per root."""

    def __init__(self, analysis: ShapeAnalysis):
        self.analysis = analysis
        self.block = analysis.block
        self._roots: dict[sympy.Symbol, ir.Value] = {}
        # Fixed now: a rewrite that folds an op into an argument (an identity
        # expand) leaves that op's binding on the argument further down, and a
        # root placed after it would not dominate uses built before it.
        self._entry = self._last_argument_binding()
        for op in self.block.operations:  # reuse the entry's existing root queries
            op = op.operation
            query = size_query(op.results[0]) if is_a(op, torch_ops.AtenSizeIntOp) else None
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
            query = torch_ops.AtenSizeIntOp(self.block.arguments[arg], axis_value).operation
        self._place_at_entry(query)
        self._roots[symbol] = query.result
        return query.result

    def _place_at_entry(self, query: ir.Operation) -> None:
        """Right after the argument bindings (IREE's torch input replaces every use
        of a bound argument with a value defined at its binding, so a query above
        it would break dominance), or first in the block; its constant just before."""
        axis = typed(query).dim.owner.operation
        if self._entry is not None:
            query.move_after(self._entry)
            axis.move_after(self._entry)
        else:
            first = self.block.operations[0].operation
            axis.move_before(first)
            query.move_after(axis)

    def _last_argument_binding(self) -> ir.Operation | None:
        last = None
        for op in self.block.operations:
            op = op.operation
            if is_a(op, torch_ops.BindSymbolicShapeOp) and isinstance(op.operands[0].owner, ir.Block):
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
            combine = torch_ops.AtenMulIntOp if isinstance(expr, sympy.Mul) else torch_ops.AtenAddIntOp
            value = parts[0]
            for part in parts[1:]:
                value = combine(value, part).result
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
            return torch_ops.AtenFloordivIntOp(top, int_constant(int(denominator))).result
        if isinstance(expr, sympy.Mod):
            a, b = self.build(expr.args[0]), self.build(expr.args[1])
            if a is None or b is None:
                return None
            return torch_ops.AtenRemainderIntOp(a, b).result
        return None
