"""``linalg.det`` checked at run time: an error, not NaN, where torch-mlir's lowering breaks down.

torch-mlir lowers ``linalg.det`` as Gaussian elimination without row
pivoting: any zero pivot makes the result NaN, for singular matrices (eager:
0) and for regular ones alike (``[[0, 1], [1, 0]]``: eager -1), on anyshape
and the plain stack. Pivoting needs a loop over a dynamic size, which the
exported graph cannot hold, so ``check_det`` keeps the lowering where it is
right and makes the rest an error: after each float ``linalg.det`` it asserts
that a result is a number wherever its matrix is finite, which IREE keeps
(``--iree-opt-strip-assertions=false``) and the runtime raises as a
``RunError`` with this message. Guarded by ``test_det_with_a_zero_pivot``
(test_edge_value_math.py).
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

_DETS = (aten.linalg_det.default, aten._linalg_det.default, aten.det.default)
MESSAGE = ("linalg.det: a matrix has a zero pivot in torch-mlir's elimination without row "
           "pivoting (singular, or needing a row exchange): its determinant would be NaN; "
           "compute the determinant outside the compiled module")


def check_det(graph: Graph) -> int:
    """Insert the check after each float determinant; returns how many."""
    checked = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _DETS:
            continue
        source = node.args[0]
        val = source.meta.get("val")
        if not isinstance(val, torch.Tensor) or not val.is_floating_point():
            continue
        result = node
        if node.target is aten._linalg_det.default:  # (det, LU, pivots)
            result = next((u for u in node.users if u.args[1:] == (0,)), None)
            if result is None:
                continue
        emit = Emitter(graph, result.next, located_at=node)

        def finite(v):  # v - v is 0 but for inf and NaN (torch-mlir has no isfinite)
            return emit(aten.eq.Scalar, emit(aten.sub.Tensor, v, v), 0)

        # Counted, not all.dims: torch-mlir does not lower all over several dims.
        non_finite = emit(aten._to_copy.default, emit(aten.logical_not.default, finite(source)),
                          dtype=torch.int32)
        matrix_finite = emit(aten.eq.Scalar, emit(aten.sum.dim_IntList, non_finite, [-2, -1]), 0)
        # NaN, not inf: a zero pivot gives 0 * inf; a determinant may overflow as eager's does.
        result_a_number = emit(aten.eq.Tensor, result, result)
        fine = emit(aten.logical_or.default, result_a_number,
                    emit(aten.logical_not.default, matrix_finite))
        # Typed by placeholders: a fake run of either would guard on the data.
        everywhere = emit.untyped(aten.Bool.Tensor, emit(aten.all.default, fine), value=False)
        emit.untyped(aten._assert_scalar.default, everywhere, MESSAGE)
        checked += 1
    return checked


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='checked_det_zero_pivot', stage='import',
        where='check_det',
        upstream='torch-mlir lowers linalg.det as Gaussian elimination without row pivoting: any '
                 'zero pivot gives NaN (singular matrices, and regular ones like [[0, 1], [1, '
                 '0]]); a run-time assertion turns that into a RunError (relies on '
                 '--iree-opt-strip-assertions=false).',
        guard='test/python/frontend/test_edge_value_math.py::test_det_with_a_zero_pivot_is_an_error_not_nan',
        remove_when="(inferred) when torch-mlir's det lowering pivots rows; the docstring states "
                    'no removal condition'),
)
