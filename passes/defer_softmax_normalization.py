"""anyshape-defer-softmax-normalization: ``softmax(S) @ V`` as ``(exp(S - max) @ V) / sum``.

Attention multiplies its probabilities, a softmax over the key axis, by the
values. With a dynamic key axis IREE 3.13 compiles that product badly on CPU:
the softmax's last elementwise step (the exponential of anyshape's logsumexp
form, or the division of the usual one) fuses into the product as a producer,
which then runs as an untiled contraction that recomputes it (roberta-base's
biggest dispatch at L = 512), and with a static batch data tiling fails on it.

Dividing by the row sums after the product instead (as flash attention does)
leaves ``E = exp(S - max)`` with two readers, the row sums and the product, so
IREE materializes it once, packs it, and the product becomes a data-tiled
``batch_mmt4d``; the division then touches ``L x D`` values instead of
``L x L``. The result is the same up to rounding: ``sum_j e_j v_j / sum_j e_j``.

torch's ``scaled_dot_product_attention`` decomposition zeroes the rows whose
scores are all ``-inf`` (``where(not(any(S != -inf)), 0, softmax(S))``). That
guard moves below the product as ``where(max == -inf, 0, ...)``: the row max is
``-inf`` exactly when every score is (a NaN score makes both tests false), and
the ``any`` reduction over ``[B, H, L, L]`` is gone.

Matched: a softmax over the last axis of a dynamic size, computed in its input
dtype, optionally guarded as above and optionally flattened over its leading
(batch) dims, whose only reader is the left operand of ``bmm``/``matmul``.
Softmaxes over static axes are left to IREE, which compiles them well.
"""

from __future__ import annotations

import dataclasses
import math

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.torch_ir.constants import (constant_bool, constant_float, constant_int,
                                                float_constant)
from anyshape.passes.torch_ir.ops import (PROBABILITY_SOFTMAXES, shifted_exponentials,
                                          softmax_axis)
from anyshape.passes.torch_ir.values import (defining_op, erase_unused, functions, is_a, rebuilt,
                                             typed, users, vtensor_type)
from anyshape.stages import Workaround


def _defined_by(value: ir.Value, name: str) -> ir.Operation | None:
    op = defining_op(value)
    return op if op is not None and op.name == name else None


def _all_minus_inf_rows(condition: ir.Value, scores: ir.Value, axis: int) -> bool:
    """``condition`` is ``not(any(not(scores == -inf), axis, keepdim))``: per row,
    whether every score along ``axis`` is ``-inf``."""
    outer = _defined_by(condition, "torch.aten.logical_not")
    reduction = outer and _defined_by(typed(outer).self_, "torch.aten.any.dim")
    inner = reduction and _defined_by(typed(reduction).self_, "torch.aten.logical_not")
    compare = inner and _defined_by(typed(inner).self_, "torch.aten.eq.Scalar")
    if compare is None or typed(compare).self_ != scores:
        return False
    rank = len(vtensor_shape(scores.type)[0])
    reduced_axis = constant_int(typed(reduction).dim)
    return (constant_float(typed(compare).other) == -math.inf and reduced_axis is not None
            and reduced_axis % rank == axis and constant_bool(typed(reduction).keepdim) is True)


def _zeros_like(value: ir.Value, of: ir.Value) -> bool:
    """``value`` is ``full_like(of, 0)`` (with no dtype change)."""
    fill = _defined_by(value, "torch.aten.full_like")
    if fill is None or typed(fill).self_ != of or fill.results[0].type != of.type:
        return False
    zero = constant_int(typed(fill).fill_value)
    return zero == 0 or constant_float(typed(fill).fill_value) == 0.0


def _leading_flatten(op: ir.Operation) -> tuple[ir.Value, ir.Value] | None:
    """(start, end) operands of a ``flatten`` that merges only dims before the last two."""
    flatten = typed(op)
    rank = len(vtensor_shape(flatten.self_.type)[0])
    start, end = constant_int(flatten.start_dim), constant_int(flatten.end_dim)
    if start is None or end is None:
        return None
    start, end = start % rank, end % rank
    return (flatten.start_dim, flatten.end_dim) if start <= end <= rank - 3 else None


@dataclasses.dataclass
class _Probabilities:
    """How the product's left operand derives from one softmax."""
    scores: ir.Value
    guard: ir.Operation | None  # where(all -inf row, 0, softmax)
    flatten: ir.Operation | None
    flatten_dims: tuple[ir.Value, ir.Value] | None


