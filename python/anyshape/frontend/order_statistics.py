"""k-th smallest values and medians, in ops torch-mlir lowers and IREE compiles.

torch-mlir lowers ``aten.kthvalue`` to a ``tm_tensor.topk`` whose region IREE
refuses, and has no lowering of ``aten.median`` or ``aten.nanmedian`` at all.
Its lowerings of ``topk`` and ``sort`` compile, at dynamic sizes too: these
decompositions (``decomposition_table``) use them. A median's position, ``(n -
1) // 2``, is a symbol where the dim is dynamic; the condition torch records
for it (``(n - 1) // 2 <= n``) holds at every size, which
``unproven_guards`` proves.
"""

from __future__ import annotations

import torch

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name='kthvalue_and_median_by_topk_and_sort', stage='export',
    where='decompositions (decomposition_table)',
    upstream="torch-mlir 20261001 lowers aten.kthvalue to a tm_tensor.topk whose region "
             "IREE 3.13 refuses (\"'tm_tensor.topk' op region block must end with a "
             "linalg_ext.yield i1\"), and has no lowering for aten.median or aten.nanmedian "
             "(either overload); its lowerings of topk and sort compile.",
    guard=('test/python/test_op_coverage.py::test_matches_eager[reduce-kthvalue]',
           'test/python/frontend/test_order_statistics.py::'
           'test_medians_match_eager_at_every_length'),
    remove_when="torch-mlir's kthvalue and median lowerings compile in IREE"),)


def decompositions() -> dict:
    aten = torch.ops.aten
    return {
        aten.kthvalue.default: kthvalue_by_topk,
        aten.median.dim: lambda x, dim, keepdim=False: _median(x, dim, keepdim, skip_nan=False),
        aten.nanmedian.dim: lambda x, dim, keepdim=False: _median(x, dim, keepdim, skip_nan=True),
        aten.median.default: lambda x: _median(x.reshape(-1), 0, False, skip_nan=False)[0],
        aten.nanmedian.default: lambda x: _median(x.reshape(-1), 0, False, skip_nan=True)[0],
    }


def kthvalue_by_topk(x, k, dim=-1, keepdim=False):
    """The k-th smallest along ``dim`` and its index, from the k smallest (topk).
    NaN is larger than every number, as in eager's kthvalue."""
    if x.dim() == 0:
        values, indices = kthvalue_by_topk(x.reshape(1), k, 0, False)
        return values.reshape(()), indices.reshape(())
    values, indices = torch.topk(x, k, dim, largest=False, sorted=True)
    values, indices = values.narrow(dim, k - 1, 1), indices.narrow(dim, k - 1, 1)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


def _median(x, dim, keepdim, skip_nan):
    """The lower median along ``dim`` (the ``(n - 1) // 2``-th of the sorted
    values) and its index. As in eager: ``median`` is NaN, at the first NaN's
    index, where a row holds one; ``nanmedian`` is the median of the numbers,
    and NaN at index 0 where a row holds nothing else."""
    if x.dim() == 0:
        values, indices = _median(x.reshape(1), 0, False, skip_nan)
        return values.reshape(()), indices.reshape(())
    dim = dim % x.dim()
    size = x.shape[dim]
    # A stable sort puts the NaNs last, the first of them first.
    values, indices = torch.sort(x, dim=dim, stable=True)
    if x.dtype.is_floating_point:
        numbers = (~torch.isnan(x)).sum(dim, keepdim=True)
        if skip_nan:
            position = torch.clamp(numbers - 1, min=0) // 2
        else:
            position = torch.where(numbers < size, numbers, (size - 1) // 2)
    else:
        shape = list(x.shape)
        shape[dim] = 1
        position = torch.full(shape, (size - 1) // 2, dtype=torch.int64, device=x.device)
    values, indices = values.gather(dim, position), indices.gather(dim, position)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices
