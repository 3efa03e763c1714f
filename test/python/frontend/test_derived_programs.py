"""``selected_output``: a causal LM's step for the last position, derived from the
decomposed step for every position instead of traced again.

The oracle is the step exported directly (``CausalLMStep`` with
``every_position=False``, which returns ``logits[:, -1, :]``): the derived
program must compute the same logits and write the same cache slots, on
the same inputs, at another batch and length than the example's.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from anyshape.frontend.derived_programs import selected_output
from anyshape.frontend.export import prepare_program
from anyshape.generation.causal_lm import export_step
from anyshape.generation.step import CausalLMStep, probe_cache


@pytest.fixture(scope="module")
def steps():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=97,
                         max_position_embeddings=128)
    model = LlamaForCausalLM(config).eval()
    shapes = probe_cache(model)
    every = prepare_program(export_step(CausalLMStep(model, len(shapes), every_position=True),
                                        shapes))
    last = prepare_program(export_step(CausalLMStep(model, len(shapes)), shapes))
    return every, last, shapes


def _call(program, shapes, batch: int, new: int, past: int, capacity: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 97, (batch, new), generator=generator)
    positions = torch.arange(past, past + new).expand(batch, new).contiguous()
    mask = torch.ones(batch, past + new, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded row
    cache = [torch.randn(batch, heads, capacity, dim, generator=generator)
             for layer in shapes for heads, dim in layer]
    with torch.no_grad():
        logits = program.module()(ids, positions, mask, *cache)
    return logits, cache


@pytest.mark.parametrize("batch,new,past", [(1, 1, 6), (3, 7, 17)])
def test_selected_last_position_is_the_step_exported_for_it(steps, batch, new, past):
    every, last, shapes = steps
    derived = selected_output(every, dim=1, index=-1)
    got, got_cache = _call(derived, shapes, batch, new, past, past + new + 3, seed=batch)
    want, want_cache = _call(last, shapes, batch, new, past, past + new + 3, seed=batch)
    assert got.shape == want.shape == (batch, 97)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for written, expected in zip(got_cache, want_cache):
        torch.testing.assert_close(written, expected, rtol=0, atol=0)


def test_the_program_it_derives_from_is_unchanged(steps):
    every, _, shapes = steps
    before = [node.format_node() for node in every.graph.nodes]
    selected_output(every, dim=1, index=-1)
    assert [node.format_node() for node in every.graph.nodes] == before
    logits, _ = _call(every, shapes, 2, 5, 4, 12, seed=3)
    assert logits.shape == (2, 5, 97)


def test_a_derived_program_is_not_decomposed_again(steps):
    every, _, _ = steps
    derived = selected_output(every, dim=1, index=-1)
    assert prepare_program(derived) is derived
    assert prepare_program(every) is every


def test_negative_dim_outside_the_output_is_refused(steps):
    every, _, _ = steps
    with pytest.raises(ValueError, match=r"dim: expected a dim of the 3-d output, got 3"):
        selected_output(every, dim=3, index=-1)


def test_negative_program_with_two_outputs_is_refused():
    class TwoOutputs(torch.nn.Module):
        def forward(self, x):
            return x + 1, x * 2

    program = prepare_program(torch.export.export(TwoOutputs(), (torch.ones(2, 3),)))
    with pytest.raises(ValueError, match=r"program: expected one tensor output to select from, "
                                         r"got outputs \['USER_OUTPUT', 'USER_OUTPUT'\]"):
        selected_output(program, dim=1, index=-1)
