"""Reads by a boolean mask (``x[mask]``) as reads by the mask's nonzero positions.

torch-mlir 20261001 lowers ``aten.index.Tensor`` with a boolean index into a
comparison of the i1 mask with an i64 position, which IREE rejects
("'arith.cmpi' op requires all operands to have the same type": XMOD's
per-language adapters, ``hidden_states[lang_ids == i]``). ``x[mask]`` is
``x[i_0, ..., i_k]`` for the columns of ``nonzero(mask)``, in the same
row-major order, which compiles. Guarded by
``test_boolean_masks.py::test_rows_selected_by_a_mask_as_eager``.
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

WORKAROUNDS = (Workaround(
    name="boolean_mask_reads_by_position", stage="import", where="rewrite_boolean_mask_reads",
    upstream="torch-mlir 20261001 lowers aten.index.Tensor with a boolean index to an "
             "arith.cmpi of i1 with i64, which IREE 3.13 rejects (\"'arith.cmpi' op requires "
             "all operands to have the same type\"; XMOD's language adapters).",
    guard="test/python/frontend/test_boolean_masks.py::test_rows_selected_by_a_mask_as_eager",
    remove_when="when torch-mlir lowers a boolean index of aten.index.Tensor"),)


def rewrite_boolean_mask_reads(graph: Graph) -> int:
    """Replace the one boolean index of an ``index.Tensor`` whose other indices
    are whole dims (``x[mask]``, ``x[:, mask]``) with the columns of its
    ``nonzero``; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.index.Tensor:
            continue
        source, indices = node.args[0], list(node.args[1])
        masks = [i for i, index in enumerate(indices) if isinstance(index, torch.fx.Node)
                 and getattr(index.meta.get("val"), "dtype", None) == torch.bool]
        if len(masks) != 1 or any(index is not None for i, index in enumerate(indices)
                                  if i != masks[0]):
            continue
        position = masks[0]
        mask = indices[position]
        emit = Emitter(graph, node)
        # The mask's count of True is the read's size at the mask's place: a
        # symbol torch.export made and the importer binds. A fake run of nonzero
        # would make another, which nothing binds.
        count = node.meta["val"].shape[position]
        with emit.fake_mode:
            positions_value = torch.empty((count, mask.meta["val"].dim()), dtype=torch.int64)
        nonzero = emit.untyped(aten.nonzero.default, mask, value=positions_value)
        columns = [emit(aten.select.int, nonzero, 1, axis)
                   for axis in range(mask.meta["val"].dim())]
        read = emit(aten.index.Tensor, source, [*indices[:position], *columns])
        node.replace_all_uses_with(read)
        graph.erase_node(node)
        rewritten += 1
    return rewritten
