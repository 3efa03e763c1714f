"""``BackendOptions(matmul_precision="medium")``: bfloat16 products with float32 accumulation.

Opt-in, as ``torch.set_float32_matmul_precision("medium")`` is. The products
must really run in bfloat16 (IREE's demotion flags alone changed nothing on
anyshape's IR: its named products were generalized before the demotion ran),
so the build's error against float64 must be bfloat16's, above float32's, and
it is refused where it would be emulated.
"""

import copy

import numpy as np
import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree.cpu import host_flags
from anyshape.iree.flags import BF16_PRODUCT_FLAGS, iree_flags, make_target, with_matmul_precision
from anyshape.tools.compile import summary

HOST_HAS_BF16 = "avx512_bf16" in (host_flags() or set())


class _Attention(torch.nn.Module):
    """Products of every kind the demotion covers: linear layers (matmul with a
    transposed weight) and the batched products of attention."""

    def __init__(self, hidden=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, length, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / (hidden // self.heads) ** 0.5
        mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, hidden)
        return self.out(mixed)


def test_bad_precisions_are_named():
    with pytest.raises(ValueError, match="matmul_precision: expected one of highest, medium .* "
                                         "got 'high'"):
        with_matmul_precision(make_target("cpu"), "high")


def test_medium_is_refused_where_bfloat16_would_be_emulated():
    with pytest.raises(ValueError, match=r"AVX-512 BF16 \(avx512bf16\), which "
                                         r"target_cpu='znver3' \(znver3\) lacks"):
        with_matmul_precision(make_target("cpu", target_cpu="znver3"), "medium")
    with pytest.raises(ValueError, match="'medium' is built for CPU targets only, got "
                                         "target='cuda'"):
        with_matmul_precision(make_target("cuda"), "medium")


def test_the_refusal_comes_before_the_export():
    class Unexportable(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("exported")

    with pytest.raises(ValueError, match="target_cpu='znver3'"):
        anyshape.compile(Unexportable(), (torch.randn(2, 3),),
                         backend=anyshape.BackendOptions(matmul_precision="medium",
                                                         target_cpu="znver3"))


def test_highest_is_the_default_and_adds_no_flags():
    target = make_target("cpu", data_tiling=True)
    assert anyshape.BackendOptions().matmul_precision == "highest"
    assert not set(BF16_PRODUCT_FLAGS) & set(iree_flags(target))


@pytest.mark.skipif(not HOST_HAS_BF16, reason="this host's CPU has no AVX-512 BF16")
def test_medium_products_have_bfloat16_error_and_load_as_built(tmp_path):
    torch.manual_seed(0)
    model = _Attention().eval()
    module = anyshape.compile(model, (torch.randn(2, 9, 64),),
                              dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}},
                              backend=anyshape.BackendOptions(matmul_precision="medium"))
    assert set(BF16_PRODUCT_FLAGS) <= set(module.iree_flags)
    module.save(tmp_path / "medium")
    loaded = anyshape.load(tmp_path / "medium")
    assert loaded.target.matmul_precision == "medium"
    assert "matmul precision: medium (matrix products take bfloat16 inputs" in \
        summary(loaded, tmp_path / "medium", None)
    reference = copy.deepcopy(model).double()
    for batch, length in [(1, 1), (2, 7), (3, 33)]:
        x = torch.randn(batch, length, 64)
        with torch.no_grad():
            want = reference(x.double()).numpy()
            float32_error = np.abs(model(x).numpy() - want).max()
        got = np.asarray(loaded(x))
        error = np.abs(got - want).max() / np.abs(want).max()
        # bfloat16 keeps 8 bits of mantissa (a relative rounding of 2^-9 per
        # input); the sums are float32's. Float32 products are ~1e-7 off here.
        assert 1e-5 < error < 2e-2, (batch, length, error)
        assert error * np.abs(want).max() > 100 * float32_error
