"""A decoder's sequence-classification head, as transformers writes it: the
cache it returns by default left out, ``argmax`` of a computed value and
``logits[arange(batch), last]`` rewritten into forms IREE compiles
(frontend/cache_output.py, graph_fixes/argmax_as_reductions.py,
graph_fixes/paired_indices.py)."""

import os
import sys

import pytest
import torch
from torch.export import Dim

import anyshape

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from opinfo import plain  # noqa: E402


def _plain_compile(module, inputs, dynamic_shapes):
    from anyshape.iree.flags import iree_flags, make_target

    bytecode, kinds = plain.lower(plain.export(module, inputs, dynamic_shapes))
    return plain.compile_bytecode(bytecode, kinds, iree_flags(make_target("cpu", data_tiling=False)))


def test_sequence_classification_head():
    """/// LlamaForSequenceClassification from its config, as a user compiles it:
    /// right for batch 1, odd lengths and padded rows, with a warning that the
    /// cache the config asks for is left out."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1,
                                      vocab_size=100, pad_token_id=0, num_labels=3)
    model = transformers.LlamaForSequenceClassification(config).eval()
    ids = torch.randint(1, 100, (2, 8))
    batch, seq = Dim("batch"), Dim("seq")
    with pytest.warns(UserWarning, match=r"use_cache=True, so it returns its key/value cache"):
        compiled = anyshape.compile(model, (ids,), {"attention_mask": torch.ones_like(ids)},
                                    dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                    "attention_mask": {0: batch, 1: seq}})
    assert model.config.use_cache is True
    generator = torch.Generator().manual_seed(1)
    for b, length in [(1, 1), (1, 7), (3, 17), (2, 33)]:
        ids = torch.randint(1, 100, (b, length), generator=generator)
        ids[0, length // 2 + 1:] = 0  # row 0 padded on the right
        mask = (ids != 0).long()
        with torch.no_grad():
            expected = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, expected,
                                   atol=1e-5, rtol=1e-5, msg=lambda m: f"{b}x{length}: {m}")


class LastRows(torch.nn.Module):
    def forward(self, x, cols):
        return x[torch.arange(x.shape[0]), cols]


class LargestPerRow(torch.nn.Module):
    def forward(self, x, scores):
        return x[torch.arange(x.shape[0]), (scores * scores).argmax(-1)]


def test_the_row_of_each_argmax_reads_like_eager():
    model = LargestPerRow()
    dims = ({0: Dim("batch"), 1: Dim("seq")}, {0: Dim("batch"), 1: Dim("seq")})
    compiled = anyshape.compile(model, (torch.randn(2, 5, 3), torch.randn(2, 5)),
                                dynamic_shapes=dims)
    for b, length in [(1, 1), (3, 7), (4, 33)]:
        x, scores = torch.randn(b, length, 3), torch.randn(b, length)
        torch.testing.assert_close(compiled(x, scores), model(x, scores))


def test_negative_columns_from_the_user_are_left_to_torch_mlir():
    """/// Columns that could be out of range: not rewritten (a flattened read
    /// would take the next row's), so torch-mlir's refusal names the op."""
    with pytest.raises(anyshape.CompileError, match=r"index\.Tensor"):
        anyshape.compile(LastRows(), (torch.randn(2, 5, 3), torch.tensor([1, 4])),
                         dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")}, {0: Dim("batch")}))


class Argmaxes(torch.nn.Module):
    def forward(self, x):
        y = x * x - x
        return y.argmax(-1), y.argmin(1, keepdim=True), (y > 0).long().argmax(-1)


def test_argmax_of_a_computed_value():
    """/// argmax/argmin over a dynamic dim of a computed value: eager's first
    /// index on ties, and the first NaN where a row has one."""
    model = Argmaxes()
    compiled = anyshape.compile(model, (torch.randn(2, 5),),
                                dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    for b, length in [(1, 1), (3, 7), (2, 33)]:
        x = torch.randn(b, length)
        x[0, :] = 0.5  # a row of ties
        if length > 2:
            x[-1, 1], x[-1, 2] = float("nan"), float("nan")
        for got, want in zip(compiled(x), model(x)):
            assert torch.equal(got, want), (b, length, got, want)


def test_the_plain_stack_refuses_both_forms():
    """/// Why the rewrites exist. When either stops raising, IREE or torch-mlir
    /// compiles it, and that rewrite can go."""
    # anyshape's own flags give "offset 1 is out-of-bounds: 0 >= -1"
    with pytest.raises(plain.StageError, match=r"offset 1 is out-of-bounds|stack allocation "
                                               r"size overflows 64 bits"):
        _plain_compile(Argmaxes(), (torch.randn(2, 5),), ({0: Dim("batch"), 1: Dim("seq")},))
    with pytest.raises(plain.StageError, match=r"failed to legalize operation "
                                               r"'torch.aten.index.Tensor_hacked_twin'"):
        _plain_compile(LastRows(), (torch.randn(2, 5, 3), torch.tensor([1, 4])),
                       ({0: Dim("batch"), 1: Dim("seq")}, {0: Dim("batch")}))
