"""Shape facts on HuggingFace models after anyshape-canonicalize-shapes and anyshape-lower."""

import re

import pytest
import torch
from torch.export import Dim

import anyshape


def _bert():
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        vocab_size=500, max_position_embeddings=64))


def _roberta():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return RobertaForSequenceClassification(RobertaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        vocab_size=500, max_position_embeddings=66))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=2, vocab_size=500,
                                      n_positions=64, use_cache=False, bos_token_id=0,
                                      eos_token_id=0))


MODELS = {"bert": _bert, "roberta": _roberta, "gpt2": _gpt2}


def _shape_value_lists(text: str) -> int:
    """Views/reshapes/expands whose size list holds a value that is not a constant."""
    constants = set(re.findall(r"(%[\w-]+) = torch\.constant\.int", text))
    lists = dict(re.findall(r"(%[\w-]+) = torch\.prim\.ListConstruct ([^:]*) :", text))
    count = 0
    for size_list in re.findall(r"torch\.aten\.(?:view|reshape|expand) %[\w-]+, (%[\w-]+)", text):
        items = [i.strip() for i in lists.get(size_list, "").split(",") if i.strip()]
        count += any(i not in constants for i in items)
    return count


def _counts(text: str) -> dict[str, int]:
    args = set(re.findall(r"(%arg\d+):", text))
    size_ops = re.findall(r"torch\.aten\.size\.int (%[\w-]+),", text)
    return {
        "size queries of non-arguments": sum(v not in args for v in size_ops),
        "aranges": len(re.findall(r"torch\.aten\.arange", text)),
        "views/expands with shape-value sizes": _shape_value_lists(text),
        "anyshape ops": len(re.findall(r'"anyshape\.', text)),
    }


@pytest.fixture(scope="module", params=sorted(MODELS))
def compiled(request):
    torch.manual_seed(0)
    model = MODELS[request.param]().eval()
    ids = torch.randint(3, 500, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=60)
    dynamic = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return request.param, model, anyshape.compile(model, (ids,), {"attention_mask": mask},
                                                  dynamic_shapes=dynamic)


def test_shape_facts(compiled):
    name, _, module = compiled
    before = _counts(module.ir("import"))
    canonical = module.ir("anyshape-canonicalize-shapes")
    after, final = _counts(canonical), _counts(module.ir("anyshape-lower"))
    for key in before:
        print(f"{name}: {key}: import {before[key]}, canonicalized {after[key]}, lowered {final[key]}")
    assert before["aranges"] > 0 and before["views/expands with shape-value sizes"] > 0
    assert after["size queries of non-arguments"] == 0
    assert after["aranges"] == 0
    # What remains are expands that really broadcast (RoBERTa's and BERT's
    # [1, L] position ids to [B, L]); every view is structural now.
    assert after["views/expands with shape-value sizes"] <= canonical.count("torch.aten.expand")
    assert not re.search(r"torch\.aten\.(view|reshape) ", canonical)
    assert final["anyshape ops"] == 0


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("length", [1, 2, 17, 60])
def test_matches_eager(compiled, batch, length):
    _, model, module = compiled
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(3, 500, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2 + 1:] = 0
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(module(ids, attention_mask=mask).logits, expected,
                               atol=1e-4, rtol=0)
