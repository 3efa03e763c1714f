"""Every tensor dim of a function as an expression over its arguments' dims.

Dims are sympy expressions over positive integer symbols. A symbol is rooted
at a function argument's dim: the one a ``torch.bind_symbolic_shape`` on the
argument names, or, for a dynamic argument dim no binding names, a symbol of
its own. Where a value carries a binding its dims come from it; otherwise they
are propagated from its producer (elementwise and broadcast ops, matmuls,
views, flatten/unflatten, permute/transpose, (un)squeeze, slice/select, cat,
embedding/gather/index_select, reductions, size-list constructors), and static
sizes in the type win over both. What cannot be derived stays unknown (None)
and is left alone. (torch-mlir imports ``aten.sym_size`` as ``aten.size.int``.)
"""

from __future__ import annotations

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import constant_int, int_list, is_none, list_items
from anyshape.passes.torch_ir.ops import (BROADCASTING, REDUCTIONS, SAME_SHAPE, keepdim,
                                          reduced_axes)
from anyshape.passes.torch_ir.values import ValueMap, defining_op, is_a, typed

Expr = sympy.Expr


def size_query(value: ir.Value) -> tuple[ir.Value, int] | None:
    """(tensor, non-negative dim) when ``value`` is ``aten.size.int tensor, <constant>``."""
    op = defining_op(value)
    if not is_a(op, torch_ops.AtenSizeIntOp):
        return None
    tensor, dim_value = op.operands
    dim = constant_int(dim_value)
    shape = vtensor_shape(tensor.type)
    if dim is None or shape is None:
        return None
    rank = len(shape[0])
    dim = dim + rank if dim < 0 else dim
    return (tensor, dim) if 0 <= dim < rank else None


def same_size(a, b) -> bool:
    """``a`` and ``b`` (sympy sizes, None unknown) are the same size for every
    value of their symbols. A polynomial difference is decided by expanding it;
    only what is not a polynomial (floor divisions, Min, Max) goes to
    ``sympy.simplify``, which is slow on every difference that is not zero
    (docs/benchmarks.md, "fifth session")."""
    if a is None or b is None:
        return False
    difference = sympy.expand(a - b)
    if difference == 0:
        return True
    if difference.is_polynomial():
        return False  # expanded: its terms would have cancelled were it 0
    return sympy.simplify(difference) == 0


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


# Constructors whose result has the sizes listed in their ``size`` operand.
_FROM_SIZE_LIST = frozenset({
    "torch.aten.ones", "torch.aten.zeros", "torch.aten.empty.memory_format",
    "torch.aten.full", "torch.aten.rand", "torch.aten.randn",
    "torch.aten.new_ones", "torch.aten.new_zeros", "torch.aten.new_full",
    "torch.aten.new_empty",
})
# The ops below that take one axis, and the name of the operand holding it.
_AXIS_OPERAND = {
    "torch.aten.flatten.using_ints": "start_dim", "torch.aten.unflatten.int": "dim",
    "torch.aten.squeeze.dim": "dim", "torch.aten.select.int": "dim",
    "torch.aten.slice.Tensor": "dim", "torch.aten.index_select": "dim",
    **{name: "dim" for name in REDUCTIONS},
}
_INT64_MAX = 2**63 - 1


