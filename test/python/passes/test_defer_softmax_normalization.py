"""anyshape-defer-softmax-normalization end to end: attention through torch's
scaled_dot_product_attention decomposition, its probabilities divided after the
product, matches eager, including fully masked rows (zeros) and NaN scores."""

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import anyshape

HEADS, HEAD_DIM = 2, 8


class PaddedAttention(torch.nn.Module):
    """Multi-head self-attention over a padding mask, as encoder models compute it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(HEADS * HEAD_DIM, 3 * HEADS * HEAD_DIM)

    def forward(self, x, keep):
        batch, length, _ = x.shape
        q, k, v = (t.view(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return out.transpose(1, 2).reshape(batch, length, HEADS * HEAD_DIM)


def _inputs(batch: int, length: int, generator: torch.Generator):
    x = torch.randn(batch, length, HEADS * HEAD_DIM, generator=generator) * 2
    keep = torch.ones(batch, length, dtype=torch.bool)
    for row in range(batch):  # padding at the end, a different amount per sequence
        keep[row, length - row * length // (batch + 1):] = False
    keep[:, 0] = True
    return x, keep


@pytest.fixture(scope="module")
def model():
    return PaddedAttention().eval()


@pytest.fixture(scope="module")
def compiled(model):
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=64)
    args = _inputs(2, 8, torch.Generator().manual_seed(0))
    return anyshape.compile(model, args, dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))


def test_product_reads_unnormalized_exponentials(compiled):
    before = compiled.ir("anyshape-hoist-slices")
    after = compiled.ir("anyshape-defer-softmax-normalization")
    assert "torch.aten.softmax.int" in before and "torch.aten.any.dim" in before
    assert "torch.aten.softmax.int" not in after and "torch.aten._softmax" not in after
    # The all -inf row test reads the row max instead of its own reduction.
    assert "torch.aten.any.dim" not in after
    assert "torch.aten.div.Tensor" in after and "torch.aten.bmm" in after


@pytest.mark.parametrize("batch,length", [(1, 1), (3, 17), (2, 64), (4, 33)])
def test_matches_eager(model, compiled, batch, length):
    args = _inputs(batch, length, torch.Generator().manual_seed(length))
    torch.testing.assert_close(compiled(*args), model(*args), atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_are_zero_as_in_eager(model, compiled):
    x, keep = _inputs(3, 6, torch.Generator().manual_seed(1))
    keep[1] = False
    expected = model(x, keep)
    assert (expected[1] == 0).all()
    torch.testing.assert_close(compiled(x, keep), expected, atol=1e-5, rtol=1e-5)


def test_nan_scores_stay_nan_as_in_eager(model, compiled):
    x, keep = _inputs(2, 5, torch.Generator().manual_seed(2))
    x[0, 3, 0] = float("nan")  # a NaN key and query: every row of sequence 0 reads it
    expected = model(x, keep)
    assert expected[0].isnan().all() and not expected[1].isnan().any()
    torch.testing.assert_close(compiled(x, keep), expected, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_padding_mask_is_a_contraction_step(compiled):
    """With data tiling (the CPU default) the [B, 1, 1, L] mask joins the score
    product as one more contraction step (anyshape-data-tiling-forms)."""
    forms = compiled.ir("anyshape-data-tiling-forms")
    assert f"!torch.vtensor<[?,?,{HEAD_DIM + 1}],f32>" in forms
    assert f"!torch.vtensor<[?,{HEAD_DIM + 1},?],f32>" in forms
