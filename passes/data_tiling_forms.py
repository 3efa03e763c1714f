"""anyshape-data-tiling-forms: the one-row work slice hoisting leaves, and
projections, in forms IREE 3.13 data-tiles without failing.

With data tiling (``anyshape.compile``'s default on CPU, ``iree/flags.py``),
IREE's CPU codegen fails on, or packs on every call, these forms:

- A batch matmul with one row (``bmm([B*H, 1, K], [B*H, K, N])``, one query
  row against every key): unit-dim folding makes it a batch matvec, whose
  data-tiled packing fails ("no basis element may be statically
  non-positive"). Written as a multiply and a sum over the unflattened
  ``[B, H]`` it has two batch dims, so IREE leaves it untiled: it is a row's
  worth of work. A decode function's batch and heads are static, so views
  merge and split them instead of a flatten and an unflatten; the same
  rewrite applies, and the step reads each layer's keys as they are instead
  of packing them for a product on every step (T5-small's decode step with
  333 source tokens: about 0.5 ms of 6.9 ms was that packing).
- A slice of a tensor that other ops read whole, taking one row or one row
  per sequence (the last layer's input, also read by the K and V
  projections): IREE fuses the strided read into the projection's dispatch
  together with the operand packing, and that dispatch exceeds the stack
  limit or the vector size limit (tiles sized by the length's upper bound).
  As ``index_select`` the rows are their own small copy. A boolean tensor's
  row stays a slice: no projection reads a mask, and the last layer's row of
  the causal mask (which the layers before read whole), gathered into the
  one-row attention scores, made that dispatch's peeled code 37 times larger
  (``docs/iree-notes.md``, peeling).
- A projection with a column slice of a constant weight (the Q, K and V
  parts of GPT-2's fused ``c_attn``, split by slice hoisting): IREE packs
  the slice inside the projection's dispatch on every call instead of once
  at load time, and in the last layer that dispatch also fails to compile.
  Computed with the whole weight and sliced after, the packing is hoisted
  and the projections that share an input become one (CSE). In the last
  layer the query rows' projection then reads the same whole weight as the
  K and V projection of every row: its rows are taken from that product
  instead (IREE would fuse the column slice back into a one-row projection
  and pack the weight inside it). The cost is the last layer's Q columns
  for every row: under 1 % of GPT-2 small's FLOPs.
- Separate Q, K and V projections of one input, split into heads (BERT,
  RoBERTa): IREE propagates each head transpose into its projection, which
  becomes a contraction with two result dims that data tiling leaves untiled (about a
  third of roberta-base's matmul work); with that propagation off, packing
  V for the attention product fails instead ("no basis element may be
  statically non-positive"). Linears that share an input and have constant
  weights become one linear on the concatenated weights (a constant
  expression IREE evaluates at compile time), sliced after, as GPT-2's
  fused projection is: one plain data-tiled matmul, and the head transposes
  go into the attention products. Projections not split into heads are left
  alone: there is no transpose to fold, and a column slice read straight by
  an attention product is packed inside its dispatch, past the stack limit.
  Projections of the real tokens whose rows anyshape-eliminate-padding
  gathers back to the padded layout before the head split fuse too
  (roberta-base, batch 8, L = 64, 24 real tokens per row: 62 ms of
  projection against 66 ms unfused), and their rows are gathered once,
  before the slices: one gather dispatch instead of three, in the same time.

- A projection of a dynamic number of rows that never exceeds one data tile
  (16; one row per sequence: the slice-hoisted last layer's FFN and query,
  a classifier head): IREE's data tiling fails to compile it ("failed to
  resolve workgroup count hint", or past the stack limit). As a broadcast
  multiply and a sum over K it is left untiled, and one tile of rows gains
  nothing from packing.
- A linear on ``[B, L, K]``: IREE's GlobalOptimization data tiling sees a
  batch matmul with the weight broadcast to every batch and packs that
  broadcast on every call (half of roberta-base's time at L = 32). On
  the rows flattened into one dim it is one matmul whose weight IREE packs
  once, at compile time; done last, after the rewrites that match linears.
- Attention scores plus a padding mask of one row per sequence
  (``unflatten(bmm(Q, K^T)) + M``, M ``[B, 1, 1, L]``): with a dynamic
  length IREE does not fuse the unpacking of the data-tiled scores with the
  addition, and the addition costs a pass over ``[B, H, L, L]`` of its own
  (about 9 % of roberta-base at L = 512). As one more contraction step,
  ``bmm([Q, 1], [K^T; M])``, the product adds the mask: the same sum, with
  the mask added last (``-inf`` stays ``-inf``, 0 adds nothing).

The rewrites compute the same values.
"""

from __future__ import annotations

import dataclasses
import math

import sympy

from anyshape.dialects import computed_from_constants, stored_literal, vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.torch_ir.constants import (bool_constant, constant_int, int_constant,
                                                int_list_construct, is_none, list_items,
                                                none_constant)
