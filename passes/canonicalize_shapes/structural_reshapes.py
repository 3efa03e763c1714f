"""Views and expands whose size lists are built from shape values, rewritten by structure.

- ``view``/``reshape`` whose input and output dims (from the shape analysis)
  group into merges of adjacent dims and splits of one dim become
  ``aten.flatten.using_ints`` / ``aten.unflatten.int``: a collapse or expand
  with a known grouping, instead of a size list torch-mlir must interpret at
  run time (its lowering of dynamic size lists is a known source of failures
  and, with dynamic batch and sequence together, of wrong results:
  torch-mlir issue 4743).
- a view no such grouping explains (``x.reshape(-1, 4)`` of ``[B, L]``) views
  the input flattened to one dim, behind a run-time check of its element
  count (``view_through_one_dim``).
"""

from __future__ import annotations

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import (constant_int, int_constant, int_list_construct,
                                                list_items)
from anyshape.passes.torch_ir.shape_analysis import ShapeAnalysis, same_size
from anyshape.passes.torch_ir.values import rebuilt, vtensor_type
from anyshape.stages import Workaround


def _divides(a, b) -> bool:
    """a divides b, as polynomials in the dim symbols (sizes are positive)."""
    _, denominator = sympy.fraction(sympy.cancel(b / a))
    return denominator == 1


def group_dims(in_dims: list, out_dims: list) -> list[tuple[list[int], list[int]]] | None:
    """Contiguous groups of input and output dims with equal products."""
    groups, i, j = [], 0, 0
    while i < len(in_dims) and j < len(out_dims):
        gi, gj = [i], [j]
        a, b = in_dims[i], out_dims[j]
        while not same_size(a, b):
            if _divides(a, b) and i + len(gi) < len(in_dims):
                a = a * in_dims[i + len(gi)]
                gi.append(i + len(gi))
            elif _divides(b, a) and j + len(gj) < len(out_dims):
                b = b * out_dims[j + len(gj)]
                gj.append(j + len(gj))
            else:
                return None
        groups.append((gi, gj))
        i, j = i + len(gi), j + len(gj)
    rest_in, rest_out = in_dims[i:], out_dims[j:]
    if any(d != 1 for d in rest_in + rest_out) or not groups and (rest_in or rest_out):
        return None  # the second: unit dims alone, such as a 0-d tensor viewed as [1, 1, 1]
    if groups and (rest_in or rest_out):  # trailing unit dims join the last group
        last_in, last_out = groups[-1]
        groups[-1] = (last_in + list(range(i, len(in_dims))), last_out + list(range(j, len(out_dims))))
    return groups


def _static(expr) -> int | None:
    return int(expr) if expr is not None and expr.is_Integer else None


def rewrite_view(op, rewriter, analysis: ShapeAnalysis, builder) -> bool:
    """``view``/``reshape`` by computed sizes -> flatten/unflatten of the dim
    groups whose products match (sizes from the argument dims, never -1); a
    view through one dim asserts at run time that the element count fits."""
    source = op.operands[0]
    in_dims = analysis.dims.get(source)
    sizes = list_items(op.operands[1])  # view's size, reshape's shape
    result = vtensor_shape(op.results[0].type)
    if in_dims is None or any(d is None for d in in_dims) or sizes is None or result is None:
        return False
    constants = [constant_int(v) for v in sizes]
    if all(c is not None and c >= 0 for c in constants):
        if all(d.is_Integer for d in in_dims):
            return False  # static in and out: nothing for torch-mlir to infer at run time
        # Dynamic dims into static sizes ([L, B, 5] into [25, 5]): torch-mlir paired
        # the input's first dim with the 25.
        return view_through_one_dim(op, rewriter, analysis, in_dims, sizes, constants)
    out_dims = analysis.target_dims(sizes, in_dims)
    if out_dims is None or len(out_dims) != len(result[0]):
        return False
    groups = group_dims(in_dims, out_dims)
    if groups is None or any(len(gi) > 1 and len(gj) > 1 for gi, gj in groups):
        return view_through_one_dim(op, rewriter, analysis, in_dims, sizes, constants)
    if any(analysis.root_of(symbol) is None for d in out_dims for symbol in d.free_symbols):
        return False  # a size that cannot be rebuilt from argument dims
    dtype = result[1]
    current, dims = source, list(in_dims)
    with ir.InsertionPoint(op), op.location:
        for gi, gj in reversed(groups):  # right to left: earlier indices stay valid
            start = gi[0]
            if len(gi) > 1:
                dims = dims[:start] + [sympy.Mul(*dims[start:gi[-1] + 1])] + dims[gi[-1] + 1:]
                current = torch_ops.AtenFlattenUsingIntsOp(
                    vtensor_type([_static(d) for d in dims], dtype), current, int_constant(start),
                                                           int_constant(gi[-1])).result
                analysis.dims[current] = list(dims)
            elif len(gj) > 1:
                parts = [out_dims[k] for k in gj]
                values = []
                for d in parts:
                    # Every size explicit: torch-mlir's unflatten lowering computes a
                    # wrong (negative) size for -1 next to a dynamic size.
                    value = int_constant(_static(d)) if _static(d) is not None else builder.build(d)
                    if value is None:
                        return False
                    values.append(value)
                size_list = int_list_construct(values)
                dims = dims[:start] + parts + dims[start + 1:]
                current = torch_ops.AtenUnflattenIntOp(vtensor_type([_static(d) for d in dims], dtype),
                                                       current, int_constant(start), size_list).result
                analysis.dims[current] = list(dims)
        if current.type != op.results[0].type:
            current = torch_ops.TensorStaticInfoCastOp(op.results[0].type, current).result
            analysis.dims[current] = list(dims)
    rewriter.replace_op(op, [current])  # all groups 1 -> 1: the view is its input
    return True


