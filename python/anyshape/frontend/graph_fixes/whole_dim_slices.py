"""Slices that keep a whole dim, dropped from the exported graph.

``mask[:, -h.shape[1]:]`` where the mask is as long as ``h`` (LFM2/3's
``apply_mask_to_padding_states``) keeps every element, but its start is a
size (-L), which no one folds to 0. Its consumer then reads the mask through
a slice at an offset IREE cannot prove is 0; once anyshape has tied the two
lengths to one value, IREE 3.13 flattens (batch, length) through that slice,
and the CPU code generator fails on the dispatch that fuses it with a
reduction (an RMSNorm): "'linalg.generic' op write affecting operations on
global resources are restricted to workgroup distributed contexts". A slice
whose result has its input's size on the sliced dim, step 1, is its input:
dropping it leaves nothing to flatten. (A mask longer than ``h`` still fails,
on the plain stack too.)
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="whole_dim_slices", stage="import", where="drop_whole_dim_slices",
    upstream="IREE 3.13 flattens dims through a slice at an offset it cannot prove 0, and its "
             "CPU code generator fails on the flattened slice fused with a reduction ('write "
             "affecting operations on global resources are restricted to workgroup distributed "
             "contexts'; lfm3, whose padding mask is sliced to the hidden states' length).",
    guard="test/python/frontend/test_import.py::test_slice_of_a_whole_dim_is_dropped",
    remove_when="IREE compiles a reduction fused with a multiply by a slice at a dynamic "
                "offset (the guard's module, with the rewrite off); dropping an identity is "
                "harmless and can stay"),)

aten = torch.ops.aten


def _same_size(a, b) -> bool:
    """Equal sizes, symbolic ones compared as expressions (no guard recorded)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return False


def drop_whole_dim_slices(graph: Graph) -> int:
    """Replace each ``aten.slice.Tensor`` that keeps its whole dim by its input;
    returns how many."""
    dropped = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.slice.Tensor:
            continue
        source = node.args[0]
        step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        if not isinstance(source, Node) or step != 1 or not isinstance(dim, int):
            continue
        before, after = source.meta.get("val"), node.meta.get("val")
        if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor) or \
                before.dtype != after.dtype or before.dim() != after.dim():
            continue
        if all(_same_size(x, y) for x, y in zip(before.shape, after.shape)):
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            dropped += 1
    return dropped
