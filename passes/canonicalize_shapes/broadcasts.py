"""Size-list broadcasts rewritten over the rooted dims.

torch-mlir lowers ``expand(x, [.., n, ..])`` with a check that ``x``'s size
there is 1 or ``n``; between two tensors' dims that are equal by construction
that is a run-time ``cf.assert "mismatched size for broadcast"`` nothing can
fold (and a size list built from shape values for IREE to interpret). So:

- an ``expand``/``broadcast_to`` to the sizes its input already has is its input;
- where an item of the size list is provably the input's own size, it becomes
  ``-1`` ("keep"): only the dims that really broadcast are named;
- a lookup of an expanded index, ``embedding(table, expand(idx))``, looks up
  ``idx`` and expands after (the rows are gathered once, not once per batch);
- an expanded operand of an elementwise op whose other operands already have
  the expanded sizes is used unexpanded: the op broadcasts it implicitly
  (Gluon-NLP's "broadcast by the reference tensor, not by a size");
- an op whose only tensor operand of any size is an expand runs before the
  expand, on the smaller tensor;
- ``a & b`` where every element of ``a`` is provably true is ``b``, expanded
  to the result's sizes where ``a`` broadcast it. transformers (5.x) builds
  the padding mask of encoder attention as ``[B, 1, L, L]`` by and-ing the
  ``[B, 1, 1, L]`` padding with ``arange(L)[..., None] >= 0``; with these
  rewrites the scores are masked by ``[B, 1, 1, L]``, which
  ``anyshape-data-tiling-forms`` makes a contraction step of the score
  product (roberta-base, data tiling on, L = 512: about 1150 ms per call
  before, 830 ms after, ``bench/profile_dispatches.py``).
"""

from __future__ import annotations

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import (bool_constant, constant_int, int_constant,
                                                int_list_construct, list_items)
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, same_size
from anyshape.passes.torch_ir.values import (defining_op, is_a, rebuilt, static_info_cast, typed,
                                             vtensor_type)


def _expand_parts(op, analysis: ShapeAnalysis):
    """(source, source dims, [size expr per item]) of an expand/broadcast_to, or None."""
    source = op.operands[0]
    in_dims = analysis.dims.get(source)
    items = list_items(typed(op).size)
    if in_dims is None or items is None or len(items) < len(in_dims):
        return None
    return source, in_dims, items