from anyshape.passes.torch_ir.scalar_builder import ScalarBuilder
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, same_size
from anyshape.passes.torch_ir.values import (defining_op, erase_unused, functions, is_a, rebuilt,
                                             typed, users, vtensor_type)
from anyshape.stages import Workaround


_RESHAPES = (torch_ops.AtenViewOp, torch_ops.AtenReshapeOp, torch_ops.Aten_UnsafeViewOp)


def _merges_first_two_dims(whole: ir.Type, merged: ir.Type) -> bool:
    """``merged`` is ``whole`` (rank 4) with its dims 0 and 1 made one, as the
    static sizes show (a decode function's ``[1, H, 1, D]`` viewed as ``[H, 1, D]``:
    canonicalize-shapes writes a flatten only where a dim is dynamic)."""
    four, three = vtensor_shape(whole), vtensor_shape(merged)
    if four is None or three is None or len(four[0]) != 4 or len(three[0]) != 3:
        return False
    (a, b, c, d), (ab, c2, d2) = four[0], three[0]
    # With at most one of the last two dims dynamic, equal sizes elsewhere
    # leave no other way to view the one as the other.
    return None not in (a, b, ab) and a * b == ab and (c, d) == (c2, d2) and \
        (c is not None or d is not None)


def _flattened_4d(value: ir.Value):
    """``a`` when ``value`` is ``flatten(a, 0, 1)`` of a rank-4 ``a``, or a view
    of ``a`` that merges those two dims (their sizes static)."""
    op = defining_op(value)
    if is_a(op, *_RESHAPES):
        whole = op.operands[0]
        return whole if _merges_first_two_dims(whole.type, value.type) else None
    if not is_a(op, torch_ops.AtenFlattenUsingIntsOp):
        return None
    flatten = typed(op)
    if constant_int(flatten.start_dim) != 0 or constant_int(flatten.end_dim) != 1:
        return None
    shape = vtensor_shape(flatten.self_.type)
    return flatten.self_ if shape is not None and len(shape[0]) == 4 else None


def _constant_column_slice(value: ir.Value, axis: int):
    """(whole, start, end, step) when ``value`` is a constant-bounds slice on
    ``axis`` of a ``torch.vtensor.literal`` (or of its cast: ``stored_literal``)."""
    op = defining_op(value)
    if not is_a(op, torch_ops.AtenSliceTensorOp):
        return None
    piece = typed(op)
    shape = vtensor_shape(piece.self_.type)
    bounds = [constant_int(v) for v in (piece.dim, piece.start, piece.end, piece.step)]
    if stored_literal(piece.self_) is None or shape is None or None in bounds:
        return None
    if bounds[0] % len(shape[0]) != axis % len(shape[0]):
        return None
    return piece.self_, bounds[1], bounds[2], bounds[3]


