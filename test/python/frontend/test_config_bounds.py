"""A dim's max that the model's config implies, applied where torch.export asks for it.

BERT-like models slice their position table by the length, so torch.export
refuses an unbounded ``Dim("seq")``; anyshape gives the dim the config's
position count, with a ``DimBoundedByConfig`` warning, and ``strict_dims=True``
refuses as torch does. Any other bound torch asks for stays the user's to declare.
"""

import json
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import transformers
from torch.export import Dim

import anyshape
from anyshape.errors import CompileError, DimBoundedByConfig
from anyshape.frontend.export import export_program

SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
             embedding_size=16, vocab_size=100)
DIMS = {"input_ids": {0: Dim("batch"), 1: Dim("seq")},
        "attention_mask": {0: Dim("batch"), 1: Dim("seq")}}


def small(model_type: str, positions: int = 40):
    config = transformers.AutoConfig.for_model(model_type, max_position_embeddings=positions,
                                               **SMALL)
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(config).eval()


def inputs(batch=2, length=7):
    return torch.randint(3, 100, (batch, length)), torch.ones(batch, length, dtype=torch.long)


def exported(model, dims=DIMS, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = export_program(model, inputs(), None, dims, **kwargs)
    bounded = [str(w.message) for w in caught if issubclass(w.category, DimBoundedByConfig)]
    return program, bounded


def seq_range(program):
    """The range of the program's length symbol (the ids' dim 1)."""
    ids = next(node for node in program.graph.nodes if node.op == "placeholder"
               and node.name == "input_ids")
    symbol = ids.meta["val"].shape[1].node.expr
    return program.range_constraints[symbol]


@pytest.mark.parametrize("model_type", ["bert", "electra", "albert"])
def test_position_count_of_the_config_bounds_an_unbounded_dim(model_type):
    program, bounded = exported(small(model_type))
    assert seq_range(program).upper == 40
    assert len(bounded) == 1
    assert "dim 'seq' is bounded to at most 40" in bounded[0]
    assert "config.max_position_embeddings = 40" in bounded[0]
    assert "input_ids.size()[1] <= 40" in bounded[0]  # the condition, in the inputs' names
    assert "strict_dims=True" in bounded[0]


def test_strict_dims_refuses_as_torch_does():
    with pytest.raises(CompileError, match=r"seq = Dim\('seq', max=40\)"):
        exported(small("bert"), strict_dims=True)


def test_a_max_the_user_declared_is_kept():
    dims = {"input_ids": {0: Dim("batch"), 1: Dim("seq", max=24)},
            "attention_mask": {0: Dim("batch"), 1: Dim("seq", max=24)}}
    program, bounded = exported(small("bert"), dims)
    assert bounded == []
    assert seq_range(program).upper == 24


def test_a_model_whose_positions_follow_the_padding_needs_no_bound():
    program, bounded = exported(small("roberta", positions=42))
    assert bounded == []
    assert seq_range(program).upper > 42


class _Table(torch.nn.Module):
    """Adds rows of a 30-row table by the length: torch needs seq <= 30."""

    def __init__(self, config=None):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(30, 4))
        if config is not None:
            self.config = config

    def forward(self, x):
        return x + self.table[: x.shape[1]]


@pytest.mark.parametrize("config", [None, transformers.BertConfig(max_position_embeddings=64)],
                         ids=["negative_no_config", "negative_config_states_another_count"])
def test_a_bound_the_config_does_not_state_is_refused(config):
    # torch asks for max=30, the table's rows, not a position count of a config: the user's to declare.
    with pytest.raises(CompileError, match=r"seq = Dim\('seq', max=30\)"):
        export_program(_Table(config).eval(), (torch.randn(2, 5, 4),), None,
                       {"x": {1: Dim("seq")}})


def test_strict_dims_must_be_a_bool():
    with pytest.raises(TypeError, match=r"strict_dims: expected True or False, got 'yes'"):
        anyshape.compile(small("bert"), inputs(), dynamic_shapes=DIMS, strict_dims="yes")


# The first compile a new user writes of a real checkpoint, in a fresh process.
MINILM = textwrap.dedent("""
    import json, sys, tempfile, warnings
    import all_minilm_l6_v2, torch
    from torch.export import Dim
    from transformers import AutoModel, AutoTokenizer
    import anyshape

    with tempfile.TemporaryDirectory() as directory:
        path = all_minilm_l6_v2.extract_model(directory)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).eval()
    sentences = [["The cat sat on the mat."],
                 ["Compilers turn programs into machine code.", "Hi!",
                  "A quick brown fox jumps over the lazy dog, twice, to be sure."]]
    example = tokenizer(sentences[1], padding=True, return_tensors="pt")
    dims = {"input_ids": {0: Dim("batch"), 1: Dim("seq")},
            "attention_mask": {0: Dim("batch"), 1: Dim("seq")}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = anyshape.compile(model, (example["input_ids"], example["attention_mask"]),
                                  dynamic_shapes=dims)
    report = {"warnings": [str(w.message) for w in caught
                           if issubclass(w.category, anyshape.DimBoundedByConfig)],
              "errors": []}
    for batch in sentences:
        encoded = tokenizer(batch, padding=True, return_tensors="pt")
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        with torch.no_grad():
            want = model(ids, mask).last_hidden_state
        got = module(ids, mask).last_hidden_state
        report["errors"].append((got - want).abs().max().item())
    too_long = torch.ones(1, 513, dtype=torch.long)
    try:
        module(too_long, too_long)
        report["refusal"] = None
    except Exception as error:  # noqa: BLE001  reported to the test
        report["refusal"] = f"{type(error).__name__}: {error}"
    print(json.dumps(report))
""")


@pytest.mark.builds_in_subprocess
def test_minilm_compiles_with_unbounded_dims_and_matches_eager_on_real_sentences():
    run = subprocess.run([sys.executable, "-c", MINILM], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(report["warnings"]) == 1 and "at most 512" in report["warnings"][0]
    assert max(report["errors"]) < 1e-4, report["errors"]
    assert report["refusal"] is not None and "512" in report["refusal"], report["refusal"]
