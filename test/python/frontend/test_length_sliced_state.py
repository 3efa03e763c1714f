"""Models that slice their own buffers and weights by the length, with unbounded dims.

OpenAI-GPT and GPT-Neo slice a causal-mask buffer by the length; MobileBERT
concatenates two weights in its LM head and probes ``seq - 1`` for length 1; MPT
slices a one-row ALiBi bias from ``max(0, 1 - seq)``. Each used to refuse an
unbounded ``Dim("seq")`` or to fail at run time (layout_probes.py,
graph_fixes/constant_sizes.py, importer._read_as_attribute, config_bounds'
boundary test). Each module here is the model's form at a small size.
"""

import types
import warnings

import pytest
import torch
import torch._prims_common as prims_common
from torch.export import Dim

import anyshape
from anyshape.errors import DimBoundedByConfig

POSITIONS = 40
SEQ = {"x": {0: Dim("batch"), 1: Dim("seq")}}


class CausalBufferSlice(torch.nn.Module):
    """OpenAI-GPT's ``_attn``: ``self.bias[:, :, :w.size(-2), :w.size(-1)]``."""

    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(n_positions=POSITIONS)
        self.register_buffer("bias", torch.tril(torch.ones(POSITIONS, POSITIONS))
                             .view(1, 1, POSITIONS, POSITIONS))

    def forward(self, x):
        w = (x @ x.transpose(-1, -2)).unsqueeze(1)
        b = self.bias[:, :, : w.size(-2), : w.size(-1)]
        return (w * b + -1e4 * (1 - b)).softmax(-1)


class OneRowBias(torch.nn.Module):
    """MPT's ALiBi: a ``[heads, 1, positions]`` bias sliced from the end by the length."""

    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(max_seq_len=POSITIONS)
        self.register_buffer("bias", torch.randn(4, 1, POSITIONS))

    def forward(self, x):
        scores = (x @ x.transpose(-1, -2)).unsqueeze(1).expand(-1, 4, -1, -1)
        q, k = x.size(1), x.size(1)
        bias = self.bias[:, max(0, self.bias.size(1) - q):, max(0, self.bias.size(2) - k):]
        return scores + bias


class WeightsConcatenated(torch.nn.Module):
    """MobileBERT's LM head: ``h @ torch.cat([decoder.weight.t(), dense.weight])``."""

    def __init__(self):
        super().__init__()
        self.decoder = torch.nn.Linear(6, 10)
        self.dense = torch.nn.Linear(10, 2, bias=False)

    def forward(self, x):
        return x @ torch.cat([self.decoder.weight.t(), self.dense.weight], dim=0)


def _compiled(model, width, **kwargs):
    torch.manual_seed(0)
    example = torch.randn(2, 16, width)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = anyshape.compile(model.eval(), (example,), dynamic_shapes=SEQ, **kwargs)
    return compiled, [str(w.message) for w in caught if issubclass(w.category, DimBoundedByConfig)]


def _assert_matches(model, compiled, width, lengths):
    for length in lengths:
        x = torch.randn(length % 3 + 1, length, width)
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)


def test_a_buffer_sliced_by_the_length_needs_only_the_configs_bound():
    # Without static layout probes torch.export also required seq != 40: the
    # slice is contiguous only at the buffer's full length.
    model = CausalBufferSlice()
    compiled, bounded = _compiled(model, 8)
    assert len(bounded) == 1 and "config.n_positions = 40" in bounded[0]
    _assert_matches(model, compiled, 8, (1, 7, 17, 39, 40))


def test_layout_probes_are_torchs_own_again_after_export():
    before = {name: getattr(prims_common, name) for name in
              ("is_contiguous", "check_contiguous_sizes_strides")}
    _compiled(WeightsConcatenated(), 8)
    assert before == {name: getattr(prims_common, name) for name in before}


def test_a_one_row_bias_broadcasts_at_every_length():
    # torch cannot solve seq == 40 - max(0, 40 - seq) for a bound (no suggested
    # fix); it flips just past config.max_seq_len. The bias's one row used to be
    # a dynamic dim that torch-mlir took for seq: only length 1 ran.
    model = OneRowBias()
    compiled, bounded = _compiled(model, 8)
    assert len(bounded) == 1 and "config.max_seq_len = 40" in bounded[0]
    _assert_matches(model, compiled, 8, (1, 2, 7, 33, 40))


def test_strict_dims_refuses_the_one_row_bias_unbounded():
    with pytest.raises(anyshape.CompileError, match="seq"):
        _compiled(OneRowBias(), 8, strict_dims=True)


def test_weights_concatenated_in_a_list_import():
    model = WeightsConcatenated()
    compiled, bounded = _compiled(model, 8)
    assert bounded == []
    _assert_matches(model, compiled, 8, (1, 7, 33))


class FlippedWindows(torch.nn.Module):
    """Inkling-2's short convolution: the last 4 positions of each, newest first."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        context = torch.nn.functional.pad(x.transpose(1, 2), (3, 0))
        windows = context.unfold(-1, 4, 1).flip(-1).transpose(1, 2)
        return (windows * self.weight).sum(-1)


def test_flipped_windows_compile_with_an_unbounded_seq():
    """/// Where torch laid out the flipped windows, comparing their strides
    /// recorded seq >= 4 (the example's), which the model does not need."""
    torch.manual_seed(0)
    model = FlippedWindows().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 16, 8),),
                                dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    for batch, length in [(1, 1), (2, 3), (1, 7), (3, 33)]:
        x = torch.randn(batch, length, 8)
        torch.testing.assert_close(compiled(x), model(x))