def view_through_one_dim(op, rewriter, analysis: ShapeAnalysis, in_dims: list,
                         sizes: list[ir.Value], constants: list[int | None]) -> bool:
    """``view(flatten(x), sizes)`` for a view whose dims do not group.

    torch-mlir's view lowering pairs the dynamic dims of input and output by
    position when it cannot tell better: ``x.reshape(-1, 4)`` of a ``[3, 8]``
    input came out ``[3, 8]`` (eager: ``[6, 4]``), with or without anyshape's
    passes. From one dim, its lowering is a plain expand, which is right. What
    eager checks (the element count fits the sizes) IREE would not: a
    ``torch.runtime.assert`` checks it, naming the view and its sizes.
    """
    if len(in_dims) < 2 or len(sizes) < 2 or constants.count(-1) > 1 or \
            any(c is not None and c < -1 for c in constants):
        return False
    source, result = op.operands[0], op.results[0]
    dtype = vtensor_shape(result.type)[1]
    numel = sympy.Mul(*in_dims)
    with ir.InsertionPoint(op), op.location:
        count = torch_ops.AtenNumelOp(source).result
        known = [v for v, c in zip(sizes, constants) if c != -1]
        product = known[0] if known else int_constant(1)
        for value in known[1:]:
            product = torch_ops.AtenMulIntOp(product, value).result
        if -1 in constants:  # the inferred size: the count must be a multiple of the rest
            left = torch_ops.AtenRemainderIntOp(count, product).result
            right = int_constant(0)
        else:
            left, right = count, product
        fits = torch_ops.AtenEqIntOp(left, right).result
        shown = ", ".join("?" if c is None else str(c) for c in constants)
        torch_ops.RuntimeAssertOp(
            fits, f"view/reshape to [{shown}] at {_where(op)}: the input's {len(in_dims)}-d "
                  f"shape has a number of elements these sizes cannot hold (as eager's "
                  f"'shape is invalid for input of size')")
        flat = torch_ops.AtenFlattenUsingIntsOp(vtensor_type([_static(numel)], dtype), source,
                                                int_constant(0), int_constant(len(in_dims) - 1)).result
        analysis.dims[flat] = [numel]
        # Constant sizes in the type too: the lowering reads a [?, ?] result of
        # view(-1, 4) as static sizes [-1 * 4] ("expected sizes to be non-negative").
        refined = vtensor_type([c if c is not None and c >= 0 else None for c in constants],
                               dtype)
        view = rebuilt(op, [flat, op.operands[1]], [refined]).result
        if refined != result.type:
            view = torch_ops.TensorStaticInfoCastOp(result.type, view).result
    rewriter.replace_op(op, [view])
    return True


def _where(op) -> str:
    from anyshape.mlir import format_location

    return format_location(op.location) or "an unknown location"


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='view_as_flatten_unflatten', stage='torch-ir',
        where='rewrite_view',
        upstream="torch-mlir's lowering of view/reshape by dynamic size lists is a known source "
                 'of failures and, with dynamic batch and sequence together, of wrong results '
                 '(torch-mlir issue 4743); also its unflatten lowering computes a wrong '
                 '(negative) size for -1 next to a dynamic size, so every size is made explicit.',
        guard=('test/passes/canonicalize-shapes-reshapes.mlir',
               'test/python/test_op_coverage.py::test_matches_eager[reshape-view-heads]',
               'test/python/test_op_coverage.py::test_matches_eager[reshape-flatten-unflatten]'),
        remove_when='(inferred) when torch-mlir issue 4743 is fixed and its unflatten lowering '
                    'handles -1 beside a dynamic size'),
    Workaround(
        name='view_through_one_dim', stage='torch-ir',
        where='view_through_one_dim',
        upstream="torch-mlir's view lowering pairs the dynamic dims of input and output by "
                 'position when it cannot tell better: x.reshape(-1, 4) of a [3, 8] input came '
                 'out [3, 8] (eager [6, 4]); dynamic dims into static sizes paired wrongly or '
                 'failed ("\'tensor.collapse_shape\' op expected dimension 1 of collapsed type to '
                 'be static value of 0").',
        guard=('test/python/runtime/test_run_errors.py::test_reshape_of_two_dynamic_dims_is_exact',
               'test/python/test_op_coverage.py::test_matches_eager[reshape-merge-dynamic-split-static]',
               'test/python/test_opinfo_floor.py::test_floor[reshape-float32-0]'),
        remove_when="(inferred) when torch-mlir's view lowering infers dynamic groupings "
                    'correctly'),
)
