"""Mamba-2's chunked scan at every length (frontend/chunked_scans.py): the
families whose mixer is transformers' ``mamba2_chunk_scan`` (Mamba-2, Bamba,
Falcon-H1, GraniteMoE-Hybrid, Nemotron-H, Zamba-2) compile with an unbounded
``Dim("seq")``; torch.export refused them (the example's chunk count)."""

import pytest
import torch
from torch.export import Dim
from transformers import Mamba2Config, Mamba2ForCausalLM
from transformers.models.mamba2 import modeling_mamba2

import anyshape
from anyshape.frontend import chunked_scans


def _scan_inputs(batch, length, heads=4, head_dim=6, groups=2, state=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(hidden_states=torch.randn(batch, length, heads, head_dim, generator=g),
                dt=torch.randn(batch, length, heads, generator=g),
                A=-torch.rand(heads, generator=g) * 4,
                B=torch.randn(batch, length, groups, state, generator=g),
                C=torch.randn(batch, length, groups, state, generator=g),
                D=torch.randn(heads, generator=g), dt_bias=torch.randn(heads, generator=g),
                initial_states=torch.randn(batch, heads, head_dim, state, generator=g))


@pytest.mark.parametrize("length", [1, 7, 8, 9, 17, 33])
def test_the_scan_is_transformers_scan(length):
    """/// Same outputs and final state as transformers' PyTorch path, on either
    /// side of a chunk boundary (chunk 8)."""
    inputs = _scan_inputs(2, length, seed=length)
    options = dict(chunk_size=8, dt_softplus=True, dt_limit=(0.0, 6.0), return_final_states=True)
    reference = modeling_mamba2.mamba2_chunk_scan.__wrapped__
    want_out, want_state = reference(**inputs, **options)
    got_out, got_state = chunked_scans.chunk_scan_any_length(**inputs, **options)
    torch.testing.assert_close(got_out, want_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got_state, want_state, atol=2e-5, rtol=2e-5)


def test_negative_packed_sequences_are_refused():
    """/// transformers' PyTorch path refuses seq_idx; so does the substitute,
    /// rather than mixing the packed sequences' states."""
    inputs = _scan_inputs(1, 9)
    with pytest.raises(ValueError, match="seq_idx"):
        chunked_scans.chunk_scan_any_length(**inputs, chunk_size=8,
                                            seq_idx=torch.zeros(1, 9, dtype=torch.int32))


def _mamba2(chunk_size):
    torch.manual_seed(0)
    config = Mamba2Config(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_heads=8,
                          head_dim=8, state_size=16, n_groups=2, expand=2,
                          chunk_size=chunk_size, pad_token_id=0)
    model = Mamba2ForCausalLM(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits
    return Logits().eval()


@pytest.mark.builds_after_export
@pytest.mark.parametrize("chunk_size, shapes", [
    (8, [(1, 1), (1, 7), (1, 8), (3, 17), (2, 33)]),
    (256, [(1, 1), (2, 7), (1, 333)]),          # transformers' default chunk
])
def test_mamba2_compiles_with_an_unbounded_seq(chunk_size, shapes):
    """/// What a user types first: Dim("batch"), Dim("seq"), no bounds, an
    /// example shorter than one chunk; then lengths in one chunk and across
    /// several, with a padded row, against eager."""
    model = _mamba2(chunk_size)
    ids = torch.randint(1, 300, (2, 5))
    batch, seq = Dim("batch"), Dim("seq")
    compiled = anyshape.compile(model, (ids, torch.ones_like(ids)),
                                dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    for b, length in shapes:
        g = torch.Generator().manual_seed(length)
        ids = torch.randint(1, 300, (b, length), generator=g)
        mask = torch.ones_like(ids)
        if b > 1:
            mask[0, : length // 2] = 0   # left-padded, as generation pads
        with torch.no_grad():
            want = model(ids, mask)
        got = compiled(ids, mask)
        real = mask.bool()
        torch.testing.assert_close(got[real], want[real], atol=2e-4, rtol=2e-4)


def test_negative_a_changed_copy_is_left_alone():
    """/// A module whose mamba2_chunk_scan is not transformers' code keeps its own."""
    import types

    def mamba2_chunk_scan(hidden_states, *args, **kwargs):
        return hidden_states

    module = types.ModuleType("transformers.models.not_mamba.modeling_not_mamba")
    module.mamba2_chunk_scan = mamba2_chunk_scan
    import sys
    sys.modules[module.__name__] = module
    try:
        with chunked_scans.any_length_scans():
            assert module.mamba2_chunk_scan is mamba2_chunk_scan
            assert modeling_mamba2.mamba2_chunk_scan is chunked_scans.chunk_scan_any_length
        assert modeling_mamba2.mamba2_chunk_scan is not chunked_scans.chunk_scan_any_length
    finally:
        del sys.modules[module.__name__]
