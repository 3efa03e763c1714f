"""Integer negation, exact.

torch-mlir lowers ``aten.neg`` of an integer tensor through float32
(``sitofp``, ``negf``, ``fptosi``), so any value beyond 2**24 comes back
rounded: -(2**40 + 7) is -2**40, -(2**63 - 1) is -2**63 (the plain stack
too). ``x * -1`` lowers to an integer multiply, which wraps as eager's
negation does (-(-2**63) is -2**63). Guarded by ``test_sorts.py::
test_integer_negation_is_exact``; remove when torch-mlir negates integers
as integers.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="integer_negation", stage="import", where="rewrite_integer_negation",
    upstream="torch-mlir 20261001 lowers aten.neg of an integer tensor through float32 "
             "(sitofp, negf, fptosi): -(2**40 + 7) comes back as -2**40.",
    guard="test/python/frontend/test_sorts.py::test_integer_negation_is_exact",
    remove_when="torch-mlir negates integers as integers (the guard passes without it)"),)

aten = torch.ops.aten


def rewrite_integer_negation(graph: Graph) -> int:
    """Rewrite ``neg`` of int32 and int64 tensors as a multiply by -1; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.neg.default:
            continue
        source = node.args[0]
        val = source.meta.get("val") if isinstance(source, Node) else None
        # Narrower integers are exact in float32 (and uint8's -1 has no byte form).
        if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int32, torch.int64):
            continue
        product = Emitter(graph, node)(aten.mul.Scalar, source, -1)
        node.replace_all_uses_with(product)
        graph.erase_node(node)
        rewritten += 1
    return rewritten
