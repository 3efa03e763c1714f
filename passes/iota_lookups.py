"""Lookups indexed by an iota become slices: position embeddings are read, not gathered.

``embedding(table, idx)`` where ``idx`` is ``anyshape.iota_like(x, d)``, possibly
through ``+ 0``, ``unsqueeze`` and ``expand`` (GPT-2's ``arange(past, past + L)``
with ``past = 0``, unsqueezed and broadcast to the batch), reads rows
``0 .. size(x, d) - 1`` in order: it is ``table[0 : size(x, d)]`` with the same
unsqueezes and expands applied. ``index_select(table, 0, iota)`` likewise.
Only when the rows are known to exist (the dim's maximum is at most the
table's row count): otherwise eager would fail with an index error, and a
slice would silently clamp.
"""

from __future__ import annotations

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes.shape_analysis import ShapeAnalysis
from anyshape.passes.torch_ir import (constant_int, defining_op, int_constant, list_items,
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
        if op.name == "torch.aten.unsqueeze":
            dim = constant_int(op.operands[1])
            if dim is None or dim < 0:
                return None
            steps.append(("unsqueeze", dim))
        elif op.name == "torch.aten.expand":
            steps.append(("expand", op.operands[1]))
        elif op.name == "torch.aten.add.Scalar":
            if constant_int(op.operands[1]) != 0 or constant_int(op.operands[2]) != 1:
                return None
        elif op.name != "torch.tensor_static_info_cast":
            return None
        value = op.operands[0]


def rewrite_iota_lookup(op, rewriter, analysis: ShapeAnalysis, builder) -> bool:
    if op.operation.name == "torch.aten.embedding":
        table, index = op.operands[0], op.operands[1]
    else:  # index_select(table, dim, index)
        if constant_int(op.operands[1]) != 0:
            return False
        table, index = op.operands[0], op.operands[2]
    traced = _trace_to_iota(index)
    table_shape = vtensor_shape(table.type)
    if traced is None or table_shape is None or table_shape[0][0] is None:
        return False
    if op.operation.name == "torch.aten.index_select" and traced[1]:
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
        value = ir.Operation.create(
            "torch.aten.slice.Tensor", results=[vtensor_type(dims, dtype)],
            operands=[table, int_constant(0), int_constant(0), end, int_constant(1)]).result
        for kind, arg in steps:
            if kind == "unsqueeze":
                dims = dims[:arg] + [1] + dims[arg:]
                value = ir.Operation.create(
                    "torch.aten.unsqueeze", results=[vtensor_type(dims, dtype)],
                    operands=[value, int_constant(arg)]).result
            else:  # expand to the index's sizes, the table's row width kept (-1)
                items = list_items(arg)
                if items is None:
                    return False
                size_list = ir.Operation.create(
                    "torch.prim.ListConstruct", results=[ir.Type.parse("!torch.list<int>")],
                    operands=items + [int_constant(-1)]).result
                expanded = vtensor_shape(op.results[0].type)[0]
                dims = expanded[:len(items)] + dims[len(items):]
                false = ir.Operation.create("torch.constant.bool", results=[
                    ir.Type.parse("!torch.bool")], attributes={"value": ir.BoolAttr.get(False)}).result
                value = ir.Operation.create(
                    "torch.aten.expand", results=[vtensor_type(dims, dtype)],
                    operands=[value, size_list, false]).result
        if value.type != op.results[0].type:
            value = ir.Operation.create("torch.tensor_static_info_cast",
                                        results=[op.results[0].type], operands=[value]).result
    rewriter.replace_op(op, [value])
    return True
