"""Every tensor dim of a function as an expression over its arguments' dims.

Dims are sympy expressions over positive integer symbols. A symbol is rooted
at a function argument's dim: the one a ``torch.bind_symbolic_shape`` on the
argument names, or, for a dynamic argument dim no binding names, a symbol of
its own. Where a value carries a binding its dims come from it; otherwise they
are propagated from its producer (elementwise and broadcast ops, matmuls,
transposes, unsqueeze, embedding, ...), and static sizes in the type win over
both. What cannot be derived stays unknown (None) and is left alone.
"""

from __future__ import annotations

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes.torch_ir import constant_int, list_items

Expr = sympy.Expr


def _symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, positive=True)


def affine_to_sympy(expr, operand_symbols: list[Expr | None]) -> Expr | None:
    if isinstance(expr, ir.AffineConstantExpr):
        return sympy.Integer(expr.value)
    if isinstance(expr, ir.AffineSymbolExpr):
        return operand_symbols[expr.position]
    if isinstance(expr, ir.AffineDimExpr):
        return None
    lhs = affine_to_sympy(expr.lhs, operand_symbols)
    rhs = affine_to_sympy(expr.rhs, operand_symbols)
    if lhs is None or rhs is None:
        return None
    if isinstance(expr, ir.AffineAddExpr):
        return lhs + rhs
    if isinstance(expr, ir.AffineMulExpr):
        return lhs * rhs
    if isinstance(expr, ir.AffineFloorDivExpr):
        return sympy.floor(lhs / rhs)
    if isinstance(expr, ir.AffineCeilDivExpr):
        return sympy.ceiling(lhs / rhs)
    if isinstance(expr, ir.AffineModExpr):
        return sympy.Mod(lhs, rhs)
    return None


_ELEMENTWISE_BINARY = {
    "torch.aten.add.Tensor", "torch.aten.sub.Tensor", "torch.aten.mul.Tensor",
    "torch.aten.div.Tensor", "torch.aten.pow.Tensor_Tensor", "torch.aten.where.self",
    "torch.aten.maximum", "torch.aten.minimum", "torch.aten.eq.Tensor", "torch.aten.ne.Tensor",
    "torch.aten.lt.Tensor", "torch.aten.gt.Tensor", "torch.aten.le.Tensor", "torch.aten.ge.Tensor",
    "torch.aten.bitwise_and.Tensor", "torch.aten.bitwise_or.Tensor", "torch.aten.masked_fill.Scalar",
    "torch.aten.masked_fill.Tensor",
}
# Ops whose result has the shape of their first operand.
_SAME_SHAPE = {
    "torch.aten.tanh", "torch.aten.relu", "torch.aten.gelu", "torch.aten.erf", "torch.aten.neg",
    "torch.aten.rsqrt", "torch.aten.sqrt", "torch.aten.exp", "torch.aten.sigmoid",
    "torch.aten.clone", "torch.aten.contiguous", "torch.aten.to.dtype", "torch.aten._to_copy",
    "torch.aten.add.Scalar", "torch.aten.sub.Scalar", "torch.aten.mul.Scalar",
    "torch.aten.div.Scalar", "torch.aten.pow.Tensor_Scalar", "torch.aten.softmax.int",
    "torch.aten._softmax", "torch.aten.log_softmax.int", "torch.aten.layer_norm",
    "torch.aten.dropout", "torch.aten.ne.Scalar", "torch.aten.eq.Scalar", "torch.aten.ge.Scalar",
    "torch.aten.gt.Scalar", "torch.aten.lt.Scalar", "torch.aten.le.Scalar",
    "torch.aten.cumsum", "torch.aten.tensor_static_info_cast",
}


