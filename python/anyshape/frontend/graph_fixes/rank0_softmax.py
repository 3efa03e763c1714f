"""Softmax over a 0-d tensor, as the elementwise op it is.

IREE 3.13 does not finish compiling ``softmax`` or ``log_softmax`` of a 0-d
tensor (anyshape and the plain stack alike: no result after minutes; the
OpInfo samples ``softmax(T[], 0)``). Over one element softmax is
``exp(x - x)`` (1, or NaN for an infinite or NaN x, as eager) and
log_softmax ``x - x``; ``rewrite_rank0_softmax`` writes them so, in the
dtype the op asks for. Guarded by ``test_rank0_softmax_as_eager``
(test_edge_value_math.py); remove when IREE compiles the 0-d form.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

# op -> (log form?, position of its dtype argument or None)
_SOFTMAX = {
    aten.softmax.int: (False, 2),
    aten._softmax.default: (False, None),
    aten._safe_softmax.default: (False, 2),
    aten.log_softmax.int: (True, 2),
    aten._log_softmax.default: (True, None),
}


def rewrite_rank0_softmax(graph: Graph) -> int:
    """Rewrite softmax forms of 0-d tensors as above; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        form = _SOFTMAX.get(node.target) if node.op == "call_function" else None
        val = node.meta.get("val")
        source = node.args[0] if node.args else None
        if form is None or not isinstance(val, torch.Tensor) or val.dim() != 0 \
                or not isinstance(source, Node):
            continue
        log, _ = form
        emit = Emitter(graph, node)
        x = source
        if source.meta["val"].dtype != val.dtype:
            x = emit(aten._to_copy.default, source, dtype=val.dtype)
        zero_or_nan = emit(aten.sub.Tensor, x, x)
        replacement = zero_or_nan if log else emit(aten.exp.default, zero_or_nan)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='rank0_softmax_elementwise', stage='import',
        where='rewrite_rank0_softmax',
        upstream='IREE 3.13 does not finish compiling softmax or log_softmax of a 0-d tensor (no '
                 'result after minutes, anyshape and the plain stack alike); written as exp(x - '
                 'x) / x - x.',
        guard=('test/python/frontend/test_edge_value_math.py::test_rank0_softmax_as_eager',
               'test/python/test_opinfo_floor.py::test_floor[softmax-float32-6]'),
        remove_when='when IREE compiles the 0-d form'),
)
