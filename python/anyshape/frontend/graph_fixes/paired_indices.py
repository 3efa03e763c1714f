"""``x[rows, cols]`` with two index tensors as one ``index_select`` of ``x`` with its first two dims flattened.

Every decoder's sequence-classification head in transformers reads one
position per sequence: ``logits[torch.arange(batch), last_non_pad_token]``
(``modeling_layers.py``). torch-mlir does not lower that ``index.Tensor`` with
dynamic sizes ("failed to legalize operation
'torch.aten.index.Tensor_hacked_twin'"), so ``LlamaForSequenceClassification``
(and Mistral's, Qwen's, ...) failed to compile, on the plain stack too.
Where the rows are ``arange(dim0)`` and the columns an argmax or argmin over
a dim of ``dim1`` elements, every index is in range, and ``x[rows, cols]`` is
reading rows ``r * dim1 + c`` of ``x`` viewed as ``[dim0 * dim1, ...]``. Other
index pairs, which could be out of range, are left as they were (torch-mlir's
error names the op). Guarded by ``test_sequence_classification_head``
(test_paired_indices.py).
"""

from __future__ import annotations

import sympy
import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.frontend.indexed_reads import size_bounds
from anyshape.stages import Workaround

aten = torch.ops.aten
_ARG_EXTREMES = (aten.argmax.default, aten.argmin.default)


def _same(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return a.node.expr == b.node.expr


def _all_rows(index: Node, extent) -> bool:
    """``index`` is ``arange(extent)``."""
    bounds = size_bounds(index)
    return bounds is not None and index.meta["val"].dim() == 1 and bounds[0] == 0 and \
        sympy.simplify(sympy.sympify(bounds[1]) - (_expr(extent) - 1)) == 0


def _expr(size):
    return size if isinstance(size, int) else size.node.expr


def _one_per_row(index: Node, extent) -> bool:
    """``index`` is an argmax or argmin over a dim of ``extent`` elements."""
    if index.op != "call_function" or index.target not in _ARG_EXTREMES:
        return False
    source = index.args[0].meta.get("val")
    dim = index.args[1] if len(index.args) > 1 else index.kwargs.get("dim")
    return isinstance(source, torch.Tensor) and dim is not None and \
        _same(source.shape[dim], extent)


def _pair(node: Node) -> tuple[Node, Node, Node] | None:
    if node.op != "call_function" or node.target not in (aten.index.Tensor,
                                                           aten._unsafe_index.Tensor):
        return None
    source, indices = node.args[0], node.args[1]
    if not isinstance(source, Node) or len(indices) != 2 or \
            not all(isinstance(i, Node) for i in indices):
        return None
    x = source.meta.get("val")
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return None
    rows, cols = indices
    if _all_rows(rows, x.shape[0]) and _one_per_row(cols, x.shape[1]):
        return source, rows, cols
    return None


def rewrite_paired_indices(graph: Graph) -> int:
    """Rewrite each ``x[arange(dim0), argmax(...)]``; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        found = _pair(node)
        if found is None:
            continue
        source, rows, cols = found
        emit = Emitter(graph, node)
        width = source.meta["val"].shape[1]
        if not isinstance(width, int):
            width = emit(aten.sym_size.int, source, 1)
        flat_index = emit(aten.add.Tensor, emit(aten.mul.Tensor, rows, width), cols)
        flat = emit(aten.reshape.default, source, [-1, *source.meta["val"].shape[2:]])
        node.replace_all_uses_with(emit(aten.index_select.default, flat, 0, flat_index))
        graph.erase_node(node)
        rewritten += 1
    return rewritten


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='paired_indices_as_index_select', stage='import',
        where='rewrite_paired_indices',
        upstream="torch-mlir does not lower index.Tensor with two index tensors and dynamic "
                 "sizes ('failed to legalize operation torch.aten.index.Tensor_hacked_twin'): "
                 "every decoder's sequence-classification head, "
                 "logits[arange(batch), last_non_pad_token], failed to compile.",
        guard='test/python/frontend/test_paired_indices.py::test_sequence_classification_head',
        remove_when="when the plain stack compiles the guard's module (its plain-stack test "
                    "fails)"),
)