def rewrite_expand(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """``expand(x, sizes)`` (or ``broadcast_to``) naming only x's own sizes is x;
    otherwise each size equal to x's own dim becomes -1, so only the dims that
    broadcast are named (no run-time check against another tensor's dim)."""
    parts = _expand_parts(op, analysis)
    if parts is None:
        return False
    source, in_dims, items = parts
    new_axes = len(items) - len(in_dims)
    exprs = [analysis.scalar(v) for v in items]
    keep = [i >= new_axes and (exprs[i] == -1 or same_size(exprs[i], in_dims[i - new_axes]))
            for i in range(len(items))]
    if all(keep):
        with ir.InsertionPoint(op), op.location:
            value = static_info_cast(source, op.results[0].type)
        analysis.dims.setdefault(value, list(in_dims))
        rewriter.replace_op(op, [value])
        return True
    renamed = [i for i, k in enumerate(keep) if k and constant_int(items[i]) != -1]
    if not renamed:
        return False
    with ir.InsertionPoint(op), op.location:
        minus_one = int_constant(-1)
        size_list = int_list_construct([minus_one if i in renamed else v for i, v in enumerate(items)])
        expanded = rebuilt(op, [source, size_list, *op.operands[2:]]).result
    analysis.dims[expanded] = analysis.dims.get(op.results[0])
    rewriter.replace_op(op, [expanded])
    return True


def sink_expand_below_embedding(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """embedding(table, expand(idx, sizes)) -> expand(embedding(table, idx), sizes + [-1])."""
    embedding = typed(op)
    index_op = defining_op(embedding.indices)
    if not is_a(index_op, torch_ops.AtenExpandOp):
        return False
    index_op = typed(index_op)
    index, items = index_op.self_, list_items(index_op.size)
    index_shape, table_shape = vtensor_shape(index.type), vtensor_shape(embedding.weight.type)
    index_dims, table_dims = analysis.dims.get(index), analysis.dims.get(embedding.weight)
    if None in (items, index_shape, table_shape, index_dims, table_dims):
        return False
    result_shape = vtensor_shape(op.results[0].type)
    with ir.InsertionPoint(op), op.location:
        looked_up = torch_ops.AtenEmbeddingOp(
            vtensor_type(index_shape[0] + table_shape[0][-1:], result_shape[1]),
            embedding.weight, index, embedding.padding_idx, embedding.scale_grad_by_freq,
            embedding.sparse).result
        size_list = int_list_construct([*items, int_constant(-1)])
        expanded = torch_ops.AtenExpandOp(op.results[0].type, looked_up, size_list,
                                          index_op.implicit).result
    analysis.dims[looked_up] = list(index_dims) + [table_dims[-1]]
    analysis.dims[expanded] = analysis.dims.get(op.results[0])
    rewriter.replace_op(op, [expanded])
    return True


def drop_implied_expand(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """An elementwise op broadcasts an expanded operand itself when its other
    operands already carry the expanded sizes."""
    result_dims = analysis.dims.get(op.results[0])
    if result_dims is None or None in result_dims:
        return False
    operands = list(op.operands)
    tensors = [i for i, v in enumerate(operands) if vtensor_shape(v.type) is not None]
    for position in tensors:
        expand = defining_op(operands[position])
        if not is_a(expand, torch_ops.AtenExpandOp, torch_ops.AtenBroadcastToOp):
            continue
        source = expand.operands[0]
        shapes = [analysis.dims.get(source if i == position else operands[i]) for i in tensors]
        if any(s is None for s in shapes):
            continue
        implied = ShapeAnalysis.broadcast(shapes, len(result_dims))
        if implied is None or not all(same_size(a, b) for a, b in zip(implied, result_dims)):
            continue
        static = [vtensor_shape(operands[i].type)[0] for i in tensors]
        if any(len(s) > len(result_dims) for s in static):
            continue
        new_operands = operands[:position] + [source] + operands[position + 1:]
        with ir.InsertionPoint(op), op.location:
            replacement = rebuilt(op, new_operands).result
        analysis.dims[replacement] = list(result_dims)
        rewriter.replace_op(op, [replacement])
        return True
    return False


def gather_from_expanded_table(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """gather(expand(t), d, idx), t of size 1 on every axis but d, reads t's one
    row at idx: embedding(t as a column, idx) with the unit axis squeezed. The
    table is never broadcast, and no size list is built (RoBERTa's buffered
    token type ids, gathered by position ids)."""
    gather = typed(op)
    expand = defining_op(gather.self_)
    axis, index = constant_int(gather.dim), gather.index
    if not is_a(expand, torch_ops.AtenExpandOp) or axis is None:
        return False
    table = expand.operands[0]
    table_shape, index_shape = vtensor_shape(table.type), vtensor_shape(index.type)
    if table_shape is None or index_shape is None:
        return False
    sizes, dtype = table_shape
    axis %= len(sizes)
    expanded = vtensor_shape(expand.results[0].type)[0]
    if sizes[axis] is None or expanded[axis] != sizes[axis] or len(expanded) != len(sizes):
        return False  # the gathered axis itself is broadcast, or ranks differ
    if any(n != 1 for i, n in enumerate(sizes) if i != axis):
        return False
    rows, index_dims = sizes[axis], analysis.dims.get(index)
    if index_dims is None:
        return False
    with ir.InsertionPoint(op), op.location:
        column = table
        if len(sizes) > 1:
            column = torch_ops.AtenFlattenUsingIntsOp(
                vtensor_type([rows], dtype), table, int_constant(0),
                int_constant(len(sizes) - 1)).result
        column = torch_ops.AtenUnsqueezeOp(vtensor_type([rows, 1], dtype), column,
                                           int_constant(1)).result
        false = bool_constant(False)
        looked_up = torch_ops.AtenEmbeddingOp(vtensor_type(index_shape[0] + [1], dtype), column,
                                              index, int_constant(-1), false, false).result
        value = torch_ops.AtenSqueezeDimOp(vtensor_type(index_shape[0], dtype), looked_up,
                                           int_constant(-1)).result
        value = static_info_cast(value, op.results[0].type)
    analysis.dims[looked_up] = list(index_dims) + [sympy.Integer(1)]
    analysis.dims[value] = list(index_dims)
    rewriter.replace_op(op, [value])
    return True


# Ops that rearrange or repeat a tensor's elements without computing new values:
# the values they produce are among their input's.
_VALUE_PRESERVING = {
    "torch.aten.unsqueeze", "torch.aten.squeeze.dim", "torch.aten.expand",
    "torch.aten.broadcast_to", "torch.aten.permute", "torch.aten.transpose.int",
    "torch.aten.flatten.using_ints", "torch.aten.unflatten.int", "torch.aten.slice.Tensor",
    "torch.tensor_static_info_cast",
}


def _lower_bound(value: ir.Value) -> int | None:
    """A lower bound of every element of an integer tensor derived from an iota
    (positions are 0..n-1), or None."""
    op = defining_op(value)
    if op is None:
        return None
    if op.name == "anyshape.iota_like":
        return 0
    if op.name in _VALUE_PRESERVING:
        return _lower_bound(op.operands[0])
    if is_a(op, torch_ops.AtenAddScalarOp):
        step, alpha = constant_int(typed(op).other), constant_int(typed(op).alpha)
        base = _lower_bound(op.operands[0])
        return None if None in (step, alpha, base) or alpha < 0 else base + alpha * step
    return None


def all_true(value: ir.Value) -> bool:
    """Whether ``value`` is a boolean tensor whose every element is provably true:
    a splat ``true`` literal, ``x >= c`` / ``x > c`` for x bounded below
    (``arange(L) >= 0``, transformers' mask functions), or an and of those."""
    op = defining_op(value)
    if op is None:
        return False
    if is_a(op, torch_ops.ValueTensorLiteralOp):
        attr = op.attributes["value"]
        return (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat
                and str(attr.get_splat_value()) == "true")
    if is_a(op, torch_ops.AtenGeScalarOp, torch_ops.AtenGtScalarOp):
        bound, threshold = _lower_bound(typed(op).self_), constant_int(typed(op).other)
        if bound is None or threshold is None:
            return False
        return bound >= threshold if is_a(op, torch_ops.AtenGeScalarOp) else bound > threshold
    if is_a(op, torch_ops.AtenBitwiseAndTensorOp, torch_ops.AtenLogicalAndOp):
        return all(all_true(v) for v in op.operands)
    return op.name in _VALUE_PRESERVING and all_true(op.operands[0])


def and_with_all_true(op, rewriter, analysis: ShapeAnalysis, builder) -> bool:
    """``a & b`` with every element of ``a`` true is ``b``, broadcast to the
    result's sizes (named only where ``b`` is smaller)."""
    result = op.results[0]
    result_dims, result_shape = analysis.dims.get(result), vtensor_shape(result.type)
    a, b = typed(op).self_, typed(op).other
    for kept, other in ((b, a), (a, b)):
        kept_shape, kept_dims = vtensor_shape(kept.type), analysis.dims.get(kept)
        if not all_true(other) or kept_shape is None or kept_dims is None or \
                result_dims is None or kept_shape[1] != result_shape[1]:
            continue
        offset = len(result_dims) - len(kept_dims)
        if offset < 0:
            continue
        same = [i >= offset and same_size(kept_dims[i - offset], result_dims[i])
                for i in range(len(result_dims))]
        named = [result_dims[i] for i, s in enumerate(same) if not s]
        if any(d is None or not (d.is_Integer or (d.is_Symbol and analysis.root_of(d) is not None))
               for d in named):
            continue  # a broadcast size not known as a constant or an argument's dim
        with ir.InsertionPoint(op), op.location:
            if all(same):
                replacement = static_info_cast(kept, result.type)
            else:
                sizes = [int_constant(-1) if s else builder.build(result_dims[i])
                         for i, s in enumerate(same)]
                size_list = int_list_construct(sizes)
                replacement = torch_ops.AtenExpandOp(result.type, kept, size_list,
                                                     bool_constant(False)).result
        analysis.dims[replacement] = list(result_dims)
        rewriter.replace_op(op, [replacement])
        return True
    return False


def sink_expand_below_scalars(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """op(expand(x, sizes), s...) -> expand(op(x, s...), sizes) when every other
    tensor operand is 0-d: the op runs on x's elements once, and an op further
    down that broadcasts anyway can take the smaller result (drop_implied_expand)."""
    operands = list(op.operands)
    tensors = [i for i, v in enumerate(operands) if vtensor_shape(v.type) is not None]
    expanded = [i for i in tensors if defining_op(operands[i]) is not None
                and is_a(defining_op(operands[i]), torch_ops.AtenExpandOp)]
    if len(expanded) != 1 or any(len(vtensor_shape(operands[i].type)[0]) != 0
                                 for i in tensors if i != expanded[0]):
        return False
    expand = defining_op(operands[expanded[0]])
    source, result = expand.operands[0], op.results[0]
    source_shape, result_shape = vtensor_shape(source.type), vtensor_shape(result.type)
    if source_shape is None or result_shape is None:
        return False
    with ir.InsertionPoint(op), op.location:
        small = rebuilt(op, operands[:expanded[0]] + [source] + operands[expanded[0] + 1:],
                        [vtensor_type(source_shape[0], result_shape[1])]).result
        replacement = torch_ops.AtenExpandOp(result.type, small, *list(expand.operands)[1:]).result
    if source in analysis.dims:
        analysis.dims[small] = list(analysis.dims[source])
    if result in analysis.dims:
        analysis.dims[replacement] = list(analysis.dims[result])
    rewriter.replace_op(op, [replacement])
    return True
