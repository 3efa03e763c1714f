"""Small tensors computed from constant tensors only, once, by torch at compile time.

A model may compute a scalar from literals in its forward: Gemma 3n's
activation sparsity takes ``Normal(0, 1).icdf(0.9)``, an ``erfinv`` of a 0-d
constant. IREE 3.13 has no lowering for ``erfinv``, and what it reported was
the literal (``failed to legalize operation 'torch.vtensor.literal'`` at
``<unknown>``), not the op. Computed by torch here, the value is eager's to
the bit and nothing is left to lower. Only results of at most 64 elements
of ops on constant tensors are computed (a large one would be stored in the
artifact where an op made it): creation ops (``full``, ``scalar_tensor``)
stay ops, in the forms the passes match (RoBERTa's mask fill is a ``where``
of two ``scalar_tensor``), and an op whose result is not a function of its
inputs (random, uninitialised) is never run here.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node
from torch.fx.node import map_aggregate

from anyshape.stages import Workaround

_MAX_ELEMENTS = 64

WORKAROUNDS = (Workaround(
    name="constant_subexpressions", stage="import", where="compute_constant_subexpressions",
    upstream="IREE 3.13 has no lowering for some ops a model applies to literals only "
             "(Gemma 3n's erfinv of 0.9), and reports the literal, not the op (\"failed to "
             "legalize operation 'torch.vtensor.literal'\" at <unknown>).",
    guard="test/python/frontend/test_import.py::test_ops_on_constants_are_computed_at_compile_time",
    remove_when="IREE lowers erfinv (computing constants here stays exact and cheap; it "
                "can stay)"),)


def _computable(node: Node) -> bool:
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in op.tags or op._schema.is_mutable \
            or "empty" in op._schema.name or op.namespace != "aten":
        return False
    val = node.meta.get("val")
    # Static sizes first: comparing a symbolic numel would record a guard.
    if not isinstance(val, torch.Tensor) or any(not isinstance(size, int) for size in val.shape) \
            or val.numel() > _MAX_ELEMENTS:
        return False
    inputs = []
    map_aggregate((node.args, node.kwargs), inputs.append)
    if any(isinstance(a, (Node, torch.SymInt, torch.SymFloat, torch.SymBool)) for a in inputs) \
            or not any(isinstance(a, torch.Tensor) for a in inputs):
        return False
    # torch-mlir imports a list of tensors only if all are values, none a literal
    # (``index.Tensor``'s indices, ``cat``'s inputs).
    return all(node in (*user.args, *user.kwargs.values()) for user in node.users)


def compute_constant_subexpressions(graph: Graph) -> int:
    """Replace each such op by its value; returns how many."""
    computed = 0
    for node in list(graph.nodes):
        if not _computable(node):
            continue
        with torch.no_grad():
            value = node.target(*node.args, **node.kwargs)
        node.replace_all_uses_with(value)
        graph.erase_node(node)
        computed += 1
    return computed
