"""Iotas found, and lookups indexed by an iota turned into slices: position
embeddings are read, not gathered.

A slice ``buffer[..., 0:size(x, d)]`` of a constant whose values are
``0, 1, ..., n-1`` along the sliced axis (HuggingFace BERT's ``position_ids``
buffer) is ``anyshape.iota_like x {dim = d}``, unsqueezed to the buffer's rank,
when ``size(x, d) <= n``.

``embedding(table, idx)`` where ``idx`` is ``anyshape.iota_like(x, d)``, possibly
through ``+ 0``, ``unsqueeze`` and ``expand`` (GPT-2's ``arange(past, past + L)``
with ``past = 0``, unsqueezed and broadcast to the batch), reads rows
``0 .. size(x, d) - 1`` in order: it is ``table[0 : size(x, d)]`` with the same
unsqueezes and expands applied. ``index_select(table, 0, iota)`` likewise, and
``gather(table, dim, idx)`` where ``idx`` is an iota along ``dim`` with every
other axis of size 1 is ``table[0:1, ..., 0:size(x, d), ..., 0:1]``.
Only when the rows are known to exist (the dim's maximum is at most the
table's row count): otherwise eager would fail with an index error, and a
slice would silently clamp.
"""

from __future__ import annotations

import sympy

from anyshape.dialects import iota_like, vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import (bool_constant, constant_int, int_constant,
                                                int_list_construct, list_items)
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, same_size, size_query
from anyshape.passes.torch_ir.values import (defining_op, dtype_code, is_a, static_info_cast, typed,
                                             vtensor_type)


def _trace_to_iota(index: ir.Value):
    """(iota op, [('unsqueeze', dim) | ('expand', list value), ...] outermost last) or None."""
    steps = []
    value = index
    while True:
        op = defining_op(value)
        if op is None:
            return None
        if op.name == "anyshape.iota_like":
            return op, list(reversed(steps))
        if is_a(op, torch_ops.AtenUnsqueezeOp):
            dim = constant_int(typed(op).dim)
            if dim is None or dim < 0:
                return None
            steps.append(("unsqueeze", dim))
        elif is_a(op, torch_ops.AtenExpandOp):
            steps.append(("expand", typed(op).size))
        elif is_a(op, torch_ops.AtenAddScalarOp):
            if constant_int(typed(op).other) != 0 or constant_int(typed(op).alpha) != 1:
                return None
        elif not is_a(op, torch_ops.TensorStaticInfoCastOp):
            return None
        value = op.operands[0]


def _slice(value: ir.Value, axis: int, end: ir.Value, dims: list, dtype: str) -> ir.Value:
    return torch_ops.AtenSliceTensorOp(vtensor_type(dims, dtype), value, int_constant(axis),
                                       int_constant(0), end, int_constant(1)).result


def _arange_axis(literal: ir.Operation) -> int | None:
    """The axis along which a constant holds 0..n-1, every other axis of size 1."""
    values = literal.attributes["value"]
    if not isinstance(values, ir.DenseIntElementsAttr):
        return None  # resource blobs are not readable here (weights, not indices)
    shape = ir.ShapedType(values.type).shape
    long_axes = [i for i, n in enumerate(shape) if n != 1]
    if len(long_axes) != 1 or values.is_splat:
        return None
    if any(values[i] != i for i in range(shape[long_axes[0]])):
        return None
    return long_axes[0]


