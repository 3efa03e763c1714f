"""transformers' default MoE experts (grouped_mm: histc counts, a grouped product) compile as loaded.

The decompositions against the ops they replace, in eager; then whole MoE
families with their default experts against eager, at batch 1 and on a padded
batch, with every expert used and with some unused. Their generators are
HF's ``generate`` token for token in ``generation/test_generate.py``.
"""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from anyshape.frontend.grouped_experts import grouped_mm_by_rows, histc_as_counts


@pytest.mark.parametrize("bins,low,high", [(4, 0, 3), (8, 0, 7), (1, 0, 5), (7, -2.5, 3.0),
                                           (13, 0.1, 0.9), (3, -1, 1)])
def test_histc_is_eagers(bins, low, high):
    generator = torch.Generator().manual_seed(bins)
    values = torch.cat([
        torch.randint(int(low) - 2, int(high) + 3, (200,), generator=generator).float(),
        torch.rand(300, generator=generator) * (high - low + 2) + low - 1,
        torch.linspace(low, high, bins + 1),  # the edges themselves, max included
    ])
    for x in (values, values[:500].reshape(25, -1)):
        want = torch.histc(x, bins=bins, min=low, max=high)
        assert torch.equal(histc_as_counts(x, bins, low, high), want)


@pytest.mark.parametrize("values", [
    torch.arange(5.0), torch.zeros(6), torch.full((3,), 2.5), torch.tensor([0.0, 1.0, 1.0]),
    torch.linspace(-3.3, 7.1, 41), torch.randn(200, generator=torch.Generator().manual_seed(0)),
    torch.randn(50, generator=torch.Generator().manual_seed(1)).double()])
@pytest.mark.parametrize("bins, edge", [(1, 0), (4, 0), (7, 3.0)])
def test_histc_with_edges_from_the_data_is_eagers(values, bins, edge):
    """/// min == max: torch bins between the data's least and greatest values
    /// (moved out by 1 where they are equal): Hunyuan-MoE's single expert."""
    want = torch.histc(values, bins=bins, min=edge, max=edge)
    assert torch.equal(histc_as_counts(values, bins, edge, edge), want)


def test_grouped_product_is_transformers_own():
    import transformers.integrations.moe  # noqa: F401  registers transformers::grouped_mm_fallback

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(5, 8, 6, generator=generator)
    x = torch.randn(11, 8, generator=generator)
    # Experts 1 and 3 get no rows; rows 9 and 10 are past the last offset.
    for offsets in ([3, 3, 6, 6, 9], [0, 0, 0, 0, 11], [11, 11, 11, 11, 11], [2, 4, 6, 8, 9]):
        offs = torch.tensor(offsets, dtype=torch.int32)
        want = torch.ops.transformers.grouped_mm_fallback(x, weight, offs)
        torch.testing.assert_close(grouped_mm_by_rows(x, weight, offs), want, rtol=1e-6,
                                   atol=1e-6)


# A user's first compile of a MoE model, in a fresh process: transformers'
# default experts, unbounded dims; which experts each input used is recorded.
DEFAULT_EXPERTS = textwrap.dedent("""
    import json, sys, warnings
    import torch, transformers
    from torch.export import Dim
    import anyshape

    warnings.simplefilter("ignore")
    config = transformers.AutoConfig.for_model(
        sys.argv[1], hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, moe_intermediate_size=32,
        num_local_experts=4, num_experts=4, num_experts_per_tok=2, vocab_size=100)
    config.use_cache = False
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    dims = {"input_ids": {0: Dim("batch"), 1: Dim("seq")},
            "attention_mask": {0: Dim("batch"), 1: Dim("seq")}}
    ids = torch.randint(3, 100, (2, 7))
    compiled = anyshape.compile(model, (ids, torch.ones_like(ids)), dynamic_shapes=dims)
    used = []  # the experts eager runs, recorded from here on (not in the export)
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            module.register_forward_pre_hook(lambda m, args: used.append(args[1].unique().tolist()))
    cases = []
    for batch, length, padded in [(1, 1, 0), (1, 7, 0), (3, 9, 5), (2, 33, 20)]:
        generator = torch.Generator().manual_seed(length)
        ids = torch.randint(3, 100, (batch, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[1:, :padded] = 0
        used.clear()
        with torch.no_grad():
            want = model(ids, mask).logits
        experts = sorted({e for layer in used for e in layer})
        error = (compiled(ids, mask).logits - want).abs().max().item()
        cases.append({"shape": [batch, length], "experts": experts, "error": error})
    print(json.dumps({"implementation": config._experts_implementation, "cases": cases}))
""")


@pytest.mark.builds_in_subprocess
@pytest.mark.parametrize("model_type", ["mixtral", "olmoe"])
def test_default_experts_match_eager(model_type):
    run = subprocess.run([sys.executable, "-c", DEFAULT_EXPERTS, model_type],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["implementation"] == "grouped_mm"  # transformers' default, as loaded
    experts_used = [len(case["experts"]) for case in report["cases"]]
    assert min(experts_used) < 4 and max(experts_used) == 4, report["cases"]
    for case in report["cases"]:
        assert case["error"] < 1e-5, case


class TokensPerExpert(torch.nn.Module):
    def forward(self, expert_ids):
        return (torch.histc(expert_ids.float(), bins=4, min=0, max=3),
                torch.histc(expert_ids.float(), bins=3, min=0, max=0))


def test_histc_compiles_with_a_dynamic_length():
    import anyshape
    from torch.export import Dim

    compiled = anyshape.compile(TokensPerExpert(), (torch.tensor([0, 3, 1, 1]),),
                                dynamic_shapes={"expert_ids": {0: Dim("n")}})
    for n in (1, 7, 33):
        ids = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(n))
        for got, want in zip(compiled(ids), TokensPerExpert()(ids)):
            assert torch.equal(got, want)


class InversePermutation(torch.nn.Module):
    def forward(self, x):
        order = torch.sort(x).indices
        inverse = torch.empty_like(order)  # torch decomposes it to empty_permuted
        inverse[order] = torch.arange(order.shape[0])
        return inverse


def test_empty_like_compiles_with_a_dynamic_length():
    import anyshape
    from torch.export import Dim

    compiled = anyshape.compile(InversePermutation(), (torch.randn(5),),
                                dynamic_shapes={"x": {0: Dim("n")}})
    for n in (1, 7, 33):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        assert torch.equal(compiled(x), InversePermutation()(x))