class ShapeAnalysis:
    def __init__(self, func_op: ir.Operation):
        self.block = func_op.regions[0].blocks[0]
        self.dims: ValueMap = ValueMap()  # ir.Value -> its dims
        self.roots: dict[sympy.Symbol, tuple[int, int]] = {}  # symbol -> (argument, axis)
        self.ranges: dict[sympy.Symbol, tuple[int | None, int | None]] = {}  # symbol -> (min, max)
        self._symbol_of: dict[ir.Value, Expr] = {}
        self._bindings: ValueMap = ValueMap()  # ir.Value -> dims its binding states
        self._collect_bindings()
        self._root_arguments()
        self._propagate()

    # -- public ---------------------------------------------------------------
    def refresh(self) -> None:
        """Derive every op result's dims again: rewrites that replaced ops
        without recording their results' dims (``arange`` to ``iota_like``)
        leave those, and everything computed from them, unknown. The bindings
        are read again: those of erased ops went with them."""
        self._bindings = ValueMap()
        self._collect_bindings()
        self._propagate()

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
        # A polynomial with nonnegative coefficients grows with every (positive)
        # symbol, so it is largest at the symbols' maxima.
        highs = {s: self.ranges.get(s, (None, None))[1] for s in expr.free_symbols}
        if any(high is None for high in highs.values()):
            return None
        try:
            coefficients = sympy.Poly(expr, *highs).coeffs()
        except sympy.PolynomialError:
            return None
        if not all(c.is_number and c >= 0 for c in coefficients):
            return None
        return int(expr.subs(highs))

    def min_of(self, expr) -> int | None:
        """A lower bound of ``expr`` (a constant, or a symbol plus a constant)."""
        if expr is None:
            return None
        if expr.is_Integer:
            return int(expr)
        symbol, offset = expr, 0
        if isinstance(expr, sympy.Add) and len(expr.args) == 2 and expr.args[0].is_Integer:
            offset, symbol = int(expr.args[0]), expr.args[1]
        if not isinstance(symbol, sympy.Symbol):
            return None
        low = self.ranges.get(symbol, (None, None))[0]
        return max(low or 1, 1) + offset  # sizes are at least 1

    # -- construction ---------------------------------------------------------
    def _collect_bindings(self) -> None:
        for op in self.block.operations:
            op = op.operation
            if is_a(op, torch_ops.SymbolicIntOp):
                name = ir.StringAttr(op.attributes["symbol_name"]).value
                self._symbol_of[op.results[0]] = _symbol(name)
                bounds = [ir.IntegerAttr(op.attributes[k]).value if k in op.attributes else None
                          for k in ("min_val", "max_val")]
                self.ranges[_symbol(name)] = (bounds[0], bounds[1])
            elif is_a(op, torch_ops.BindSymbolicShapeOp):
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
            for result in op.operation.results:
                dims = self._dims_of(result)
                if dims is not None:
                    self.dims[result] = dims

    def _dims_of(self, result: ir.Value) -> list[Expr | None] | None:
        """An op result's dims from its binding, else its producer and operands."""
        shape = vtensor_shape(result.type)
        if shape is None or isinstance(result.owner, ir.Block):
            return None
        derived = self._bindings.get(result) or self._derive(result.owner.operation,
                                                              len(shape[0]))
        dims = []
        for axis, size in enumerate(shape[0]):
            if size is not None:
                dims.append(sympy.Integer(size))
            elif derived is not None and axis < len(derived):
                dims.append(derived[axis])
            else:
                dims.append(None)
        return dims

    def _operand_dims(self, value: ir.Value) -> list[Expr | None] | None:
        return self.dims.get(value)

    def _derive(self, op: ir.Operation, rank: int) -> list[Expr | None] | None:
        name = op.name
        operands = list(op.operands)
        if name in SAME_SHAPE and operands:
            return self._operand_dims(operands[0])
        if name in BROADCASTING:
            return self.broadcast([self._operand_dims(v) for v in operands
                                    if vtensor_shape(v.type) is not None], rank)
        named = typed(op)
        if name in ("torch.aten.transpose.int",):
            dims = self._operand_dims(named.self_)
            a, b = constant_int(named.dim0), constant_int(named.dim1)
            if dims is None or a is None or b is None:
                return None
            dims = list(dims)
            a, b = a % len(dims), b % len(dims)
            dims[a], dims[b] = dims[b], dims[a]
            return dims
        if name == "torch.aten.permute":
            dims = self._operand_dims(named.self_)
            order = int_list(named.dims)
            if dims is None or order is None:
                return None
            return [dims[p % len(dims)] for p in order]
        if name == "torch.aten.unsqueeze":
            dims = self._operand_dims(named.self_)
            axis = constant_int(named.dim)
            if dims is None or axis is None:
                return None
            axis = axis % (len(dims) + 1)
            return dims[:axis] + [sympy.Integer(1)] + dims[axis:]
        if name in ("torch.aten.linear", "torch.aten.mm", "torch.aten.matmul", "torch.aten.bmm"):
            # linear(input, weight), mm/bmm(self_, mat2), matmul(self_, other)
            lhs, rhs = self._operand_dims(operands[0]), self._operand_dims(operands[1])
            if lhs is None or rhs is None:
                return None
            if name == "torch.aten.linear":
                return lhs[:-1] + [rhs[0]]
            if len(lhs) >= 2 and len(rhs) >= 2:
                batch = self.broadcast([lhs[:-2], rhs[:-2]], rank - 2) if rank > 2 else []
                return (batch or []) + [lhs[-2], rhs[-1]]
            return None
        if name == "torch.aten.scaled_dot_product_attention":
            query, value = self._operand_dims(named.query), self._operand_dims(named.value)
            return None if query is None or value is None else query[:-1] + value[-1:]
        if name == "torch.aten.embedding":
            table, indices = self._operand_dims(named.weight), self._operand_dims(named.indices)
            if table is None or indices is None:
                return None
            return indices + [table[-1]]
        return self._derive_structural(op, name, operands, rank)

    def _derive_structural(self, op, name: str, operands: list, rank: int):
        """Shape ops, slicing, reductions and constructors."""
        dims = self._operand_dims(operands[0]) if operands else None
        named = typed(op)
        if name in ("torch.aten.view", "torch.aten.reshape"):
            items = list_items(named.size if name == "torch.aten.view" else named.shape)
            return None if dims is None or items is None else self.target_dims(items, dims)
        if name in ("torch.aten.expand", "torch.aten.broadcast_to"):
            items = list_items(named.size)
            if dims is None or items is None or len(items) < len(dims):
                return None
            exprs = [self.scalar(v) for v in items]
            aligned = [None] * (len(items) - len(dims)) + list(dims)
            return [a if e == -1 else e for e, a in zip(exprs, aligned)]
        if name in _FROM_SIZE_LIST:
            items = list_items(named.size)
            return None if items is None else [self.scalar(v) for v in items]
        if name == "anyshape.iota_like":
            return [self.dim(operands[0], ir.IntegerAttr(op.attributes["dim"]).value)]
        if name in ("torch.aten.gather",):
            return self._operand_dims(named.index)
        if name == "torch.aten.cat":
            return self._concatenated(named.tensors, named.dim)
        if dims is None:
            return None
        axis = constant_int(getattr(named, _AXIS_OPERAND[name])) if name in _AXIS_OPERAND else None
        if not dims and axis is not None:
            return None  # dim 0 of a 0-d tensor (torch reads it as a 1-d one): left to the type
        if name == "torch.aten.flatten.using_ints":
            end = constant_int(named.end_dim)
            if axis is None or end is None or not dims:
                return None
            axis, end = axis % len(dims), end % len(dims)
            group = dims[axis:end + 1]
            merged = None if None in group else sympy.Mul(*group)
            return dims[:axis] + [merged] + dims[end + 1:]
        if name == "torch.aten.unflatten.int":
            items = list_items(named.sizes)
            if axis is None or items is None:
                return None
            axis %= len(dims)
            parts = self.target_dims(items, [dims[axis]])
            return None if parts is None else dims[:axis] + parts + dims[axis + 1:]
        if name == "torch.aten.squeeze.dim":
            if axis is None:
                return None
            axis %= len(dims)
            return dims[:axis] + dims[axis + 1:] if dims[axis] == 1 else list(dims)
        if name == "torch.aten.squeeze":
            kept = [d for d in dims if d != 1]
            return kept if len(kept) == rank else None
        if name == "torch.aten.select.int":
            return None if axis is None else dims[:axis % len(dims)] + dims[axis % len(dims) + 1:]
        if name == "torch.aten.slice.Tensor":
            if axis is None:
                return None
            axis %= len(dims)
            length = self._slice_length(dims[axis], named.start, named.end, named.step)
            return dims[:axis] + [length] + dims[axis + 1:]
        if name == "torch.aten.index_select":
            index = self._operand_dims(named.index)
            if axis is None or index is None or len(index) != 1:
                return None
            axis %= len(dims)
            return dims[:axis] + index + dims[axis + 1:]
        if name in REDUCTIONS:
            return self._reduced(op, dims)
        if name in ("torch.aten.addmm", "torch.aten.baddbmm"):
            # addmm(self_, mat1, mat2), baddbmm(self_, batch1, batch2)
            lhs, rhs = self._operand_dims(operands[1]), self._operand_dims(operands[2])
            if lhs is None or rhs is None:
                return None
            return lhs[:-1] + [rhs[-1]]
        return None

    def _concatenated(self, tensors: ir.Value, dim: ir.Value):
        parts, axis = list_items(tensors), constant_int(dim)
        shapes = None if parts is None else [self._operand_dims(v) for v in parts]
        if axis is None or not shapes or any(s is None for s in shapes):
            return None
        shapes = [s for s in shapes if s != [0]]  # torch skips legacy empty 1-D inputs
        rank = len(shapes[0])
        if any(len(s) != rank for s in shapes):
            return None
        axis %= rank
        if any(d is None for s in shapes for d in (s[axis],)):
            return None
        out = list(shapes[0])
        out[axis] = sympy.Add(*[s[axis] for s in shapes])
        return out

    def _reduced(self, op, dims: list):
        reduced, keep = reduced_axes(op, len(dims)), keepdim(op)
        if reduced is None or keep is None:
            return None
        if not dims:  # torch takes dim 0 or -1 of a 0-d tensor as the tensor itself
            return []
        if keep:
            return [sympy.Integer(1) if i in reduced else d for i, d in enumerate(dims)]
        return [d for i, d in enumerate(dims) if i not in reduced]

    def _slice_length(self, size, start_value, end_value, step_value):
        """Elements of ``x[start:end:step]`` along an axis of ``size``; None where
        the slice might clamp in a way the symbols cannot tell."""
        start, step = self.scalar(start_value), self.scalar(step_value)
        end = sympy.Integer(_INT64_MAX) if is_none(end_value) else self.scalar(end_value)
        if size is None or start is None or step is None or end is None:
            return None
        if not (step.is_Integer and step > 0 or not step.is_Integer and (self.min_of(step) or 0) >= 1):
            return None
        if start.is_Integer and start < 0:  # sizes are at least 1: only -1 is safe
            if not (size.is_Integer or start == -1):
                return None
            start = size + start
        elif not start.is_Integer and (self.min_of(start) is None or self.min_of(start) < 0):
            return None
        if end.is_Integer and end < 0:
            if not (size.is_Integer or end == -1):
                return None
            end = size + end
        elif end.is_Integer and end >= _INT64_MAX // 2 or same_size(end, size):
            end = size  # "to the end"
        elif size.is_Integer and end.is_Integer:
            end = sympy.Min(end, size)
        elif not (size.is_Integer and (self.max_of(end) or size + 1) <= size):
            return None
        span = sympy.simplify(end - start)
        if span.is_Integer and step.is_Integer:
            return sympy.Integer(max(0, -(-int(span) // int(step))))
        # ceil(span / step) = (span + step - 1) / step when that divides exactly
        # (rows start::L of a merged [B*L] axis: B).
        quotient = sympy.cancel((span + step - 1) / step)
        if sympy.fraction(quotient)[1] == 1:
            length = sympy.expand(quotient)
        elif step == 1:
            length = span
        elif step.is_Integer:
            length = sympy.ceiling(span / step)
        else:
            return None
        if start != 0 and (self.min_of(length) is None or self.min_of(length) < 0):
            return None  # end - start may be negative: the slice would be empty
        return length

    def scalar(self, value: ir.Value) -> Expr | None:
        """The dim expression a torch scalar computes (sizes, constants, int arithmetic)."""
        constant = constant_int(value)
        if constant is not None:
            return sympy.Integer(constant)
        op = defining_op(value)
        if op is None:
            return None
        if is_a(op, torch_ops.AtenSizeIntOp):
            query = size_query(value)
            return None if query is None else self.dim(*query)
        if is_a(op, torch_ops.AtenNumelOp):
            dims = self.dims.get(op.operands[0])
            return None if dims is None or None in dims else sympy.Mul(*dims)
        combine = {"torch.aten.mul.int": lambda a, b: a * b, "torch.aten.add.int": lambda a, b: a + b,
                   "torch.aten.sub.int": lambda a, b: a - b,
                   "torch.aten.floordiv.int": lambda a, b: sympy.floor(a / b)}.get(op.name)
        if combine is None:
            return None
        lhs, rhs = (self.scalar(v) for v in op.operands)
        return None if lhs is None or rhs is None else combine(lhs, rhs)

    def target_dims(self, sizes: list[ir.Value], in_dims: list) -> list[Expr | None] | None:
        """Output dims of ``view(x, sizes)`` for x of ``in_dims``, one -1 inferred."""
        exprs = [self.scalar(v) for v in sizes]
        if any(e is None for e in exprs):
            return None
        inferred = [i for i, e in enumerate(exprs) if e == -1]
        if len(inferred) > 1:
            return None
        if inferred:
            if any(d is None for d in in_dims):
                return None
            known = sympy.Mul(*[e for i, e in enumerate(exprs) if i != inferred[0]])
            exprs[inferred[0]] = sympy.cancel(sympy.Mul(*in_dims) / known)
        return exprs

    @staticmethod
    def broadcast(shapes: list, rank: int) -> list[Expr | None] | None:
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

