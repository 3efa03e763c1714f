"""Scatters given their ``dim`` counted from the front.

torch-mlir 20261001 lowers the scatter family with the ``dim`` it is given:
at a negative one, ``convertTorchScatterIndexAndSrcToTMScatterIndexAndSrc``
reads past its vectors and iree-compile crashes (PhiMoE's router,
``torch.scatter(scores, -1, experts, -inf)``). The plain stack too. The
same dim counted from the front, ``dim + rank``, compiles and matches eager.
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="nonnegative_scatter_dims", stage="import", where="count_dims_from_the_front",
    upstream="torch-mlir 20261001: aten.scatter (src, value, reduce), scatter_add and "
             "scatter_reduce at a negative dim crash iree-compile "
             "(convertTorchScatterIndexAndSrcToTMScatterIndexAndSrc; PhiMoE's router).",
    guard=("test/python/iree/test_in_place_writes.py::test_writes_along_a_negative_dim_as_eager",
           "test/python/test_compile_errors.py::test_compiler_crash_names_the_pass_and_the_op"),
    remove_when="torch-mlir lowers these at a negative dim (the guard passes without it)"),)

aten = torch.ops.aten

# The ops, and where their ``dim`` argument is (after the tensor it indexes).
_DIM_AFTER_SELF = (aten.scatter.src, aten.scatter.value, aten.scatter.reduce,
                   aten.scatter.value_reduce, aten.scatter_add.default,
                   aten.scatter_reduce.two)


def count_dims_from_the_front(graph: Graph) -> int:
    """Give each op of ``_DIM_AFTER_SELF`` a ``dim`` of at least 0; returns how many."""
    rewritten = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in _DIM_AFTER_SELF:
            continue
        self_val = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if not isinstance(dim, int) or dim >= 0 or not isinstance(self_val, torch.Tensor):
            continue
        rank = max(self_val.dim(), 1)  # a 0-d tensor's dim -1 is its only dim, 0
        if len(node.args) > 1:
            node.args = (node.args[0], dim + rank, *node.args[2:])
        else:
            node.kwargs = {**node.kwargs, "dim": dim + rank}
        rewritten += 1
    return rewritten