def rewrite_arange_constant_slice(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """``buffer[:size(x, d)]`` of a constant holding 0..n-1 (BERT's
    ``position_ids``) -> ``iota_like(x, d)``, where the length never exceeds n
    (beyond it the slice would clamp)."""
    source, axis_value, start, end, step = op.operands
    literal = defining_op(source)
    if not is_a(literal, torch_ops.ValueTensorLiteralOp):
        return False
    if constant_int(start) != 0 or constant_int(step) != 1:
        return False
    query = size_query(end)
    axis, arange_axis = constant_int(axis_value), _arange_axis(literal)
    if query is None or axis is None or arange_axis is None:
        return False
    sizes, dtype = vtensor_shape(source.type)
    if axis % len(sizes) != arange_axis or dtype_code(dtype) is None:
        return False
    ref, dim = query
    length = analysis.dim(ref, dim)
    bound = analysis.max_of(length)
    if bound is None or bound > sizes[arange_axis]:
        return False  # the slice would clamp; an iota would not
    length_size = vtensor_shape(ref.type)[0][dim]
    with ir.InsertionPoint(op), op.location:
        value = iota_like(ref, dim, vtensor_type([length_size], dtype))
        analysis.dims[value] = [length]
        value, exprs = _unit_axes_around(value, [length_size], [length], dtype, {arange_axis},
                                         len(sizes), analysis)
        value = static_info_cast(value, op.results[0].type)
    analysis.dims[value] = exprs
    rewriter.replace_op(op, [value])
    return True


def _unit_axes_around(value, sizes, exprs, dtype, kept: set, rank: int, analysis):
    """``value`` unsqueezed to ``rank`` with its axes at the ``kept`` positions
    (in order) and size 1 everywhere else; returns it and its dims."""
    sizes, exprs = list(sizes), list(exprs)
    for position in range(rank):
        if position not in kept:
            sizes.insert(position, 1)
            exprs.insert(position, sympy.Integer(1))
            value = torch_ops.AtenUnsqueezeOp(vtensor_type(sizes, dtype), value,
                                              int_constant(position)).result
            analysis.dims[value] = list(exprs)
    return value, exprs


def rewrite_iota_gather(op, rewriter, analysis: ShapeAnalysis, builder) -> bool:
    """gather(table, dim, idx) with idx an iota along dim, 1 everywhere else."""
    gather = typed(op)
    table, axis_value, index = gather.self_, gather.dim, gather.index
    found, axis = _iota_axis(index, analysis), constant_int(axis_value)
    table_shape = vtensor_shape(table.type)
    if found is None or axis is None or table_shape is None:
        return False
    length, iota_axis = found
    rank = len(table_shape[0])
    axis %= rank
    bound = analysis.max_of(length)
    if iota_axis != axis or bound is None or table_shape[0][axis] is None or bound > table_shape[0][axis]:
        return False
    table_dims = analysis.dims.get(table)
    sizes, dtype = table_shape
    with ir.InsertionPoint(op), op.location:
        end = builder.build(length)
        if end is None or table_dims is None:
            return False
        value, dims, exprs = table, list(sizes), list(table_dims)
        for position in range(rank):
            if position == axis:
                dims[position] = int(length) if length.is_Integer else None
                exprs[position] = length
            elif sizes[position] != 1:
                dims[position], exprs[position] = 1, sympy.Integer(1)
            else:
                continue
            value = _slice(value, position, end if position == axis else int_constant(1), dims, dtype)
            analysis.dims[value] = list(exprs)
        value = static_info_cast(value, op.results[0].type)
    rewriter.replace_op(op, [value])
    return True


def rewrite_iota_lookup(op, rewriter, analysis: ShapeAnalysis, builder) -> bool:
    """``embedding(table, iota)`` or ``index_select(table, 0, iota)`` (the iota
    possibly unsqueezed or expanded) reads rows 0..L-1 in order: the slice
    ``table[:L]``, where L never exceeds the table's rows (eager would raise)."""
    if is_a(op, torch_ops.AtenEmbeddingOp):
        table, index = typed(op).weight, typed(op).indices
    else:  # index_select(table, dim, index)
        if constant_int(typed(op).dim) != 0:
            return False
        table, index = typed(op).self_, typed(op).index
    traced = _trace_to_iota(index)
    table_shape = vtensor_shape(table.type)
    if traced is None or table_shape is None or table_shape[0][0] is None:
        return False
    if is_a(op, torch_ops.AtenIndexSelectOp) and traced[1]:
        return False
    iota, steps = traced
    ref = iota.operands[0]
    length = analysis.dim(ref, ir.IntegerAttr(iota.attributes["dim"]).value)
    bound = analysis.max_of(length)
    if bound is None or bound > table_shape[0][0]:
        return False
    sizes, dtype = table_shape
    with ir.InsertionPoint(op), op.location:
        end = builder.build(length)
        if end is None:
            return False
        row_count = None if not length.is_Integer else int(length)
        dims = [row_count] + sizes[1:]
        value = torch_ops.AtenSliceTensorOp(vtensor_type(dims, dtype), table, int_constant(0),
                                            int_constant(0), end, int_constant(1)).result
        for kind, arg in steps:
            if kind == "unsqueeze":
                dims = dims[:arg] + [1] + dims[arg:]
                value = torch_ops.AtenUnsqueezeOp(vtensor_type(dims, dtype), value,
                                                  int_constant(arg)).result
            else:  # expand to the index's sizes, the table's row width kept (-1)
                items = list_items(arg)
                if items is None:
                    return False
                size_list = int_list_construct(items + [int_constant(-1)])
                expanded = vtensor_shape(op.results[0].type)[0]
                dims = expanded[:len(items)] + dims[len(items):]
                false = bool_constant(False)
                value = torch_ops.AtenExpandOp(vtensor_type(dims, dtype), value, size_list, false).result
        if value.type != op.results[0].type:
            value = torch_ops.TensorStaticInfoCastOp(op.results[0].type, value).result
    rewriter.replace_op(op, [value])
    return True


def _iota_axis(index: ir.Value, analysis: ShapeAnalysis):
    """(length expr, axis) when ``index`` is an iota unsqueezed to size 1 on
    every other axis; None otherwise."""
    traced = _trace_to_iota(index)
    shape = vtensor_shape(index.type)
    if traced is None or shape is None or any(kind != "unsqueeze" for kind, _ in traced[1]):
        return None
    iota, steps = traced
    axis = 0
    for _, position in steps:
        axis += position <= axis
    if any(n != 1 for i, n in enumerate(shape[0]) if i != axis):
        return None
    return analysis.dim(iota.operands[0], ir.IntegerAttr(iota.attributes["dim"]).value), axis


def rewrite_iota_index(op, rewriter, analysis: ShapeAnalysis) -> bool:
    """``x[iota_0, ..., iota_k]`` (advanced indexing, each index the full range of
    its axis of ``x`` placed on its own axis, in order) is ``x`` with the other
    axes unsqueezed: HuggingFace's vmapped mask builders index this way."""
    source, indices = typed(op).self_, list_items(typed(op).indices)
    dims, result = analysis.dims.get(source), vtensor_shape(op.results[0].type)
    if indices is None or dims is None or result is None or len(indices) != len(dims):
        return False
    axes = []
    for position, index in enumerate(indices):
        found = _iota_axis(index, analysis)
        if found is None or len(vtensor_shape(index.type)[0]) != len(result[0]):
            return False
        length, axis = found
        if not same_size(length, dims[position]):
            return False  # not the whole axis
        axes.append(axis)
    if axes != sorted(set(axes)):
        return False
    sizes, dtype = vtensor_shape(source.type)
    with ir.InsertionPoint(op), op.location:
        value, exprs = _unit_axes_around(source, sizes, dims, dtype, set(axes), len(result[0]),
                                         analysis)
        value = static_info_cast(value, op.results[0].type)
    analysis.dims[value] = exprs
    rewriter.replace_op(op, [value])
    return True
