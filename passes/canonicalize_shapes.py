"""``anyshape-canonicalize-shapes``: shape facts explicit and cheap in torch-dialect IR.

Rewrites so far:
- **dynamic iota**: ``aten.arange(end)``, ``arange.start(0, end)`` and
  ``arange.start_step(0, end, 1)`` with an integer dtype, where ``end`` is
  ``aten.size.int x, d``, become ``anyshape.iota_like x {dim = d}``: the
  length is read from ``x`` where the values are produced, not carried as a
  scalar into a generic arange (Gluon-NLP's ``arange_like``). Other aranges
  keep their exact semantics.
"""

import dataclasses

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes import ModulePass, apply_patterns, register
from anyshape.passes.torch_ir import (constant_int, dtype_code, is_none, size_query,
                                      static_info_cast, vtensor_type)

# arange overload -> (index of start or None for 0, index of end, index of step or
# None for 1, index of dtype)
_ARANGE_OPERANDS = {
    "torch.aten.arange": (None, 0, None, 1),
    "torch.aten.arange.start": (0, 1, None, 2),
    "torch.aten.arange.start_step": (0, 1, 2, 3),
}


def arange_to_iota(op, rewriter) -> bool:
    start_at, end_at, step_at, dtype_at = _ARANGE_OPERANDS[op.operation.name]
    operands = op.operands
    if start_at is not None and constant_int(operands[start_at]) != 0:
        return False
    if step_at is not None and constant_int(operands[step_at]) != 1:
        return False
    query = size_query(operands[end_at])
    result = vtensor_shape(op.results[0].type)
    if query is None or result is None or len(result[0]) != 1:
        return False
    code = dtype_code(result[1])
    dtype = operands[dtype_at]
    if code is None or not (is_none(dtype) or constant_int(dtype) == code):
        return False  # a float arange, or a dtype that disagrees with the result
    ref, dim = query
    length = vtensor_shape(ref.type)[0][dim]
    with ir.InsertionPoint(op), op.location:
        iota = ir.Operation.create(
            "anyshape.iota_like", results=[vtensor_type([length], result[1])], operands=[ref],
            attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)}).result
        replacement = static_info_cast(iota, op.results[0].type)
    rewriter.replace_op(op, [replacement])
    return True


@register
@dataclasses.dataclass
class CanonicalizeShapesPass(ModulePass):
    argument = "anyshape-canonicalize-shapes"
    description = "Make shape facts explicit: aranges over a tensor's size become anyshape.iota_like"

    def apply(self, module_op):
        apply_patterns(module_op, [(name, arange_to_iota) for name in _ARANGE_OPERANDS])