@dataclasses.dataclass
class _Rewrites:
    analysis: ShapeAnalysis
    scalars: ScalarBuilder
    kernel_products: bool = False  # DataTilingFormsPass.kernel_products

    def same_dims(self, a: ir.Value, b: ir.Value, axes) -> bool:
        sa, sb = vtensor_shape(a.type), vtensor_shape(b.type)
        if sa is not None and sb is not None and \
                all(sa[0][i] is not None and sa[0][i] == sb[0][i] for i in axes):
            return True  # static and equal
        da, db = self.analysis.dims.get(a), self.analysis.dims.get(b)
        return (da is not None and db is not None and
                all(same_size(da[i], db[i]) for i in axes))

    def is_row(self, start, size) -> bool:
        """0 <= start < size for every size in range."""
        return self.nonnegative(start) and self.nonnegative(size - start - 1)

    def nonnegative(self, expr) -> bool:
        """expr >= 0 wherever every symbol is at least its minimum: with each
        symbol written as its minimum plus t >= 0, every coefficient of the
        polynomial in the t's is >= 0 (sufficient, not necessary)."""
        expr = sympy.sympify(expr)
        shifted, shifts = expr, []
        for symbol in expr.free_symbols:
            low = self.analysis.ranges.get(symbol, (None, None))[0]
            if low is None:
                return False
            t = sympy.Dummy(nonnegative=True)
            shifted, shifts = shifted.subs(symbol, low + t), shifts + [t]
        try:
            poly = sympy.Poly(sympy.expand(shifted), *shifts) if shifts else None
        except sympy.PolynomialError:
            return False
        coefficients = poly.coeffs() if poly is not None else [shifted]
        return all(c.is_number and c >= 0 for c in coefficients)

    def one_row_bmm(self, op, rewriter) -> bool:
        """unflatten(bmm(flatten(a), flatten(b)), 0, [B, H]) with one row in a
        -> sum(transpose(a, 2, 3) * b, 2, keepdim); views that merge and split
        the static [B, H] (a decode function's) as the flatten and unflatten."""
        if is_a(op, *_RESHAPES):
            product = op.operands[0]
            if not _merges_first_two_dims(op.results[0].type, product.type):
                return False
        else:
            unflatten = typed(op)
            if constant_int(unflatten.dim) != 0:
                return False
            product = unflatten.self_
        bmm = defining_op(product)
        if not is_a(bmm, torch_ops.AtenBmmOp) or len(users(bmm.results[0])) != 1:
            return False
        a, b = _flattened_4d(typed(bmm).self_), _flattened_4d(typed(bmm).mat2)
        result = vtensor_shape(op.results[0].type)
        if a is None or b is None or result is None or len(result[0]) != 4:
            return False
        a_shape, b_shape = vtensor_shape(a.type)[0], vtensor_shape(b.type)[0]
        if a_shape[2] != 1 or not self.same_dims(a, b, (0, 1)) or not self.same_dims(a, op.results[0], (0, 1)):
            return False
        with ir.InsertionPoint(op), op.location:
            column = torch_ops.AtenTransposeIntOp(
                vtensor_type([a_shape[0], a_shape[1], a_shape[3], 1], result[1]), a,
                int_constant(2), int_constant(3)).result
            products = torch_ops.AtenMulTensorOp(vtensor_type(list(b_shape), result[1]), column,
                                                 b).result
            none = none_constant()
            total = torch_ops.AtenSumDimIntListOp(op.results[0].type, products,
                                                  int_list_construct([int_constant(2)]),
                                                  bool_constant(True), none).result
        rewriter.replace_op(op, [total])
        return True

    def selection_as_gather(self, op, rewriter) -> bool:
        """A slice of an x that is also read whole, taking one row (``x[:, s]``)
        or every step-th row (a row per sequence of a flattened ``[B*L, H]``),
        on an outer axis, with every row provably inside x ->
        index_select(x, d, rows)."""
        piece = typed(op)
        source, axis = piece.self_, constant_int(piece.dim)
        shape, result = vtensor_shape(source.type), vtensor_shape(op.results[0].type)
        if axis is None or shape is None or result is None or len(users(source)) < 2:
            return False
        if shape[1] == "i1":
            return False  # a mask: read by no projection (the module's docstring)
        axis %= len(shape[0])
        step = constant_int(piece.step)
        one_row = result[0][axis] == 1 and step == 1
        if axis == len(shape[0]) - 1 or not (one_row or (step is None or step > 1)):
            return False
        start, end = self.analysis.scalar(piece.start), self.analysis.scalar(piece.end)
        dims = self.analysis.dims.get(source)
        if start is None or end is None or dims is None or dims[axis] is None:
            return False
        # Rows from start on, a positive step apart, before end: inside x when
        # start is a row of x and (for several rows) end does not pass x's size.
        if not self.is_row(start, dims[axis]):
            return False  # may be out of range: the slice would clamp, a gather would not
        end_value = piece.end
        if not one_row and not self.nonnegative(dims[axis] - end):
            # An end past every size (x[s::step]) stops at x's size.
            largest = self.analysis.max_of(dims[axis])
            if largest is None or not end.is_number or end < largest:
                return False
            with ir.InsertionPoint(op), op.location:
                end_value = self.scalars.build(dims[axis])
            if end_value is None:
                return False
        count = result[0][axis]
        with ir.InsertionPoint(op), op.location:
            index_type = vtensor_type([count], "si64")
            constant = constant_int(piece.start)
            if one_row and constant is not None:
                index = torch_ops.ValueTensorLiteralOp(ir.DenseElementsAttr.get_splat(
                    ir.RankedTensorType.get([1], ir.IntegerType.get_signed(64)),
                    ir.IntegerAttr.get(ir.IntegerType.get_signed(64), constant))).result
            else:
                none = none_constant()
                index = torch_ops.AtenArangeStartStepOp(index_type, piece.start, end_value,
                                                        piece.step, int_constant(4), none, none,
                                                        none).result
            rows = torch_ops.AtenIndexSelectOp(op.results[0].type, source, piece.dim, index).result
        rewriter.replace_op(op, [rows])
        return True

    def rows_of_shared_projection(self, op, rewriter) -> bool:
        """addmm(b, rows(x), W) beside addmm(b, x, W) -> rows(addmm(b, x, W)),
        rows a selection on axis 0 (mm alike), W a constant: CSE makes the
        second product the first."""
        x, weight, _ = _projection_operands(op)
        rows = defining_op(x)
        if stored_literal(weight) is None or rows is None:
            return False
        if not is_a(rows, torch_ops.AtenSliceTensorOp, torch_ops.AtenIndexSelectOp):
            return False
        if constant_int(typed(rows).dim) != 0:
            return False
        source = typed(rows).self_
        whole = None
        # The twin reads the same operands as op but for x: compared by position.
        lhs_at = 1 if is_a(op, torch_ops.AtenAddmmOp) else 0
        for user in users(source):
            if (user.name == op.name and user.results[0] != op.results[0] and
                    len(user.operands) == len(op.operands) and user.operands[lhs_at] == source and
                    all(user.operands[i] == op.operands[i]
                        for i in range(len(op.operands)) if i != lhs_at)):
                whole = user
                break
        if whole is None:
            return False
        operands = list(op.operands)
        operands[lhs_at] = source
        with ir.InsertionPoint(op), op.location:
            product = rebuilt(op, operands, [whole.results[0].type]).result
            selected = rebuilt(rows, [product, *rows.operands[1:]], [op.results[0].type]).result
        rewriter.replace_op(op, [selected])
        return True

    def whole_weight_projection(self, op, rewriter) -> bool:
        """addmm(b[s], x, W[:, s]) with W and b constants -> addmm(b, x, W)[:, s]
        (mm alike)."""
        x, sliced_weight, sliced_bias = _projection_operands(op)
        weight = _constant_column_slice(sliced_weight, 1)
        result = vtensor_shape(op.results[0].type)
        if weight is None or result is None:
            return False
        whole_weight, start, end, step = weight
        operands = [x, whole_weight]
        if sliced_bias is not None:  # addmm
            bias = _constant_column_slice(sliced_bias, 0)
            if bias is None or bias[1:] != (start, end, step):
                return False
            if vtensor_shape(bias[0].type)[0][0] != vtensor_shape(whole_weight.type)[0][1]:
                return False
            operands = [bias[0]] + operands + [typed(op).beta, typed(op).alpha]
        columns = vtensor_shape(whole_weight.type)[0][1]
        with ir.InsertionPoint(op), op.location:
            whole = rebuilt(op, operands,
                            [vtensor_type([result[0][0], columns], result[1])]).result
            sliced = torch_ops.AtenSliceTensorOp(op.results[0].type, whole, int_constant(1),
                                                 int_constant(start), int_constant(end),
                                                 int_constant(step)).result
        rewriter.replace_op(op, [sliced])
        return True


    def few_rows_projection(self, op, rewriter) -> bool:
        """linear(x, W, b), mm(x, W) or addmm(b, x, W) (unit factors) where x has a
        dynamic row count of at most one data tile (16) -> a broadcast multiply and
        a sum over K, which IREE does not data-tile. Likewise a static row count
        of at most a tile, or one vector (a linear of a 1-d x), against a weight
        of a dynamic column count N (a weight that is an input): IREE 3.13's data
        tiling of ``[1, K] @ [K, N]`` returned the product padded to 8 columns
        where it had a second user, and softmax over it read the padding
        (``linear_cross_entropy`` off by 0.05). With ``kernel_products``, a
        product with a constant weight stays: anyshape's kernel computes it."""
        name = op.name
        x, weight, bias = _projection_operands(op)
        x_shape, w_shape = vtensor_shape(x.type), vtensor_shape(weight.type)
        if self.kernel_products and x_shape is not None and x_shape[1] == "f32" \
                and len(x_shape[0]) == 2 and computed_from_constants(weight):
            return False  # the kernel takes float32 rows (iree/kernels/linear_rows.py's _routable)
        result = vtensor_shape(op.results[0].type)
        if x_shape is None or w_shape is None or result is None:
            return False
        vector = len(x_shape[0]) == 1 and name == "torch.aten.linear"
        if len(x_shape[0]) != 2 and not vector or len(w_shape[0]) != 2 or \
                x_shape[1] != result[1]:
            return False
        if name == "torch.aten.addmm" and any(constant_int(v) != 1
                                               for v in (typed(op).beta, typed(op).alpha)):
            return False
        n = result[0][-1]
        rows = [sympy.Integer(1)] if vector else self.analysis.dims.get(x)
        if rows is None or rows[0] is None:
            return False
        if rows[0].is_Integer:
            if n is not None or int(rows[0]) > _ROWS_PER_TILE:
                return False  # static rows against static columns data-tile (and compile) fine
        else:
            largest = self.analysis.max_of(rows[0])
            if largest is None or largest > _ROWS_PER_TILE:
                return False
        dtype = x_shape[1]
        k = x_shape[0][-1]
        m = None if vector else x_shape[0][0]
        transposed = name == "torch.aten.linear"  # W is [N, K]
        with ir.InsertionPoint(op), op.location:
            if vector:  # [1, K] * [N, K] -> [N, K], summed over K (axis 1)
                column = _unsqueeze(x, 0, [1, k], dtype)
                products = _multiply([n, k], dtype, column, weight)
                axis, summed_sizes = 1, [n]
            elif transposed:  # [M, 1, K] * [N, K] -> [M, N, K], summed over K (axis 2)
                column = _unsqueeze(x, 1, [m, 1, k], dtype)
                products = _multiply([m, n, k], dtype, column, weight)
                axis, summed_sizes = 2, [m, n]
            else:  # [M, K, 1] * [K, N] -> [M, K, N], summed over K (axis 1)
                column = _unsqueeze(x, 2, [m, k, 1], dtype)
                products = _multiply([m, k, n], dtype, column, weight)
                axis, summed_sizes = 1, [m, n]
            summed = torch_ops.AtenSumDimIntListOp(vtensor_type(summed_sizes, dtype), products,
                                                   int_list_construct([int_constant(axis)]),
                                                   bool_constant(False), none_constant()).result
            if bias is not None and not is_none(bias):
                summed = torch_ops.AtenAddTensorOp(op.results[0].type, summed, bias,
                                                   int_constant(1)).result
        rewriter.replace_op(op, [summed])
        return True


