"""Sizes that are one number at every length, made static in the exported graph.

MPT slices its ALiBi bias, ``[heads, 1, positions]``, from
``max(0, 1 - seq)``: one row at every length of one or more. torch records the
row count as ``1 - Max(0, 1 - seq)``, which it cannot fold (at ``seq = 0`` it is
0), so torch-mlir imports the bias as ``[heads, ?, ?]``. Added to the
``[batch, heads, seq, seq]`` scores, that ``?`` is taken for ``seq``: torch-mlir
lowers a broadcast of two dynamic dims as equal sizes, and IREE checks it at run
time, so every length but 1 was refused ("expected shape 1x1"). A size that is
the same number at every length of 1 or more is that number here: the broadcast
is then of a static 1. (A length of 0 then fails IREE's check of that size at
run time; it does not give a wrong answer.)
"""

from __future__ import annotations

import functools

import torch
from torch.fx import Graph
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="constant_sizes", stage="import", where="make_constant_sizes_static",
    upstream="torch-mlir lowers an elementwise broadcast of two dynamic dims as equal sizes "
             "(a dynamic dim of size 1 is not broadcast); torch records MPT's one-row ALiBi "
             "slice as a dynamic size (1 - Max(0, 1 - seq)) that it cannot fold.",
    guard="test/python/frontend/test_length_sliced_state.py::test_a_one_row_bias_broadcasts_at_every_length",
    remove_when="torch-mlir broadcasts dynamic dims of size 1, or torch folds sizes that are "
                "constant over the dims' range"),)


@functools.lru_cache(maxsize=4096)
def _constant_from_one(expr) -> int | None:
    """The integer ``expr`` equals at every value >= 1 of its symbols, or None."""
    import sympy
    from torch.utils._sympy.functions import Max, Min

    if not expr.free_symbols or not expr.has(Max, Min, sympy.Max, sympy.Min):
        return None
    shifted = {symbol: sympy.Symbol(f"{symbol}_less_one", integer=True, nonnegative=True) + 1
               for symbol in expr.free_symbols}
    try:  # sympy's own Max and Min use the symbols' assumptions; torch's do not
        value = sympy.simplify(expr.replace(Max, sympy.Max).replace(Min, sympy.Min)
                               .subs(shifted))
    except (TypeError, ValueError):
        return None
    return int(value) if value.is_Integer else None


def make_constant_sizes_static(graph: Graph) -> int:
    """Give each node's value the static sizes ``_constant_from_one`` finds;
    returns how many values changed."""
    changed = 0
    for node in graph.nodes:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not hasattr(val, "fake_mode"):
            continue
        shape = [_constant_from_one(size.node.expr) if isinstance(size, torch.SymInt) else None
                 for size in val.shape]
        if all(size is None for size in shape):
            continue
        new_shape = [size if fixed is None else fixed for size, fixed in zip(val.shape, shape)]
        with val.fake_mode:
            node.meta["val"] = torch.empty(new_shape, dtype=val.dtype, device=val.device)
        if "tensor_meta" in node.meta:  # what torch-mlir's importer reads the type from
            node.meta["tensor_meta"] = _extract_tensor_metadata(node.meta["val"])
        changed += 1
    return changed