def _probabilities(lhs: ir.Value) -> _Probabilities | None:
    value, flatten, dims, guard = lhs, None, None, None
    op = defining_op(value)
    if is_a(op, torch_ops.AtenFlattenUsingIntsOp):
        dims = _leading_flatten(op)
        if dims is None or len(users(typed(op).self_)) != 1:
            return None
        flatten, value = op, typed(op).self_
        op = defining_op(value)
    if is_a(op, torch_ops.AtenWhereSelfOp):
        guard_op = typed(op)
        zeros, probabilities = guard_op.self_, guard_op.other
        if not _zeros_like(zeros, probabilities) or len(users(zeros)) != 1:
            return None
        guard, value = op, probabilities
        op = defining_op(value)
    if op is None or op.name not in PROBABILITY_SOFTMAXES:
        return None
    axis = softmax_axis(op)
    sizes = vtensor_shape(value.type)[0]
    if axis is None or axis != len(sizes) - 1 or sizes[axis] is not None:
        return None
    scores = typed(op).self_
    if guard is not None and not _all_minus_inf_rows(typed(guard).condition, scores, axis):
        return None
    # The softmax is read by the product alone (through the guard, whose zeros
    # are shaped after it): otherwise it would be computed besides.
    readers = users(value)
    expected = 1 if guard is None else 2
    if len(readers) != expected or (guard is not None and set(r.name for r in readers) != {
            "torch.aten.where.self", "torch.aten.full_like"}):
        return None
    return _Probabilities(scores, guard, flatten, dims)


def _flattened(value: ir.Value, plan: _Probabilities) -> ir.Value:
    """``value`` flattened as the probabilities were."""
    if plan.flatten is None:
        return value
    sizes, dtype = vtensor_shape(value.type)
    start, end = (constant_int(d) % len(sizes) for d in plan.flatten_dims)
    merged = sizes[start:end + 1]
    size = None if None in merged else math.prod(merged)
    flat_type = vtensor_type(sizes[:start] + [size] + sizes[end + 1:], dtype)
    return torch_ops.AtenFlattenUsingIntsOp(flat_type, value, *plan.flatten_dims).result


def defer_normalization(op: ir.Operation, rewriter) -> bool:
    """``softmax(S) @ V`` over a dynamic key axis -> ``(exp(S - max) @ V) / sum``,
    the all -inf row guard (if any) after the division."""
    lhs, values = op.operands[0], op.operands[1]
    if is_a(op, torch_ops.AtenMatmulOp) and (
            len(vtensor_shape(lhs.type)[0]) < 2 or len(vtensor_shape(values.type)[0]) < 2):
        return False
    plan = _probabilities(lhs)
    if plan is None or len(users(lhs)) != 1:
        return False
    scores = plan.scores
    sizes = vtensor_shape(scores.type)[0]
    with ir.InsertionPoint(op), op.location:
        parts = shifted_exponentials(scores, len(sizes) - 1)
        row_max, total = parts.row_max, parts.total
        product = rebuilt(op, [_flattened(parts.exponentials, plan), values]).result
        result = torch_ops.AtenDivTensorOp(op.results[0].type, product, _flattened(total, plan)).result
        if plan.guard is not None:
            minus_inf = float_constant(-math.inf)
            all_minus_inf = torch_ops.AtenEqScalarOp(vtensor_type(sizes[:-1] + [1], "i1"), row_max,
                                                     minus_inf).result
            fill = defining_op(typed(plan.guard).self_)
            zeros = torch_ops.AtenFullLikeOp(result.type, result, *list(fill.operands)[1:]).result
            result = torch_ops.AtenWhereSelfOp(result.type, _flattened(all_minus_inf, plan), zeros,
                                               result).result
    rewriter.replace_op(op, [result])
    return True


@register
@dataclasses.dataclass
class DeferSoftmaxNormalizationPass(ModulePass):
    argument = "anyshape-defer-softmax-normalization"
    description = ("softmax(S) @ V over a dynamic axis as (exp(S - max) @ V) / sum: the "
                   "exponentials are materialized once and the product is data-tiled")

    def apply(self, module_op):
        for func in functions(module_op):
            apply_patterns(func, [(torch_ops.AtenBmmOp, defer_normalization),
                                  (torch_ops.AtenMatmulOp, defer_normalization)])
            erase_unused(func)  # the softmax and its guard, kept alive by their bindings


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='defer_softmax_normalization', stage='torch-ir',
        where='defer_normalization (anyshape-defer-softmax-normalization)',
        upstream="With a dynamic key axis IREE 3.13 fuses the softmax's last elementwise step "
                 'into the attention product, which runs as an untiled contraction recomputing it'
                 " (roberta-base's biggest dispatch at L = 512), and with a static batch data "
                 'tiling fails on it. Performance/compile-failure workaround.',
        guard=('test/python/passes/test_defer_softmax_normalization.py::test_product_reads_unnormalized_exponentials',
               'test/passes/defer-softmax-normalization.mlir'),
        remove_when='(inferred) when IREE > 3.13 compiles softmax(S) @ V with a dynamic key axis '
                    'well'),
)
