"""Shape facts on HuggingFace models after anyshape-canonicalize-shapes and anyshape-lower."""

import re

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.mlir import parse_module
from anyshape.dialects import new_context
from anyshape.driver.pipeline import run_pipeline

# Every test here builds with IREE: `make check` skips the module before exporting.
pytestmark = pytest.mark.builds_after_export


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


_SIZED_OPS = ("view", "reshape", "expand", "broadcast_to", "ones", "zeros", "full", "empty.memory_format",
              "new_ones", "new_zeros", "new_full", "new_empty")


def _shape_value_lists(text: str) -> int:
    """Size lists holding a value that is not a constant, fed to a view, reshape,
    expand or constructor."""
    constants = set(re.findall(r"(%[\w-]+) = torch\.constant\.int", text))
    lists = dict(re.findall(r"(%[\w-]+) = torch\.prim\.ListConstruct ([^:]*) :", text))
    ops = "|".join(re.escape(name) for name in _SIZED_OPS)
    count = 0
    for operands in re.findall(rf"torch\.aten\.(?:{ops}) ([^:]*) :", text):
        for operand in (o.strip() for o in operands.split(",")):
            items = [i.strip() for i in lists.get(operand, "").split(",") if i.strip()]
            count += any(i not in constants for i in items)
    return count


_INDEX_PATH = {"torch.aten.unsqueeze", "torch.aten.expand", "torch.aten.add.Scalar",
               "torch.tensor_static_info_cast", "torch.aten.slice.Tensor"}
_LOOKUPS = {"torch.aten.embedding": [1], "torch.aten.index_select": [2], "torch.aten.gather": [2],
            "torch.aten.index.Tensor": None}


def _is_iota(value) -> bool:
    """An aranges, iota_like or arange-valued constant, possibly unsqueezed,
    expanded, sliced or shifted by 0."""
    from anyshape.mlir import ir

    while not isinstance(value.owner, ir.Block):
        op = value.owner.operation
        if op.name.startswith("torch.aten.arange") or op.name == "anyshape.iota_like":
            return True
        if op.name == "torch.vtensor.literal":
            values = op.attributes["value"]
            return (isinstance(values, ir.DenseIntElementsAttr) and not values.is_splat
                    and all(values[i] == i for i in range(len(values))))
        if op.name not in _INDEX_PATH:
            return False
        value = op.operands[0]
    return False


def _iota_lookups(text: str) -> int:
    """embedding/index_select/gather/index.Tensor ops with an iota index."""
    from anyshape.mlir import ir
    from anyshape.dialects import new_context

    count = 0
    with new_context():
        module = ir.Module.parse(text)

        def visit(op):
            nonlocal count
            if op.name in _LOOKUPS:
                if _LOOKUPS[op.name] is None:
                    items = op.operands[1].owner.operation.operands
                else:
                    items = [op.operands[i] for i in _LOOKUPS[op.name]]
                count += any(_is_iota(v) for v in items)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    return count


def _counts(text: str) -> dict[str, int]:
    args = set(re.findall(r"(%arg\d+):", text))
    size_ops = re.findall(r"torch\.aten\.size\.int (%[\w-]+),", text)
    return {
        "size queries of non-arguments": sum(v not in args for v in size_ops),
        "aranges": len(re.findall(r"torch\.aten\.arange", text)),
        "size lists built from shape values": _shape_value_lists(text),
        "lookups indexed by an iota": _iota_lookups(text),
        "anyshape ops": len(re.findall(r'"anyshape\.', text)),
        "symbolic-shape ops": len(re.findall(r"torch\.(?:symbolic_int|bind_symbolic_shape) ", text)),
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
    assert before["aranges"] > 0 and before["size lists built from shape values"] > 0
    assert before["lookups indexed by an iota"] > 0
    assert after["size queries of non-arguments"] == 0
    assert after["aranges"] == 0
    assert after["size lists built from shape values"] == 0
    assert after["lookups indexed by an iota"] == 0
    assert not re.search(r"torch\.aten\.(view|reshape) ", canonical)
    assert final["anyshape ops"] == 0
    assert final["symbolic-shape ops"] == 0


def test_lowered_ir_compiles_with_torch_mlir_linalg_pipeline(compiled):
    """torch-mlir's own path to linalg takes the lowered IR: the range facts are
    plain attributes, not symbolic-shape ops it cannot lower. The IR keeps ops
    whole for IREE (importer.py), so torch-mlir's backend-contract pipeline
    (what torch_mlir.fx.export_and_import runs) comes first; without it the
    linalg pipeline leaves aten.linear & co. unconverted."""
    _, _, module = compiled
    lowered = module.ir("anyshape-lower")
    assert "torch.symbolic_int" not in lowered and "torch.bind_symbolic_shape" not in lowered
    assert "anyshape.dims" in lowered
    ir_module = parse_module(lowered, new_context())
    run_pipeline(ir_module, ["torchdynamo-export-to-torch-backend-pipeline",
                             "torch-backend-to-linalg-on-tensors-backend-pipeline"])
    text = str(ir_module)
    assert "linalg.matmul" in text or "linalg.batch_matmul" in text
    assert not re.findall(r"torch(?:_c)?\.[a-z_]+", text)


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
