"""Reads by a boolean mask (``x[mask]``, ``masked_select``) at its nonzero positions.

torch-mlir 20261001 lowers ``aten.index.Tensor`` with a boolean index into a
comparison of the i1 mask with an i64 position, which IREE rejects
("'arith.cmpi' op requires all operands to have the same type": XMOD's
per-language adapters, ``hidden_states[lang_ids == i]``). ``x[mask]`` is
``x[i_0, ..., i_k]`` for the columns of ``nonzero(mask)``, in the same
row-major order, read as one index into the masked dims flattened
(torch-mlir gathers by one index tensor at dynamic sizes), which compiles;
so is ``masked_select(x, mask)`` where the mask is as large as ``x``
(torch-mlir has no lowering of it: "failed to legalize operation
'torch.aten.masked_select'"). Guarded by
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
             "all operands to have the same type\"; XMOD's language adapters), and has no "
             "lowering of masked_select.",
    guard=("test/python/frontend/test_boolean_masks.py::test_rows_selected_by_a_mask_as_eager",
           "test/python/frontend/test_boolean_masks.py::test_masked_select_as_eager"),
    remove_when="when torch-mlir lowers a boolean index of aten.index.Tensor and "
                "masked_select"),)


def _sizes(node) -> list | None:
    """The sizes of ``node``'s value, symbols as their expressions (comparing
    SymInts themselves would add guards)."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    return [str(d.node.expr) if isinstance(d, torch.SymInt) else d for d in val.shape]


def rewrite_boolean_mask_reads(graph: Graph) -> int:
    """Replace the one boolean index of an ``index.Tensor`` whose other indices
    are whole dims (``x[mask]``, ``x[:, mask]``), and the mask of a
    ``masked_select`` of a mask as large as its input (torch-mlir has no
    lowering of it), with the columns of its ``nonzero``; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.masked_select.default:
            source, mask = node.args[:2]
            shapes = [_sizes(n) for n in (source, mask)]
            if shapes[0] is None or shapes[0] != shapes[1] or not shapes[0]:
                continue
            indices = [mask]
        elif node.target is aten.index.Tensor:
            source, indices = node.args[0], list(node.args[1])
        else:
            continue
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
        rank = mask.meta["val"].dim()
        if rank > 1:  # one index into the masked dims flattened (torch-mlir gathers by one)
            source = emit(aten.flatten.using_ints, source, position, position + rank - 1)
            mask = emit(aten.flatten.using_ints, mask, 0, rank - 1)
        with emit.fake_mode:
            positions_value = torch.empty((count, 1), dtype=torch.int64)
        nonzero = emit.untyped(aten.nonzero.default, mask, value=positions_value)
        column = emit(aten.select.int, nonzero, 1, 0)
        read = emit(aten.index.Tensor, source, [*indices[:position], column])
        node.replace_all_uses_with(read)
        graph.erase_node(node)
        rewritten += 1
    return rewritten
