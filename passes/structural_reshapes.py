"""Views and expands whose size lists are built from shape values, rewritten by structure.

- ``view``/``reshape`` whose input and output dims (from the shape analysis)
  group into merges of adjacent dims and splits of one dim become
  ``aten.flatten.using_ints`` / ``aten.unflatten.int``: a collapse or expand
  with a known grouping, instead of a size list torch-mlir must interpret at
  run time (its lowering of dynamic size lists is a known source of failures
  and, with dynamic batch and sequence together, of wrong results:
  torch-mlir issue 4743).
"""

from __future__ import annotations

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes.shape_analysis import ShapeAnalysis
from anyshape.passes.torch_ir import constant_int, int_constant, list_items, vtensor_type


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
        while sympy.simplify(a - b) != 0:
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
    if any(d != 1 for d in rest_in + rest_out):
        return None
    if groups and (rest_in or rest_out):  # trailing unit dims join the last group
        last_in, last_out = groups[-1]
        groups[-1] = (last_in + list(range(i, len(in_dims))), last_out + list(range(j, len(out_dims))))
    return groups


def _static(expr) -> int | None:
    return int(expr) if expr is not None and expr.is_Integer else None


def rewrite_view(op, rewriter, analysis: ShapeAnalysis, builder) -> bool:
    source = op.operands[0]
    in_dims = analysis.dims.get(source)
    sizes = list_items(op.operands[1])
    result = vtensor_shape(op.results[0].type)
    if in_dims is None or any(d is None for d in in_dims) or sizes is None or result is None:
        return False
    constants = [constant_int(v) for v in sizes]
    if all(c is not None and c >= 0 for c in constants):
        return False  # fully static sizes: nothing for torch-mlir to infer at run time
    out_dims = analysis.target_dims(sizes, in_dims)
    if out_dims is None or len(out_dims) != len(result[0]):
        return False
    groups = group_dims(in_dims, out_dims)
    if groups is None or any(len(gi) > 1 and len(gj) > 1 for gi, gj in groups):
        return False
    if any(analysis.root_of(symbol) is None for d in out_dims for symbol in d.free_symbols):
        return False  # a size that cannot be rebuilt from argument dims
    dtype = result[1]
    current, dims = source, list(in_dims)
    with ir.InsertionPoint(op), op.location:
        for gi, gj in reversed(groups):  # right to left: earlier indices stay valid
            start = gi[0]
            if len(gi) > 1:
                dims = dims[:start] + [sympy.Mul(*dims[start:gi[-1] + 1])] + dims[gi[-1] + 1:]
                current = ir.Operation.create(
                    "torch.aten.flatten.using_ints",
                    results=[vtensor_type([_static(d) for d in dims], dtype)],
                    operands=[current, int_constant(start), int_constant(gi[-1])]).result
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
                size_list = ir.Operation.create(
                    "torch.prim.ListConstruct", results=[ir.Type.parse("!torch.list<int>")],
                    operands=values).result
                dims = dims[:start] + parts + dims[start + 1:]
                current = ir.Operation.create(
                    "torch.aten.unflatten.int",
                    results=[vtensor_type([_static(d) for d in dims], dtype)],
                    operands=[current, int_constant(start), size_list]).result
                analysis.dims[current] = list(dims)
        if current.type != op.results[0].type:
            current = ir.Operation.create("torch.tensor_static_info_cast",
                                          results=[op.results[0].type], operands=[current]).result
            analysis.dims[current] = list(dims)
    rewriter.replace_op(op, [current])  # all groups 1 -> 1: the view is its input
    return True
