"""``logcumsumexp`` as a scan of stable ``logaddexp`` steps.

torch-mlir decomposes ``logcumsumexp(x, d)`` into ``log(cumsum(exp(x)))``,
which overflows once ``x`` passes exp's range (about 88 in float32): the
OpInfo sample ``logcumsumexp(T[5, 5, 5], 0)`` gave inf where eager gives
10000, on anyshape and the plain stack. Subtracting one maximum instead would
underflow to -inf for prefixes far below it. ``rewrite_logcumsumexp``
computes the prefix sums by doubling (Hillis-Steele): ``y = logaddexp(y,
y shifted by s)`` for s = 1, 2, 4, ... below the dim's largest size, each
``logaddexp`` as ``max + log1p(exp(-|a - b|))``, so no step leaves the
range. That is ceil(log2(n)) elementwise passes for a static n, and for a
dynamic one as many as its upper bound needs (40, for 2^40 elements, when
unbounded). Guarded by ``test_logcumsumexp_beyond_exps_range``
(test_edge_value_math.py).
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

UNBOUNDED_STEPS = 40


def _logaddexp(emit, a: Node, b: Node) -> Node:
    high = emit(aten.maximum.default, a, b)
    gap = emit(aten.neg.default, emit(aten.abs.default, emit(aten.sub.Tensor, a, b)))
    stable = emit(aten.add.Tensor, high, emit(aten.log1p.default, emit(aten.exp.default, gap)))
    # Both -inf, or both +inf: a - b is NaN; the answer is the shared infinity.
    infinite = emit(aten.eq.Scalar, emit(aten.abs.default, high), math.inf)
    return emit(aten.where.self, infinite, high, stable)


def _steps(size, symbol_upper: int | None) -> int:
    largest = size if isinstance(size, int) else symbol_upper
    if largest is None or largest > 2 ** UNBOUNDED_STEPS:
        return UNBOUNDED_STEPS
    return max(0, math.ceil(math.log2(largest))) if largest > 1 else 0


def _upper_bound(size: torch.SymInt) -> int | None:
    """A dynamic size's largest value, from its shape environment (None: unbounded)."""
    try:
        return int(size.node.shape_env.bound_sympy(size.node.expr).upper)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def rewrite_logcumsumexp(graph: Graph) -> int:
    """Rewrite each float ``logcumsumexp`` as above; returns how many."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.logcumsumexp.default:
            continue
        x, dim = node.args[0], node.args[1]
        val = x.meta["val"]
        if not val.is_floating_point():
            continue
        if val.dim() == 0:
            node.replace_all_uses_with(x)
            graph.erase_node(node)
            rewritten += 1
            continue
        dim %= val.dim()
        emit = Emitter(graph, node)
        size = val.shape[dim]
        n = size if isinstance(size, int) else emit(aten.sym_size.int, x, dim)
        y = x
        for step in range(_steps(size, None if isinstance(size, int) else _upper_bound(size))):
            shift = 2 ** step
            moved = shift if isinstance(n, int) else emit(torch.sym_min, shift, n)
            if isinstance(n, int):
                kept = n - shift
            else:
                kept = emit(operator.sub, n, moved)
            pad = emit(aten.full_like.default, emit(aten.slice.Tensor, y, dim, 0, moved), -math.inf)
            body = emit(aten.slice.Tensor, y, dim, 0, kept)
            y = _logaddexp(emit, y, emit(aten.cat.default, [pad, body], dim))
        node.replace_all_uses_with(y)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='stable_logcumsumexp', stage='import',
        where='rewrite_logcumsumexp',
        upstream='torch-mlir decomposes logcumsumexp(x, d) into log(cumsum(exp(x))), which '
                 "overflows past exp's range (logcumsumexp(T[5, 5, 5], 0) gave inf where eager "
                 'gives 10000); rewritten as a Hillis-Steele scan of stable logaddexp steps.',
        guard=('test/python/frontend/test_edge_value_math.py::test_logcumsumexp_beyond_exps_range',
               'test/python/test_opinfo_floor.py::test_floor[logcumsumexp-float32-0]'),
        remove_when="(inferred) when torch-mlir's logcumsumexp decomposition is numerically "
                    'stable; the docstring states no removal condition'),
)
