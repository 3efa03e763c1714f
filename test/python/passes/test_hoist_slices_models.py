"""anyshape-hoist-slices on HuggingFace models: only the rows a model returns
are computed in its last layer, measured with the FLOP counter.

RoBERTa and Electra classifiers read ``features[:, 0, :]``; GPT-2 prefill
reads ``logits[:, -1, :]``. Each row kept by the slice moves into the last
layer: the feed-forward block, the attention output projection, the Q
projection and the attention rows run on one row per batch; K and V still
see every token. So the matmul FLOPs saved are exactly, per batch element,
``(L - 1) * 2 * (2*H*H [Q, O] + 2*H*I [FFN] + 2*L*H [scores and their
product with V])``, plus, for GPT-2, ``(L - 1) * 2*H*V`` for the LM head.
"""

import pytest
import sympy
import torch
from models import small_gpt2_last_token
from torch.export import Dim

import anyshape
from anyshape.passes.print_flops.flops import count_flops

# Every test here builds with IREE: `make check` skips the module before exporting.
pytestmark = pytest.mark.builds_after_export

HIDDEN, INTERMEDIATE, LAYERS, VOCAB = 64, 128, 2, 500


def _roberta():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return RobertaForSequenceClassification(RobertaConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
        intermediate_size=INTERMEDIATE, vocab_size=VOCAB, max_position_embeddings=66))


def _electra():
    from transformers import ElectraConfig, ElectraForSequenceClassification

    return ElectraForSequenceClassification(ElectraConfig(
        embedding_size=32, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
        intermediate_size=INTERMEDIATE, vocab_size=VOCAB, max_position_embeddings=64))


def _gpt2():
    return small_gpt2_last_token(hidden=HIDDEN, layers=LAYERS, heads=2, inner=INTERMEDIATE,
                                 vocab=VOCAB, positions=64)


MODELS = {"roberta": _roberta, "electra": _electra, "gpt2": _gpt2}


@pytest.fixture(scope="module", params=sorted(MODELS))
def compiled(request):
    torch.manual_seed(0)
    model = MODELS[request.param]().eval()
    ids = torch.randint(3, VOCAB, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=60)
    dynamic = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    module = anyshape.compile(model, (ids,), {"attention_mask": mask}, dynamic_shapes=dynamic)
    return request.param, model, module


def _batch_and_length(report):
    by_root = {root: symbol for symbol, root in report.symbols.items()}
    return by_root[(0, 0)], by_root[(0, 1)]


def test_last_layer_computes_only_the_kept_rows(compiled):
    name, _, module = compiled
    assert "anyshape-hoist-slices" in module.stages  # on by default
    before = count_flops(module.ir("anyshape-canonicalize-shapes"))
    after = count_flops(module.ir("anyshape-hoist-slices"))
    assert before.complete and after.complete, (before.unknown, after.unknown)
    # Both stages still carry torch.export's bindings: the same symbol names.
    assert _batch_and_length(after) == _batch_and_length(before)
    b, length = _batch_and_length(before)
    per_row = 2 * (2 * HIDDEN * HIDDEN + 2 * HIDDEN * INTERMEDIATE) + 2 * 2 * length * HIDDEN
    if name == "gpt2":
        per_row += 2 * HIDDEN * VOCAB
    for size in (32, 128):
        flops_before = before.evaluate(**{b.name: 1, length.name: size})
        flops_after = after.evaluate(**{b.name: 1, length.name: size})
        print(f"{name}: L={size}, batch 1: {flops_before / 1e6:.2f} MFLOP before, "
              f"{flops_after / 1e6:.2f} MFLOP after ({1 - flops_after / flops_before:.1%} less)")
    saved = sympy.expand(before.matmul - after.matmul)
    assert sympy.expand(saved - b * (length - 1) * per_row) == 0, saved


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("length", [1, 2, 17, 60])
def test_matches_eager(compiled, batch, length):
    _, model, module = compiled
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2 + 1:] = 0
    with torch.no_grad():
        expected = model(ids, attention_mask=mask)
    got = module(ids, attention_mask=mask)
    if not torch.is_tensor(expected):
        expected, got = expected.logits, got.logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
