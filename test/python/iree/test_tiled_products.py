"""The products target="cuda" pads to whole tiles (``iree/tiled_products.py``) compute what
eager computes: run here on the CPU, the same rewrite forced on a CPU build.

The helpers are plain linalg, so IREE's CPU backend runs them as the GPU would
(another order of the same sums). Odd lengths, batch 1 and padded batches; the
rewrite's every form: dynamic rows (linears, GPT-2's addmm and its LM head, the
attention's two products, float16 data computed in float16 with float32
sums), a dynamic reduced dim cut into chunks (P V over 333 keys: two chunks),
a static N padded (GPT-2's vocabulary of 1001), and 2 static rows padded to 16
behind a barrier (the first tokens slice hoisting leaves at batch 2).
"""

import copy
import re

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree import flags


@pytest.fixture
def tiled_on_cpu(monkeypatch):
    """CPU builds made with the CUDA targets' rewrite (IREE's own products, so
    that anyshape's CPU kernel does not take them first)."""
    on_cuda = flags.Target.tiles_products
    monkeypatch.setattr(flags.Target, "tiles_products",
                        lambda target: target.name == "cpu" or on_cuda(target))


def _roberta():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(0)
    return RobertaForSequenceClassification(RobertaConfig(
        num_hidden_layers=2, hidden_size=96, num_attention_heads=3, intermediate_size=200,
        vocab_size=1000, max_position_embeddings=600, num_labels=3)).eval()


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=96, n_head=3, vocab_size=1001,
                                      use_cache=False)).eval()


def _build(model, dims: str, dtype):
    ids = torch.randint(3, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    seq = Dim("seq")
    if dims == "seq":
        dynamic = {"input_ids": {1: seq}, "attention_mask": {1: seq}}
    else:
        batch = Dim("batch")
        dynamic = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return anyshape.compile(model, (ids,), {"attention_mask": mask}, dynamic_shapes=dynamic,
                            dtype=dtype, cache=False,
                            backend=anyshape.BackendOptions(product_kernel="iree",
                                                            data_tiling=False))


CASES = {  # name: (model, dims, dtype, shapes (batch, length))
    "roberta-float32": (_roberta, "batch-seq", torch.float32,
                        [(1, 1), (1, 7), (3, 17), (2, 65), (1, 333)]),
    "roberta-float16-static-batch": (_roberta, "seq", torch.float16,
                                     [(2, 1), (2, 7), (2, 17), (2, 333)]),
    "gpt2-float16": (_gpt2, "batch-seq", torch.float16, [(1, 1), (1, 7), (3, 17), (1, 333)]),
}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("case", list(CASES))
def test_tiled_products_match_eager(tiled_on_cpu, case):
    """/// Every product the rewrite takes matches eager; in float16 the error
    /// against float64 stays within a few times eager's own."""
    make, dims, dtype, shapes = CASES[case]
    model = make()
    compiled = _build(model, dims, dtype)
    text = compiled.ir("iree-input")
    assert text.count("call @anyshape_tiled_") >= 8, "the rewrite did not take the products"
    if case == "roberta-float16-static-batch":
        assert "iree_tensor_ext.compute_barrier.start" in text  # the 2 hoisted rows
    if case == "gpt2-float16":
        assert re.search(r"tensor<\?x\?x\?x128x32xf32>", text)  # P V's keys in chunks
    eager = copy.deepcopy(model).to(dtype)
    exact = copy.deepcopy(model).double()
    for batch, length in shapes:
        ids = torch.randint(3, 1000, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        if batch > 1:
            mask[0, length - length // 3:] = 0
        with torch.no_grad():
            expected = eager(ids, attention_mask=mask).logits.double()
            reference = exact(ids, attention_mask=mask).logits
        got = compiled(ids, attention_mask=mask).logits.double()
        keep = mask.bool() if got.dim() == 3 else slice(None)  # real tokens' logits
        error = (got[keep] - reference[keep]).abs().max().item()
        eager_error = (expected[keep] - reference[keep]).abs().max().item()
        if dtype == torch.float32:
            assert (got[keep] - expected[keep]).abs().max().item() <= 1e-5, (batch, length)
        else:
            assert error <= max(4 * eager_error, 1e-3), (batch, length, error, eager_error)
