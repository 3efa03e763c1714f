"""anyshape-logsumexp-softmax end to end: the rewritten softmax matches eager,
NaN rows included, and IREE no longer forms a softmax dispatch for it."""

import pytest
import torch
from torch.export import Dim

import anyshape


class MaskedAttentionWeights(torch.nn.Module):
    """Softmax of masked scores over the dynamic key axis, as attention computes it."""

    def forward(self, q, k, keep):
        scores = (q @ k.transpose(-1, -2)) * 0.25
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        return torch.softmax(scores, dim=-1)


def _inputs(batch: int, length: int, generator: torch.Generator):
    q = torch.randn(batch, length, 16, generator=generator) * 4
    k = torch.randn(batch, length, 16, generator=generator) * 4
    keep = torch.rand(batch, length, generator=generator) > 0.3
    keep[:, 0] = True
    return q, k, keep


@pytest.fixture(scope="module")
def compiled():
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=96)
    args = _inputs(2, 8, torch.Generator().manual_seed(0))
    dynamic = ({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq})
    return anyshape.compile(MaskedAttentionWeights().eval(), args, dynamic_shapes=dynamic)


def test_softmax_over_dynamic_axis_is_rewritten(compiled):
    before, after = compiled.ir("anyshape-hoist-slices"), compiled.ir("anyshape-logsumexp-softmax")
    assert "torch.aten.softmax.int" in before
    assert "torch.aten.softmax.int" not in after and "torch.aten._softmax" not in after
    assert "torch.aten.amax" in after and "torch.aten.log" in after


@pytest.mark.parametrize("batch,length", [(1, 1), (3, 17), (2, 96)])
def test_matches_eager(compiled, batch, length):
    args = _inputs(batch, length, torch.Generator().manual_seed(length))
    torch.testing.assert_close(compiled(*args), MaskedAttentionWeights()(*args),
                               atol=1e-6, rtol=1e-5)


def test_fully_masked_rows_are_nan_as_in_eager(compiled):
    q, k, keep = _inputs(2, 5, torch.Generator().manual_seed(1))
    keep[1] = False
    expected = MaskedAttentionWeights()(q, k, keep)
    assert expected[1].isnan().all()
    torch.testing.assert_close(compiled(q, k, keep), expected, atol=1e-6, rtol=1e-5,
                               equal_nan=True)


class HalfScoresSoftmaxInFloat(torch.nn.Module):
    """BLOOM's attention softmax in float16: float16 scores, softmax computed
    (and returned) in float32, over a dynamic key axis at a static batch."""

    def forward(self, scores):
        return torch.softmax(scores * 0.5, dim=-1, dtype=torch.float32)


@pytest.fixture(scope="module")
def half_scores():
    scores = torch.randn(4, 8).to(torch.float16)
    return anyshape.compile(HalfScoresSoftmaxInFloat().eval(), (scores,),
                            dynamic_shapes=({1: Dim("keys")},))


def test_a_softmax_converting_its_dtype_is_rewritten_after_the_conversion(half_scores):
    after = half_scores.ir("anyshape-logsumexp-softmax")
    assert "torch.aten.softmax.int" not in after and "torch.aten.to.dtype" in after


@pytest.mark.parametrize("keys", [1, 7, 333])
def test_a_softmax_converting_its_dtype_matches_eager(half_scores, keys):
    scores = (torch.randn(4, keys, generator=torch.Generator().manual_seed(keys)) * 8).half()
    expected = HalfScoresSoftmaxInFloat()(scores)
    assert expected.dtype == torch.float32
    torch.testing.assert_close(half_scores(scores), expected, atol=1e-6, rtol=1e-5)