# A data tile's rows on this CPU (IREE packs f32 matmul LHS in 16-row tiles
# with AVX-512): a matmul with at most this many rows gains nothing from it.
_ROWS_PER_TILE = 16


def _projection_operands(op: ir.Operation) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """x, W and the bias (None for mm) of ``linear(x, W, b)``, ``mm(x, W)`` or
    ``addmm(b, x, W)``, read by their names in each."""
    projection = typed(op)
    if is_a(op, torch_ops.AtenLinearOp):
        return projection.input, projection.weight, projection.bias
    if is_a(op, torch_ops.AtenAddmmOp):
        return projection.mat1, projection.mat2, projection.self_
    return projection.self_, projection.mat2, None


def _unsqueeze(x: ir.Value, axis: int, sizes: list, dtype: str) -> ir.Value:
    return torch_ops.AtenUnsqueezeOp(vtensor_type(sizes, dtype), x, int_constant(axis)).result


def _multiply(sizes: list, dtype: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return torch_ops.AtenMulTensorOp(vtensor_type(sizes, dtype), a, b).result


@dataclasses.dataclass
class _Constant:
    """A constant operand: its value, and the ops that compute it, in order."""
    value: ir.Value
    ops: list


def _constant(value: ir.Value) -> _Constant | None:
    """``value`` where it is a literal, or a dtype cast of one (a weight kept
    as stored: ``stored_literal``) with constant arguments."""
    literal = stored_literal(value)
    if literal is None:
        return None
    literal, op = literal.operation, defining_op(value)
    if op == literal:
        return _Constant(value, [literal])
    arguments = [defining_op(v) for v in op.operands[1:]]
    if any(a is None or not a.name.startswith("torch.constant.") for a in arguments):
        return None
    return _Constant(value, [literal, *arguments, op])


def _linear_parts(op: ir.Operation):
    """(weight, bias or None, out features, in features, dtype) of
    ``linear(x, W, b)`` with constant W (and b, when given), else None."""
    linear = typed(op)
    weight = _constant(linear.weight)
    shape = vtensor_shape(linear.weight.type)
    if weight is None or shape is None or len(shape[0]) != 2 or None in shape[0]:
        return None
    bias = None
    if not is_none(linear.bias):
        bias = _constant(linear.bias)
        bias_shape = vtensor_shape(linear.bias.type)
        if bias is None or bias_shape is None or list(bias_shape[0]) != [shape[0][0]]:
            return None
    return weight, bias, shape[0][0], shape[0][1], shape[1]


_HEAD_SPLITS = ("torch.aten.unflatten.int", "torch.aten.view", "torch.aten.reshape",
                "torch.aten._unsafe_view")


def _split_into_heads(op: ir.Operation) -> bool:
    """Every reader of ``op``'s result splits its last axis (into heads), or
    gathers its rows (``_row_gather``) and splits those."""
    readers = users(op.results[0])
    rank = len(vtensor_shape(op.results[0].type)[0])
    return bool(readers) and all(
        _splits_heads(user, rank) or (_row_gather(user) is not None and all(
            _splits_heads(split, 2) for split in users(_row_gather(user).results[0])))
        for user in readers)


def _splits_heads(op: ir.Operation, rank: int) -> bool:
    return (op.name in _HEAD_SPLITS and vtensor_shape(op.results[0].type) is not None
            and len(vtensor_shape(op.results[0].type)[0]) == rank + 1)


def _row_gather(op: ir.Operation) -> ir.Operation | None:
    """``op`` when it is ``index_select(x, 0, rows)`` of a ``[rows, features]``
    value, or the one such reader of ``op = flatten(x, 0, 1)``: rows gathered
    by anyshape-eliminate-padding where attention needs the padded layout."""
    if is_a(op, torch_ops.AtenFlattenUsingIntsOp) and constant_int(typed(op).start_dim) == 0 \
            and constant_int(typed(op).end_dim) == 1 and len(users(op.results[0])) == 1:
        op = users(op.results[0])[0].operation
    if not is_a(op, torch_ops.AtenIndexSelectOp):
        return None
    shape = vtensor_shape(typed(op).self_.type)
    if constant_int(typed(op).dim) != 0 or shape is None or len(shape[0]) != 2:
        return None
    return op.operation


def _concatenated(values: list[ir.Value], result_type: ir.Type, axis: int = 0) -> ir.Value:
    parts = torch_ops.PrimListConstructOp(ir.Type.parse("!torch.list<vtensor>"), list(values)).result
    return torch_ops.AtenCatOp(result_type, parts, int_constant(axis)).result


def fuse_shared_input_linears(block: ir.Block) -> None:
    """linear(x, W1, b1), linear(x, W2, b2), ... with constant weights, each
    split into heads -> slices of linear(x, cat(W1, W2, ...), cat(b1, b2, ...))."""
    groups: list[list] = []  # [x, [(linear, parts), ...]]
    for op in block.operations:
        op = op.operation
        if not is_a(op, torch_ops.AtenLinearOp) or vtensor_shape(op.results[0].type) is None:
            continue
        parts = _linear_parts(op)
        if parts is None or not _split_into_heads(op):
            continue
        x = typed(op).input
        group = next((g for g in groups if g[0] == x), None)
        if group is None:
            groups.append([x, [(op, parts)]])
            continue
        first = group[1][0][1]
        if parts[3:] == first[3:] and (parts[1] is None) == (first[1] is None):
            group[1].append((op, parts))
    for x, members in groups:
        if len(members) < 2:
            continue
        first = members[0][0]
        for _, (weight, bias, *_) in members:
            for constant in (weight, bias):
                for part in [] if constant is None else constant.ops:
                    # Each reads only the ones moved before it; one above
                    # `first` already stays where its other readers see it.
                    if not part.is_before_in_block(first):
                        part.move_before(first)
        out_features = [parts[2] for _, parts in members]
        in_features, dtype = members[0][1][3], members[0][1][4]
        total = sum(out_features)
        result_shape, _ = vtensor_shape(first.results[0].type)
        with ir.InsertionPoint(first), first.location:
            weights = _concatenated([parts[0].value for _, parts in members],
                                    vtensor_type([total, in_features], dtype))
            if members[0][1][1] is None:
                biases = none_constant()
            else:
                biases = _concatenated([parts[1].value for _, parts in members],
                                       vtensor_type([total], dtype))
            fused = torch_ops.AtenLinearOp(vtensor_type([*result_shape[:-1], total], dtype), x,
                                           weights, biases).result
            start = 0
            for (linear, _), width in zip(members, out_features, strict=True):
                columns = torch_ops.AtenSliceTensorOp(linear.results[0].type, fused,
                                                      int_constant(len(result_shape) - 1),
                                                      int_constant(start),
                                                      int_constant(start + width), int_constant(1)).result
                linear.results[0].replace_all_uses_with(columns)
                start += width
        for linear, _ in members:
            linear.erase()
        _gather_rows_once(fused)


def _first_in_block(ops: list) -> ir.Operation:
    """The one of ``ops`` (all in one block) that comes first."""
    first = ops[0]
    for op in ops[1:]:
        if op.is_before_in_block(first):
            first = op
    return first


def _gather_rows_once(fused: ir.Value) -> None:
    """Column slices of ``fused`` whose rows are all gathered by one index
    -> column slices of one gather of ``fused``'s rows: one dispatch instead
    of one per slice, reading whole rows."""
    slices = users(fused)
    gathers = [_row_gather(u) for s in slices for u in users(s.results[0])]
    if not gathers or any(g is None for g in gathers) or len(gathers) != len(slices) \
            or any(typed(g).index != typed(gathers[0]).index for g in gathers):
        return
    shape, dtype = vtensor_shape(fused.type)
    index = typed(gathers[0]).index
    first = _first_in_block(gathers)
    with ir.InsertionPoint(first), first.location:
        rows = fused
        if len(shape) == 3:
            rows = torch_ops.AtenFlattenUsingIntsOp(vtensor_type([None, shape[-1]], dtype), fused,
                                                    int_constant(0), int_constant(1)).result
        count = vtensor_shape(gathers[0].results[0].type)[0][0]
        gathered = torch_ops.AtenIndexSelectOp(vtensor_type([count, shape[-1]], dtype), rows,
                                               int_constant(0), index).result
        for columns, gather in zip(slices, gathers):
            start, end = typed(columns).start, typed(columns).end
            part = torch_ops.AtenSliceTensorOp(gather.results[0].type, gathered, int_constant(1),
                                               start, end, int_constant(1)).result
            gather.results[0].replace_all_uses_with(part)
    for columns, gather in zip(slices, gathers):
        flat = defining_op(typed(gather).self_)
        gather.erase()
        if flat is not None and not flat == columns.operation and not list(flat.results[0].uses):
            flat.erase()
        if not list(columns.results[0].uses):
            columns.erase()


def linear_on_flat_rows(op: ir.Operation, rewriter) -> bool:
    """linear(x[..., K]) with x of rank 3 or more -> unflatten(linear(flatten(x)))."""
    linear = typed(op)
    x = linear.input
    shape, result = vtensor_shape(x.type), vtensor_shape(op.results[0].type)
    if shape is None or result is None or len(shape[0]) < 3:
        return False
    leading, (in_features, dtype) = shape[0][:-1], (shape[0][-1], shape[1])
    rows = None if None in leading else math.prod(leading)
    with ir.InsertionPoint(op), op.location:
        flat = torch_ops.AtenFlattenUsingIntsOp(vtensor_type([rows, in_features], dtype), x,
                                                int_constant(0), int_constant(len(leading) - 1)).result
        product = torch_ops.AtenLinearOp(vtensor_type([rows, result[0][-1]], result[1]), flat,
                                         linear.weight, linear.bias).result
        sizes = [int_constant(size) if size is not None
                 else torch_ops.AtenSizeIntOp(x, int_constant(axis)).result
                 for axis, size in enumerate(leading)]
        unflattened = torch_ops.AtenUnflattenIntOp(op.results[0].type, product, int_constant(0),
                                                   int_list_construct(sizes)).result
    rewriter.replace_op(op, [unflattened])
    return True


def mask_as_contraction_column(op: ir.Operation, rewriter) -> bool:
    """unflatten(bmm(A, B), 0, [b, h]) + M, M one row of N per batch and head
    (``[b|1, h|1, 1, N]``): bmm([A, 1], [B; M]) with one more contraction step."""
    add = typed(op)
    scores, mask = add.self_, add.other
    unflatten = defining_op(scores)
    if not is_a(unflatten, torch_ops.AtenUnflattenIntOp) or \
            constant_int(typed(unflatten).dim) != 0 or constant_int(add.alpha) != 1 or \
            len(users(scores)) != 1:
        return False
    unflatten = typed(unflatten)
    product, batch_sizes = unflatten.self_, list_items(unflatten.sizes)
    bmm = defining_op(product)
    shape, mask_shape = vtensor_shape(scores.type), vtensor_shape(mask.type)
    if not is_a(bmm, torch_ops.AtenBmmOp) or len(users(product)) != 1 or \
            batch_sizes is None or len(batch_sizes) != 2 or shape is None or mask_shape is None:
        return False
    (batch, heads, rows, columns), dtype = shape
    if len(mask_shape[0]) != 4 or mask_shape[0][2] != 1 or mask_shape[1] != dtype or \
            op.results[0].type != scores.type or mask_shape[0][3] != columns:
        return False
    lhs, rhs = typed(bmm).self_, typed(bmm).mat2
    (flat, _, depth), _ = vtensor_shape(lhs.type)
    if depth is None:
        return False
    with ir.InsertionPoint(op), op.location:
        zero, one, two = int_constant(0), int_constant(1), int_constant(2)
        first_column = torch_ops.AtenSliceTensorOp(vtensor_type([flat, rows, 1], dtype), lhs, two,
                                                   zero, one, one).result
        none = none_constant()
        ones = torch_ops.AtenFullLikeOp(first_column.type, first_column, one, none, none, none,
                                        none, none).result
        lhs = _concatenated([lhs, ones], vtensor_type([flat, rows, depth + 1], dtype), 2)
        minus_one = int_constant(-1)
        per_head = torch_ops.AtenExpandOp(vtensor_type([batch, heads, 1, columns], dtype), mask,
                                          int_list_construct([*batch_sizes, minus_one, minus_one]),
                                          bool_constant(False)).result
        mask_row = torch_ops.AtenFlattenUsingIntsOp(vtensor_type([flat, 1, columns], dtype),
                                                    per_head, zero, one).result
        rhs = _concatenated([rhs, mask_row], vtensor_type([flat, depth + 1, columns], dtype), 1)
        result = torch_ops.AtenUnflattenIntOp(scores.type,
                                              torch_ops.AtenBmmOp(product.type, lhs, rhs).result,
                                              zero, unflatten.sizes).result
    rewriter.replace_op(op, [result])
    return True


@register
@dataclasses.dataclass
class DataTilingFormsPass(ModulePass):
    argument = "anyshape-data-tiling-forms"
    description = ("One-row batch matmuls as multiply-reduce over batch and heads, one-row "
                   "slices of tensors also read whole as index_select, projections with a "
                   "column slice of a constant weight on the whole weight, linears of one "
                   "input on concatenated weights, projections of at most a tile of rows "
                   "as multiply-reduce, linears on flattened rows, padding masks as a "
                   "contraction step of the attention scores: forms IREE's data tiling "
                   "compiles well")
    # Products with a constant weight run anyshape's kernel (iree/kernels/linear_rows.py),
    # which computes any row count: those of a few rows stay products.
    kernel_products: bool = False

    def apply(self, module_op):
        for func in functions(module_op):
            fuse_shared_input_linears(func.regions[0].blocks[0])
            analysis = ShapeAnalysis(func)
            rewrites = _Rewrites(analysis, ScalarBuilder(analysis), self.kernel_products)
            apply_patterns(func, [(torch_ops.AtenUnflattenIntOp, rewrites.one_row_bmm),
                                  *[(view, rewrites.one_row_bmm) for view in _RESHAPES],
                                  (torch_ops.AtenSliceTensorOp, rewrites.selection_as_gather),
                                  (torch_ops.AtenAddmmOp, rewrites.whole_weight_projection),
                                  (torch_ops.AtenMmOp, rewrites.whole_weight_projection),
                                  (torch_ops.AtenAddmmOp, rewrites.rows_of_shared_projection),
                                  (torch_ops.AtenMmOp, rewrites.rows_of_shared_projection)])
            # After the rewrites above, which match projections these would replace.
            apply_patterns(func, [(torch_ops.AtenLinearOp, rewrites.few_rows_projection),
                                  (torch_ops.AtenAddmmOp, rewrites.few_rows_projection),
                                  (torch_ops.AtenMmOp, rewrites.few_rows_projection)])
            erase_unused(func)  # the flattened operands and bmm, kept alive by their bindings
            # Last: the rewrites above match linears on [B, L, K].
            apply_patterns(func, [(torch_ops.AtenLinearOp, linear_on_flat_rows),
                                  (torch_ops.AtenAddTensorOp, mask_as_contraction_column)])
            erase_unused(func)


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='data_tiling_one_row_bmm', stage='torch-ir',
        where='_Rewrites.one_row_bmm',
        upstream='With data tiling, unit-dim folding makes a one-row batch matmul (bmm([B*H, 1, '
                 'K], [B*H, K, N])) a batch matvec whose data-tiled packing fails in IREE 3.13 '
                 '("no basis element may be statically non-positive").',
        guard=('test/passes/data-tiling-forms.mlir',
               'test/python/iree/test_data_tiling.py::test_data_tiled_matches_eager'),
        remove_when='(inferred) when IREE > 3.13 data-tiles the one-row form; the pass docstring '
                    'states no removal condition'),
    Workaround(
        name='data_tiling_selection_as_gather', stage='torch-ir',
        where='_Rewrites.selection_as_gather',
        upstream='IREE 3.13 fuses a strided one-row slice of a tensor read whole into the '
                 "projection's dispatch with the operand packing, and that dispatch exceeds the "
                 'stack or vector size limit; as index_select the rows are their own copy.',
        guard=('test/passes/data-tiling-forms.mlir',
               'test/python/iree/test_data_tiling.py::test_data_tiled_matches_eager'),
        remove_when='(inferred) when IREE > 3.13 compiles the fused slice+pack dispatch'),
    Workaround(
        name='data_tiling_whole_weight_projection', stage='torch-ir',
        where='_Rewrites.whole_weight_projection, _Rewrites.rows_of_shared_projection',
        upstream="IREE 3.13 packs a column slice of a constant weight (GPT-2's split c_attn) "
                 "inside the projection's dispatch on every call instead of once at load time, "
                 'and in the last layer that dispatch fails to compile.',
        guard=('test/python/iree/test_data_tiling.py::test_gpt2_qkv_weight_read_whole',
               'test/passes/data-tiling-forms.mlir'),
        remove_when='(inferred) when IREE > 3.13 hoists the packing of a sliced constant weight'),
    Workaround(
        name='data_tiling_fuse_shared_input_linears', stage='torch-ir',
        where='fuse_shared_input_linears',
        upstream='IREE 3.13 propagates each head transpose into its Q/K/V projection, which '
                 "becomes a contraction data tiling leaves untiled (a third of roberta-base's "
                 'matmul work); with that propagation off, packing V fails ("no basis element may'
                 ' be statically non-positive"). Linears sharing an input become one.',
        guard=('test/passes/data-tiling-forms.mlir',
               'test/python/iree/test_data_tiling.py::test_data_tiled_matches_eager'),
        remove_when='(inferred) when IREE > 3.13 data-tiles per-head projections'),
    Workaround(
        name='data_tiling_few_rows_projection', stage='torch-ir',
        where='_Rewrites.few_rows_projection',
        upstream="IREE 3.13's data tiling fails on a projection of a dynamic row count of at most"
                 ' one tile ("failed to resolve workgroup count hint", or past the stack limit), '
                 'and tiled [1, K] @ [K, N] with dynamic N returned the product padded to 8 '
                 'columns where it had a second user (linear_cross_entropy off by 0.05).',
        guard=('test/python/test_opinfo_floor.py::test_floor[nn.functional.linear_cross_entropy-float32-0]',
               'test/passes/data-tiling-forms.mlir'),
        remove_when='(inferred) when IREE > 3.13 data-tiles few-row and dynamic-N projections '
                    'correctly'),
    Workaround(
        name='data_tiling_linear_on_flat_rows', stage='torch-ir',
        where='linear_on_flat_rows',
        upstream="IREE's GlobalOptimization data tiling sees a linear on [B, L, K] as a batch "
                 'matmul with the weight broadcast and packs that broadcast on every call (half '
                 "of roberta-base's time at L = 32). Performance workaround.",
        guard='test/passes/data-tiling-forms.mlir',
        remove_when='(inferred) when IREE packs a broadcast constant weight once'),
    Workaround(
        name='data_tiling_mask_as_contraction_column', stage='torch-ir',
        where='mask_as_contraction_column',
        upstream='With a dynamic length IREE 3.13 does not fuse the unpacking of data-tiled '
                 'attention scores with the addition of a [B, 1, 1, L] mask (a pass over [B, H, '
                 'L, L] of its own, ~9% of roberta-base at L = 512). Performance workaround.',
        guard=('test/python/passes/test_defer_softmax_normalization.py::test_padding_mask_is_a_contraction_step',
               'test/passes/data-tiling-forms.mlir'),
        remove_when='(inferred) when IREE fuses the unpack with the elementwise mask add'),
)
