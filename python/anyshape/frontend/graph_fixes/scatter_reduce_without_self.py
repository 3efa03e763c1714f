"""``scatter_reduce(..., include_self=False)`` as a reduction onto the identity.

torch-mlir lowers ``include_self=False`` as two scatters: the reduction's
identity written at every hit position, then the reduction. At a dynamic
size IREE 3.13 fuses the first scatter's fill into its dispatch and fails
("offset 0 is out-of-bounds", or "'memref.alloca' op expected no unbounded
stack allocations": TAPAS's segment minimum), on the plain stack too.
``rewrite_scatter_reduce_without_self`` computes the same values from forms
that compile: the source reduced onto a tensor of the identity
(``include_self=True``), kept where some source element landed (a count by
``scatter_add``), ``self`` elsewhere; a mean divides the sum by that count.
Guarded by ``test_accumulating_scatters.py::test_scatter_reduce_without_self_matches_eager``.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Graph

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

WORKAROUNDS = (Workaround(
    name="scatter_reduce_without_self", stage="import",
    where="rewrite_scatter_reduce_without_self",
    upstream="torch-mlir 20261001 lowers scatter_reduce(include_self=False) as a scatter of "
             "the identity followed by the reduction; at a dynamic size IREE 3.13 fuses the "
             "identity's fill into the first scatter's dispatch and fails to compile it "
             "(\"offset 0 is out-of-bounds\", \"'memref.alloca' op expected no unbounded stack "
             "allocations\": TAPAS; the plain stack too).",
    guard="test/python/iree/test_accumulating_scatters.py::"
          "test_scatter_reduce_without_self_matches_eager",
    remove_when="when the plain stack compiles scatter_reduce(include_self=False) at a "
                "dynamic size"),)


def _identity(reduce: str, dtype: torch.dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    low, high = (-math.inf, math.inf) if dtype.is_floating_point else \
        (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    return high if reduce == "amin" else low


def rewrite_scatter_reduce_without_self(graph: Graph) -> int:
    """Rewrite each ``scatter_reduce.two`` with ``include_self=False``; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.scatter_reduce.two:
            continue
        self_, dim, index, src, reduce = node.args[:5]
        include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)
        val = self_.meta.get("val") if isinstance(self_, torch.fx.Node) else None
        if include_self or not isinstance(val, torch.Tensor) or val.dtype == torch.bool or \
                val.is_complex() or (reduce == "mean" and not val.dtype.is_floating_point):
            continue
        emit = Emitter(graph, node)
        count_dtype = val.dtype if val.dtype.is_floating_point else torch.int64
        ones = emit(aten.ones_like.default, src, dtype=count_dtype)
        counts = emit(aten.scatter_add.default,
                      emit(aten.zeros_like.default, self_, dtype=count_dtype), dim, index, ones)
        hit = emit(aten.gt.Scalar, counts, 0)
        base = emit(aten.full_like.default, self_, _identity(reduce, val.dtype))
        reduced = emit(aten.scatter_reduce.two, base, dim, index, src,
                       "sum" if reduce == "mean" else reduce, include_self=True)
        if reduce == "mean":
            reduced = emit(aten.div.Tensor, reduced, emit(aten.clamp_min.default, counts, 1))
        result = emit(aten.where.self, hit, reduced, self_)
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        rewritten += 1
    return rewritten
