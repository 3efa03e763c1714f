"""Mixture-of-experts layers as transformers loads them by default, in ops IREE compiles.

transformers' default experts (``experts_implementation="grouped_mm"``) sort
the (token, expert) pairs by expert, count the pairs of each expert with
``torch.histc`` and multiply each expert's run of rows by its weights with a
grouped product; on the CPU that product is its custom op
``transformers::grouped_mm_fallback`` (a Python loop over the experts). torch-mlir
has no lowering for ``aten.histc``, and none can exist for an opaque custom
op: both import as ``torch.operator``, which IREE cannot compile. The export
stage decomposes both (``decompositions``):

- ``histc`` as torch's CPU kernel computes each value's bin, compared with
  every bin and summed over the values: a count of known size.
- the grouped product row by row: each row's expert is the number of offsets
  at or below the row, its weights are gathered and multiplied in one batched
  product, and rows past the last offset are 0 (the op leaves them 0), which
  is what ``experts_implementation="batched_mm"`` computes.
"""

from __future__ import annotations

import struct

import torch

from anyshape.stages import Workaround


def histc_as_counts(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0):
    """``aten.histc`` as torch's CPU kernel bins: ``(x - min) * bins / (max - min)``
    in ``x``'s dtype, truncated, ``max`` in the last bin, values outside
    ``[min, max]`` nowhere. With ``min == max`` torch takes the edges from the
    data (its least and greatest value, each moved out by 1 where they are
    equal), and so does this: Hunyuan-MoE's single expert counts with
    ``histc(min=0, max=0)``. A dtype other than float32 and float64 is left to
    torch (NotImplemented)."""
    if x.dtype not in _ROUNDED:
        return NotImplemented
    values = x.reshape(-1)
    low, high = _ROUNDED[x.dtype](min), _ROUNDED[x.dtype](max)
    if low == high:
        low, high = values.amin(), values.amax()
        same = low == high
        # torch moves the edges in float64, then bins in x's dtype
        low = torch.where(same, (low.double() - 1).to(x.dtype), low)
        high = torch.where(same, (high.double() + 1).to(x.dtype), high)
        width = high - low
    elif not low < high:
        return NotImplemented
    else:
        width = _ROUNDED[x.dtype](high - low)
    position = ((values - low) * bins / width).to(torch.int64)
    bin_of = position.clamp(max=bins - 1)
    inside = (values >= low) & (values <= high)
    hits = (bin_of[:, None] == torch.arange(bins, device=x.device)[None, :]) & inside[:, None]
    return hits.sum(0).to(x.dtype)


def _to_float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", float(value)))[0]


# A Python number as the kernel holds it in the input's dtype.
_ROUNDED = {torch.float32: _to_float32, torch.float64: float}


def grouped_mm_by_rows(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor):
    """``transformers::grouped_mm_fallback``: rows ``offs[e-1]:offs[e]`` of
    ``input`` (S, K) times ``weight[e]`` (K, N); rows from ``offs[-1]`` on are 0."""
    experts = weight.shape[0]
    rows = torch.arange(input.shape[0], device=input.device, dtype=offs.dtype)
    expert_of_row = (rows[:, None] >= offs[None, :]).sum(1)
    used = expert_of_row < experts
    expert_of_row = expert_of_row.clamp(max=experts - 1)
    products = torch.bmm(input[:, None, :], weight[expert_of_row]).squeeze(1)
    return torch.where(used[:, None], products, torch.zeros((), dtype=products.dtype))


def decompositions() -> dict:
    """The entries for the export stage's decomposition table."""
    table = {torch.ops.aten.histc.default: histc_as_counts}
    try:  # registered when transformers' MoE integration is imported
        table[torch.ops.transformers.grouped_mm_fallback.default] = grouped_mm_by_rows
    except AttributeError:
        pass
    return table


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='histc_as_bin_counts', stage='export',
        where='histc_as_counts (decomposition_table)',
        upstream="torch-mlir has no lowering for aten.histc: it imports as an opaque "
                 "torch.operator that IREE cannot compile (transformers' default MoE experts "
                 "count tokens per expert with it).",
        guard='test/python/frontend/test_grouped_experts.py::test_histc_is_eagers',
        remove_when='(inferred) when torch-mlir lowers aten.histc'),
    Workaround(
        name='grouped_mm_fallback_row_by_row', stage='export',
        where='grouped_mm_by_rows (decomposition_table)',
        upstream="transformers' CPU grouped product is a custom op "
                 "(transformers::grouped_mm_fallback) whose body is a Python loop over the "
                 "experts; export keeps it opaque, and torch-mlir imports it as a torch.operator "
                 "that IREE cannot compile.",
        guard='test/python/frontend/test_grouped_experts.py::test_default_experts_match_eager',
        remove_when="(inferred) when transformers exports its grouped product as ATen ops "
                    "(torch's own aten._grouped_mm with a decomposition) on the CPU"),
)
