"""``SparseTopP`` (runtime/top_p.py) against HF's own ``TopPLogitsWarper``:
the same scores out, bit for bit, whichever path it takes."""

import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from anyshape.runtime.top_p import _sparse_top_p_class, with_sparse_top_p


def after_top_k(rows: int, vocab: int, top_k: int, scale: float, seed: int) -> torch.Tensor:
    """Scores as sampling hands them to top-p: top-k's -inf for all but k."""
    scores = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale
    return TopKLogitsWarper(top_k)(None, scores)


@pytest.mark.parametrize("vocab", [256, 32000, 50257])
@pytest.mark.parametrize("top_k", [1, 5, 50, 300])
@pytest.mark.parametrize("top_p, keep", [(0.9, 1), (0.3, 1), (0.99, 2), (0.05, 5)])
def test_sparse_top_p_is_hfs_top_p(vocab, top_k, top_p, keep):
    sparse = _sparse_top_p_class()(top_p, min_tokens_to_keep=keep)
    hf = TopPLogitsWarper(top_p, min_tokens_to_keep=keep)
    for seed in range(8):
        scores = after_top_k(1 + seed % 3, vocab, min(top_k, vocab), 1 + seed, seed)
        assert torch.equal(sparse(None, scores), hf(None, scores)), seed


def test_rows_it_cannot_sort_sparsely_are_left_to_hf():
    """/// Equal kept scores (whose order HF's unstable sort decides), a NaN,
    /// a dense row and another filter value: HF's own code, HF's result."""
    sparse = _sparse_top_p_class()(0.5)
    scores = after_top_k(2, 50257, 50, 3.0, 1)
    tied = torch.where(torch.isfinite(scores), scores.round(), scores)
    nan = scores.clone()
    nan[0, int(torch.nonzero(torch.isfinite(nan[0]))[0])] = float("nan")
    dense = torch.randn(2, 50257)
    assert sparse._sparse_row(scores[0]) is not None
    for case in (tied, nan, dense):
        assert sparse._sparse_row(case[0]) is None
        torch.testing.assert_close(sparse(None, case), TopPLogitsWarper(0.5)(None, case),
                                   rtol=0, atol=0, equal_nan=True)
    other = _sparse_top_p_class()(0.5, filter_value=-1e4)
    assert torch.equal(other(None, scores), TopPLogitsWarper(0.5, filter_value=-1e4)(None, scores))


def test_only_hfs_own_top_p_warpers_are_replaced():
    class Mine(TopPLogitsWarper):
        pass

    mine = Mine(0.8)
    replaced = with_sparse_top_p([TopPLogitsWarper(0.7, min_tokens_to_keep=3), mine])
    assert type(replaced[0]) is _sparse_top_p_class()
    assert (replaced[0].top_p, replaced[0].min_tokens_to_keep) == (0.7, 3)
    assert replaced[1] is mine
