"""``selected_output``: a causal LM's step for the last position, derived from the
decomposed step for every position instead of traced again; ``specialized``:
its decode steps, the step with its batch and new tokens fixed.

The oracle is the step exported directly (``CausalLMStep`` with
``every_position=False``, which returns ``logits[:, -1, :]``): the derived
program must compute the same logits and write the same cache slots, on
the same inputs, at another batch and length than the example's.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from anyshape.frontend.derived_programs import selected_output, specialized
from anyshape.frontend.export import prepare_program
from anyshape.generation.causal_lm import export_step
from anyshape.generation.step import CausalLMStep, probe_cache


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=97,
                         max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def steps(llama):
    shapes = probe_cache(llama)
    every = prepare_program(export_step(CausalLMStep(llama, len(shapes), every_position=True),
                                        shapes))
    last = prepare_program(export_step(CausalLMStep(llama, len(shapes)), shapes))
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


# ``specialized``: the decode step (batch rows, one new token) derived from the
# general step. The oracles: the general step itself on the same inputs (the
# same graph, so the same bits), and the decode step torch.export traces
# directly, for its shapes and for the input sizes its guards accept.

def _exported_decode_step(shapes, model, batch: int):
    inputs = (torch.randint(3, 97, (batch, 1)), torch.full((batch, 1), 5),
              torch.ones(batch, 6, dtype=torch.long),
              *[torch.zeros(batch, heads, 11, dim) for layer in shapes for heads, dim in layer])
    length, capacity = torch.export.Dim("length", min=2), torch.export.Dim("capacity", min=2)
    dims = (None, None, {1: length}, tuple({2: capacity} for _ in inputs[3:]))
    with torch.no_grad():
        return prepare_program(torch.export.export(CausalLMStep(model, len(shapes)), inputs,
                                                   dynamic_shapes=dims))


@pytest.fixture(scope="module")
def decode_steps(steps):
    _, last, _ = steps
    return {batch: specialized(last, {(0, 0): batch, (0, 1): 1}) for batch in (1, 4)}


@pytest.mark.parametrize("batch", [1, 4])
def test_specialized_step_computes_the_general_steps_bits(steps, decode_steps, batch):
    _, last, shapes = steps
    decode = decode_steps[batch]
    for past, capacity in [(6, 9), (32, 40)]:
        got, got_cache = _call(decode, shapes, batch, 1, past, capacity, seed=past)
        want, want_cache = _call(last, shapes, batch, 1, past, capacity, seed=past)
        assert got.shape == (batch, 97)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        for written, expected in zip(got_cache, want_cache):
            torch.testing.assert_close(written, expected, rtol=0, atol=0)


@pytest.mark.parametrize("batch", [1, 4])
def test_specialized_step_has_the_directly_exported_steps_shapes_and_guards(
        llama, steps, decode_steps, batch):
    from anyshape.frontend.program_signature import signature_from_program
    from anyshape.runtime.size_conditions import holds

    _, _, shapes = steps
    derived = signature_from_program(decode_steps[batch])
    direct = signature_from_program(_exported_decode_step(shapes, llama, batch))
    assert [spec.dims for spec in derived.inputs] == [spec.dims for spec in direct.inputs]
    assert derived.inputs[0].dims == [batch, 1]
    assert {(s.min, s.max) for s in derived.symbols.values()} == {(2, None)}
    length, capacity = derived.inputs[2].dims[1], derived.inputs[3].dims[2]

    def accepted(signature, values):
        return all(holds(condition, values) is not False for condition in signature.conditions)

    grid = [(n, c) for n in range(2, 9) for c in range(2, 9)]
    assert [accepted(derived, {length: n, capacity: c}) for n, c in grid] == \
        [accepted(direct, {length: n, capacity: c}) for n, c in grid]
    assert not accepted(derived, {length: 9, capacity: 8})  # a mask longer than the cache


def test_specialized_step_imports_with_its_fixed_sizes(steps, decode_steps):
    # torch-mlir's importer types values by their tensor metadata: the fixed
    # sizes must be static there, not only in the fake values.
    from anyshape.frontend.importer import import_programs

    _, _, shapes = steps
    text = str(import_programs({"decode": decode_steps[4]}))
    signature = next(line for line in text.splitlines() if "func.func @decode" in line)
    heads, dim = shapes[0][0]
    assert "%arg0: !torch.vtensor<[4,1],si64>" in signature
    assert f"!torch.vtensor<[4,{heads},?,{dim}],f32>" in signature
    assert "vtensor<[?," not in text  # a batch-leading value left dynamic


def test_specialized_programs_at_other_sizes_are_other_cache_keys(steps, decode_steps):
    from anyshape.driver.compile_cache import program_digest

    _, last, _ = steps
    assert len({program_digest(last), program_digest(decode_steps[1]),
                program_digest(decode_steps[4])}) == 3


def test_specialized_leaves_its_source_unchanged(steps):
    _, last, shapes = steps
    before = [(node.format_node(), str(node.meta.get("val"))) for node in last.graph.nodes]
    specialized(last, {(0, 0): 4, (0, 1): 1})
    assert [(node.format_node(), str(node.meta.get("val"))) for node in last.graph.nodes] == before
    logits, _ = _call(last, shapes, 2, 5, 4, 12, seed=3)
    assert logits.shape == (2, 97)


def test_negative_specialized_refuses_sizes_it_cannot_fix(steps):
    _, last, _ = steps
    with pytest.raises(ValueError, match=r"sizes: expected user input positions 0\.\.\d+, got 99"):
        specialized(last, {(99, 0): 1})
    with pytest.raises(ValueError, match=r"sizes: expected an axis of input 0's 2 dims, got 2"):
        specialized(last, {(0, 2): 1})
    with pytest.raises(ValueError, match=r"sizes: expected a symbolic size at input 3, axis 1; "
                                         r"it is 2"):
        specialized(last, {(3, 1): 2})  # the cache's heads are static
    with pytest.raises(ValueError, match=r"sizes: expected input 0's axis 0 within \[1, .*\], "
                                         r"got 0"):
        specialized(last, {(0, 0): 0})
    with pytest.raises(ValueError, match=r"sizes: input 2's axis 0 is the size fixed at 4 "
                                         r"elsewhere, got 2"):
        specialized(last, {(0, 0): 4, (2, 0): 2})  # ids and mask share their batch


def test_negative_a_decode_step_not_derivable_is_said_and_left_out(llama, steps):
    # A step exported at a static batch has no batch to fix: that batch's
    # decode then runs the general step, and the compile says why.
    from anyshape.generation.model_spec import decode_step

    _, _, shapes = steps
    inputs = (torch.randint(3, 97, (2, 3)), torch.arange(3).expand(2, 3).contiguous(),
              torch.ones(2, 8, dtype=torch.long),
              *[torch.zeros(2, heads, 11, dim) for layer in shapes for heads, dim in layer])
    with torch.no_grad():
        static = prepare_program(torch.export.export(CausalLMStep(llama, len(shapes)), inputs))
    with pytest.warns(UserWarning, match=r"the batch-4 decode step could not be derived "
                                         r"\(ValueError: sizes: expected a symbolic size at "
                                         r"input 0, axis 0; it is 2\); batch-4 decode runs "
                                         r"the general step"):
        assert decode_step(static, 4) is None
