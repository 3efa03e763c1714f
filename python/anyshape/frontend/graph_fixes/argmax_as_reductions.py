"""``argmax``/``argmin`` over a dim of dynamic size as a max and a first-index min.

IREE 3.13's CPU code generator fails on an argmax over a dynamic dim that
fuses with the op producing its input ("offset 1 is out-of-bounds: 0 >= -1" on
a ``memref.subview``): ``(x * x).argmax(-1)`` with ``Dim("batch")`` and
``Dim("seq")`` did not compile, nor the last-token lookup of every decoder's
sequence-classification head (``(token_indices * non_pad_mask).argmax(-1)``).
``argmax(x, d)`` is the first index where ``x`` equals its max along ``d``, or
is NaN (eager's argmax takes the first NaN, and a row's max is NaN where it has
one): a ``max``, a compare and a ``min`` of indices, which IREE compiles.
Guarded by ``test_argmax_of_a_computed_value`` (test_paired_indices.py).
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

_EXTREMES = {aten.argmax.default: aten.amax.default, aten.argmin.default: aten.amin.default}


def rewrite_argmax_as_reductions(graph: Graph) -> int:
    """Rewrite each argmax/argmin over one dim of dynamic size; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _EXTREMES:
            continue
        source = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        x = source.meta.get("val") if isinstance(source, Node) else None
        if dim is None or not isinstance(x, torch.Tensor) or x.dim() == 0 or \
                isinstance(x.shape[dim], int) or x.dtype == torch.bool:
            continue
        dim %= x.dim()
        emit = Emitter(graph, node)
        extreme = emit(_EXTREMES[node.target], source, [dim], True)
        hit = emit(aten.eq.Tensor, source, extreme)
        if x.is_floating_point():
            hit = emit(aten.logical_or.default, hit, emit(aten.isnan.default, source))
        extent = emit(aten.sym_size.int, source, dim)
        positions = emit(aten.arange.start_step, 0, extent, 1, dtype=torch.int64)
        shape = [1] * x.dim()
        shape[dim] = -1
        positions = emit(aten.view.default, positions, shape)
        first = emit(aten.amin.default, emit(aten.where.ScalarOther, hit, positions, extent), [dim],
                     keepdim)
        node.replace_all_uses_with(first)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='argmax_as_reductions', stage='import',
        where='rewrite_argmax_as_reductions',
        upstream="IREE 3.13's CPU code generator fails on an argmax over a dynamic dim fused "
                 "with its input's producer ('offset 1 is out-of-bounds: 0 >= -1'): "
                 "(x * x).argmax(-1), and every decoder's sequence-classification head.",
        guard='test/python/frontend/test_paired_indices.py::test_argmax_of_a_computed_value',
        remove_when="when the plain stack compiles the guard's module (its plain-stack test "
                    "fails)"),
)
