"""anyshape-logsumexp-softmax: a softmax over a dynamic axis as ``exp(x - logsumexp(x))``.

IREE 3.13 raises the usual softmax form (max, ``exp(x - max)``, its sum, a
division) into one ``linalg.softmax`` dispatch. When the reduced axis is
dynamic, its CPU codegen fuses the max reduction into the loop over tiles of
the sum, so the row maximum is recomputed for every 16 columns: the work grows
with ``L / 16`` and the softmax of roberta-base's ``[B, 12, L, L]`` scores
took 20x its static counterpart at L = 512 (``bench/profile_dispatches.py``).

Written as ``exp((x - max) - log(sum(exp(x - max))))`` nothing is raised:
the two reductions become their own dispatches, and the final exponential
fuses into its consumer (an attention product that
anyshape-defer-softmax-normalization left as it was). The log is subtracted from
``x - max``, not ``max + log(sum)`` from ``x``: rows of large scores (a mask
of -1e4) would otherwise lose the low bits of ``x`` to the subtraction
(errors of 1e-3 in the tests). The values are the same up to rounding,
including the NaN rows of a fully masked input (``max = -inf``). Softmaxes
over static axes are left alone: IREE tiles those well.
"""

from __future__ import annotations

import dataclasses

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.torch_ir import (bool_constant, constant_int, create, defining_op, functions,
                                      int_constant, is_none, none_constant, vtensor_type)

_FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


def softmax_axis(op: ir.Operation) -> int | None:
    """The reduced axis (non-negative) when the softmax computes in its input's dtype."""
    x, dim = op.operands[0], op.operands[1]
    if op.name == "torch.aten.softmax.int" and not is_none(op.operands[2]):
        return None  # a dtype conversion inside the softmax
    if op.name == "torch.aten._softmax":
        half_to_float = defining_op(op.operands[2])
        if half_to_float is None or half_to_float.name != "torch.constant.bool" or \
                ir.BoolAttr(half_to_float.attributes["value"]).value:
            return None
    axis = constant_int(dim)
    shape = vtensor_shape(x.type)
    if axis is None or shape is None:
        return None
    sizes, dtype = shape
    axis = axis + len(sizes) if axis < 0 else axis
    if not 0 <= axis < len(sizes) or dtype not in _FLOAT_DTYPES:
        return None
    return axis


@dataclasses.dataclass
class ShiftedExponentials:
    row_max: ir.Value       # max over the axis, kept as a size-1 dim
    shifted: ir.Value       # x - row_max
    exponentials: ir.Value  # exp(x - row_max)
    total: ir.Value         # their sum over the axis, kept as a size-1 dim


def shifted_exponentials(x: ir.Value, axis: int) -> ShiftedExponentials:
    """The softmax's parts up to its sum, at the current insertion point."""
    sizes, dtype = vtensor_shape(x.type)
    reduced = vtensor_type([1 if i == axis else s for i, s in enumerate(sizes)], dtype)
    axes = ir.Operation.create("torch.prim.ListConstruct",
                               results=[ir.Type.parse("!torch.list<int>")],
                               operands=[int_constant(axis)]).result
    keepdim = bool_constant(True)
    row_max = create("torch.aten.amax", reduced, x, axes, keepdim)
    shifted = create("torch.aten.sub.Tensor", x.type, x, row_max, int_constant(1))
    exponentials = create("torch.aten.exp", x.type, shifted)
    total = create("torch.aten.sum.dim_IntList", reduced, exponentials, axes, keepdim,
                   none_constant())
    return ShiftedExponentials(row_max, shifted, exponentials, total)


def softmax_as_logsumexp(op: ir.Operation, rewriter) -> bool:
    axis = softmax_axis(op)
    if axis is None:
        return False
    x = op.operands[0]
    sizes, dtype = vtensor_shape(x.type)
    if sizes[axis] is not None:
        return False
    with ir.InsertionPoint(op), op.location:
        parts = shifted_exponentials(x, axis)
        reduced = parts.total.type
        log_total = create("torch.aten.log", reduced, parts.total)
        result = create("torch.aten.exp", x.type, create("torch.aten.sub.Tensor", x.type,
                                                         parts.shifted, log_total, int_constant(1)))
    rewriter.replace_op(op, [result])
    return True


@register
@dataclasses.dataclass
class LogsumexpSoftmaxPass(ModulePass):
    argument = "anyshape-logsumexp-softmax"
    description = ("Softmax over a dynamic axis as exp(x - logsumexp(x)), which IREE does not "
                   "raise into the linalg.softmax that its CPU codegen tiles badly")

    def apply(self, module_op):
        for func in functions(module_op):
            apply_patterns(func, [("torch.aten.softmax.int", softmax_as_logsumexp),
                                  ("torch.aten._softmax", softmax_as_logsumexp)])