class ShapeAnalysis:
    def __init__(self, func_op: ir.Operation):
        self.block = func_op.regions[0].blocks[0]
        self.dims: dict[ir.Value, list[Expr | None]] = {}
        self.roots: dict[sympy.Symbol, tuple[int, int]] = {}  # symbol -> (argument, axis)
        self.ranges: dict[sympy.Symbol, tuple[int | None, int | None]] = {}  # symbol -> (min, max)
        self._symbol_of: dict[ir.Value, Expr] = {}
        self._bindings: dict[ir.Value, list[Expr | None]] = {}
        self._collect_bindings()
        self._root_arguments()
        self._propagate()

    # -- public ---------------------------------------------------------------
    def dim(self, value: ir.Value, axis: int) -> Expr | None:
        dims = self.dims.get(value)
        if dims is None or not 0 <= axis < len(dims):
            return None
        return dims[axis]

    def root_of(self, symbol: sympy.Symbol) -> tuple[int, int] | None:
        return self.roots.get(symbol)

    def max_of(self, expr) -> int | None:
        """An upper bound of ``expr`` from the symbols' ranges (static: itself)."""
        if expr is None:
            return None
        if expr.is_Integer:
            return int(expr)
        if isinstance(expr, sympy.Symbol):
            return self.ranges.get(expr, (None, None))[1]
        return None

    # -- construction ---------------------------------------------------------
    def _collect_bindings(self) -> None:
        for op in self.block.operations:
            op = op.operation
            if op.name == "torch.symbolic_int":
                name = ir.StringAttr(op.attributes["symbol_name"]).value
                self._symbol_of[op.results[0]] = _symbol(name)
                bounds = [ir.IntegerAttr(op.attributes[k]).value if k in op.attributes else None
                          for k in ("min_val", "max_val")]
                self.ranges[_symbol(name)] = (bounds[0], bounds[1])
            elif op.name == "torch.bind_symbolic_shape":
                value, *operands = op.operands
                symbols = [self._symbol_of.get(v) for v in operands]
                affine = ir.AffineMapAttr(op.attributes["shape_expressions"]).value
                self._bindings[value] = [affine_to_sympy(e, symbols) for e in affine.results]

    def _root_arguments(self) -> None:
        for index, arg in enumerate(self.block.arguments):
            shape = vtensor_shape(arg.type)
            if shape is None:
                continue
            bound = self._bindings.get(arg, [None] * len(shape[0]))
            dims = []
            for axis, size in enumerate(shape[0]):
                if size is not None:
                    dims.append(sympy.Integer(size))
                    continue
                expr = bound[axis] if axis < len(bound) else None
                if expr is None:
                    expr = _symbol(f"arg{index}_dim{axis}")
                if isinstance(expr, sympy.Symbol):
                    self.roots.setdefault(expr, (index, axis))
                dims.append(expr)
            self.dims[arg] = dims

    def _propagate(self) -> None:
        for op in self.block.operations:
            op = op.operation
            for result in op.results:
                shape = vtensor_shape(result.type)
                if shape is None:
                    continue
                derived = self._bindings.get(result) or self._derive(op, len(shape[0]))
                dims = []
                for axis, size in enumerate(shape[0]):
                    if size is not None:
                        dims.append(sympy.Integer(size))
                    elif derived is not None and axis < len(derived):
                        dims.append(derived[axis])
                    else:
                        dims.append(None)
                self.dims[result] = dims

    def _operand_dims(self, value: ir.Value) -> list[Expr | None] | None:
        return self.dims.get(value)

    def _derive(self, op: ir.Operation, rank: int) -> list[Expr | None] | None:
        name = op.name
        operands = list(op.operands)
        if name in _SAME_SHAPE and operands:
            return self._operand_dims(operands[0])
        if name in _ELEMENTWISE_BINARY:
            return self._broadcast([self._operand_dims(v) for v in operands
                                    if vtensor_shape(v.type) is not None], rank)
        if name in ("torch.aten.transpose.int",):
            dims = self._operand_dims(operands[0])
            a, b = constant_int(operands[1]), constant_int(operands[2])
            if dims is None or a is None or b is None:
                return None
            dims = list(dims)
            a, b = a % len(dims), b % len(dims)
            dims[a], dims[b] = dims[b], dims[a]
            return dims
        if name == "torch.aten.permute":
            dims = self._operand_dims(operands[0])
            order = _int_list(operands[1])
            if dims is None or order is None:
                return None
            return [dims[p % len(dims)] for p in order]
        if name == "torch.aten.unsqueeze":
            dims = self._operand_dims(operands[0])
            axis = constant_int(operands[1])
            if dims is None or axis is None:
                return None
            axis = axis % (len(dims) + 1)
            return dims[:axis] + [sympy.Integer(1)] + dims[axis:]
        if name in ("torch.aten.linear", "torch.aten.mm", "torch.aten.matmul", "torch.aten.bmm"):
            lhs, rhs = self._operand_dims(operands[0]), self._operand_dims(operands[1])
            if lhs is None or rhs is None:
                return None
            if name == "torch.aten.linear":
                return lhs[:-1] + [rhs[0]]
            if len(lhs) >= 2 and len(rhs) >= 2:
                batch = self._broadcast([lhs[:-2], rhs[:-2]], rank - 2) if rank > 2 else []
                return (batch or []) + [lhs[-2], rhs[-1]]
            return None
        if name == "torch.aten.embedding":
            table, indices = self._operand_dims(operands[0]), self._operand_dims(operands[1])
            if table is None or indices is None:
                return None
            return indices + [table[-1]]
        return None

    @staticmethod
    def _broadcast(shapes: list, rank: int) -> list[Expr | None] | None:
        if any(s is None for s in shapes):
            return None
        out: list[Expr | None] = []
        for axis in range(rank):
            offset = rank - axis
            candidates = [s[len(s) - offset] for s in shapes if len(s) >= offset]
            non_one = [c for c in candidates if c != 1]
            known = list(dict.fromkeys(c for c in non_one if c is not None))
            static = [c for c in known if c.is_Integer]
            if not non_one:
                out.append(sympy.Integer(1))
            elif static:
                out.append(static[0])  # a static non-1 size is the result's size
            elif len(known) == 1 and all(c is not None for c in non_one):
                out.append(known[0])
            else:
                out.append(None)  # e.g. s0 against s1: either may be 1 at run time
        return out


def _int_list(value: ir.Value) -> list[int] | None:
    values = list_items(value)
    items = None if values is None else [constant_int(v) for v in values]
    return None if items is None or any(i is None for i in items) else items
