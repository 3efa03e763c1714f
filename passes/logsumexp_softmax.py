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

A softmax that converts its input's dtype (``softmax(x, dtype=torch.float32)``
of float16 scores, as BLOOM's attention computes) converts it first, as torch
does, then is rewritten the same way. Left as a ``linalg.softmax``, one over
an unbounded axis at a static batch failed in IREE's CPU codegen, which
sized its row buffer from the axis' unsigned maximum (``memref<1x-1xf32>``:
BLOOM's decode functions).
"""

from __future__ import annotations

import dataclasses

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.torch_ir.constants import bool_constant, int_constant, none_constant
from anyshape.passes.torch_ir.ops import (PROBABILITY_SOFTMAXES, SCALAR_TYPE_OF,
                                          shifted_exponentials, softmax_computation)
from anyshape.passes.torch_ir.values import functions, vtensor_type
from anyshape.stages import Workaround


def softmax_as_logsumexp(op: ir.Operation, rewriter) -> bool:
    """``softmax(x)`` over a dynamic axis -> ``exp((x - max) - log(sum(exp(x - max))))``
    (``x`` first converted to the dtype the softmax computes in)."""
    computation = softmax_computation(op)
    if computation is None:
        return False
    axis, computed = computation
    x = op.operands[0]
    sizes, dtype = vtensor_shape(x.type)
    if sizes[axis] is not None:
        return False
    with ir.InsertionPoint(op), op.location:
        if computed != dtype:
            x = torch_ops.AtenToDtypeOp(vtensor_type(sizes, computed), x,
                                        int_constant(SCALAR_TYPE_OF[computed]),
                                        bool_constant(False), bool_constant(False),
                                        none_constant()).result
        parts = shifted_exponentials(x, axis)
        reduced = parts.total.type
        log_total = torch_ops.AtenLogOp(reduced, parts.total).result
        log_probabilities = torch_ops.AtenSubTensorOp(x.type, parts.shifted, log_total,
                                                      int_constant(1)).result
        result = torch_ops.AtenExpOp(x.type, log_probabilities).result
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
            apply_patterns(func, [(name, softmax_as_logsumexp) for name in PROBABILITY_SOFTMAXES])


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='logsumexp_softmax', stage='torch-ir',
        where='softmax_as_logsumexp (anyshape-logsumexp-softmax)',
        upstream='IREE 3.13 raises the usual softmax form into one linalg.softmax dispatch whose '
                 'CPU codegen, with a dynamic reduced axis, recomputes the row max for every 16 '
                 "columns (roberta-base's attention softmax 20x its static counterpart at L = "
                 "512); and at a static batch over an unbounded axis its codegen sizes the row "
                 "buffer from the axis' unsigned maximum (memref<1x-1xf32>) and fails (BLOOM's "
                 "decode functions, whose softmax converts float16 scores to float32 or names "
                 "float32 of float32 ones).",
        guard=('test/python/passes/test_logsumexp_softmax.py::test_softmax_over_dynamic_axis_is_rewritten',
               'test/python/generation/test_generate.py::test_bloom_decodes_with_its_own_functions',
               'test/passes/logsumexp-softmax.mlir'),
        remove_when='(inferred) when IREE > 3.13 tiles a dynamic-axis softmax as well as a static'
                    ' one'),
)
