"""``data_tiling=True``: IREE's data tiling on slice-hoisted models (RoBERTa
and GPT-2), exact against eager at dynamic sizes (``anyshape-data-tiling-forms``
runs first)."""

import re

import pytest
import torch
from conftest import MAX_LEN
from models import roberta_inputs, small_gpt2_last_token
from torch.export import Dim

import anyshape


@pytest.fixture(scope="module")
def tiled(roberta, roberta_dynamic_shapes):
    ids, mask = roberta_inputs(2, 8)
    return anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                            dynamic_shapes=roberta_dynamic_shapes, data_tiling=True)


def test_forms_pass_runs_after_hoisting(tiled):
    stages = tiled.stages
    assert stages.index("anyshape-data-tiling-forms") == stages.index("anyshape-hoist-slices") + 1
    assert "--iree-opt-data-tiling" in tiled.iree_flags
    forms = tiled.ir("anyshape-data-tiling-forms")
    # The last layer's one-row attention products are no batch matmuls any more.
    assert "!torch.vtensor<[?,1,?],f32>" in tiled.ir("anyshape-hoist-slices")
    assert "-> !torch.vtensor<[?,1,?],f32>" not in forms
    # Q, K and V of each layer are one linear on concatenated weights (in the
    # slice-hoisted last layer only K and V share their input).
    hidden = tiled.ir("anyshape-hoist-slices").count("torch.aten.linear")
    fused = re.findall(r"torch.aten.linear %\S+, %\S+, %\S+ : !torch.vtensor<\[\?,\?,128\],f32>, "
                       r"!torch.vtensor<\[(\d+),128\],f32>", forms)
    assert fused.count("384") == 1, fused  # layer 1: Q, K, V (layer 2: K, V, 256 wide, as the FFN)
    assert forms.count("torch.aten.linear") == hidden - 3


@pytest.mark.parametrize("batch,length", [(1, 1), (1, 17), (3, 60), (2, MAX_LEN)])
def test_data_tiled_matches_eager(roberta, tiled, batch, length):
    ids, mask = roberta_inputs(batch, length, pad_from=length // 2 if batch > 1 else None)
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask).logits
    torch.testing.assert_close(tiled(ids, attention_mask=mask).logits, expected, atol=1e-4, rtol=1e-4)


def test_data_tiling_must_be_a_bool(roberta):
    ids, mask = roberta_inputs(1, 4)
    with pytest.raises(ValueError, match=r"data_tiling: expected True or False, got 'yes'"):
        anyshape.compile(roberta, (ids,), {"attention_mask": mask}, data_tiling="yes")


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    return small_gpt2_last_token().eval()


@pytest.fixture(scope="module")
def gpt2_tiled(gpt2):
    ids, mask = roberta_inputs(2, 8, vocab=500)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=64)
    return anyshape.compile(gpt2, (ids, mask), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
                            data_tiling=True)


def test_gpt2_qkv_weight_read_whole(gpt2_tiled):
    """Slice hoisting splits GPT-2's fused QKV projection into column slices
    of its constant weight; with data tiling each reads the whole weight (IREE
    packs it once, at load time) and the last token's query rows come from the
    product over every row."""
    weight_columns = r"torch.aten.slice.Tensor %\S+, %int1, %int\d+, %int\d+, %int1 : !torch.vtensor<\[64,192\],f32>"
    assert re.search(weight_columns, gpt2_tiled.ir("anyshape-hoist-slices"))
    forms = gpt2_tiled.ir("anyshape-data-tiling-forms")
    assert not re.search(weight_columns, forms)
    # Every QKV product of a layer reads that layer's whole input (the same
    # value): none is a one-row product any more.
    qkv = re.findall(r"torch.aten.addmm %\S+, (%\S+), %\S+, %int1, %int1 : !torch.vtensor<\[192\],f32>, "
                     r"!torch.vtensor<\[\?,64\],f32>, !torch.vtensor<\[64,192\],f32>", forms)
    assert len(qkv) >= 6 and len(set(qkv)) == 2, qkv


@pytest.mark.parametrize("batch,length", [(1, 1), (1, 2), (3, 17), (2, 64)])
def test_gpt2_data_tiled_matches_eager(gpt2, gpt2_tiled, batch, length):
    ids, mask = roberta_inputs(batch, length, vocab=500, pad_from=length // 2 if batch > 1 else None)
    with torch.no_grad():
        expected = gpt2(ids, mask)
    torch.testing.assert_close(gpt2_tiled(ids, mask), expected, atol=1e-4, rtol=1e-4)
