"""``anyshape.compile_generator``: unmodified HF causal LMs, token for token against HF's ``generate``.

Each family is built from its default config, shrunk (hidden 64, 2 layers, 4
heads, 2 key/value heads where it has them; Mistral, Phi-3 and Gemma2 with
a sliding window of 8 slots), with random weights, and compiled once per
session (``built``). Greedy tokens must be HF's own, at batch 1
and on a left-padded batch of mixed prompt lengths (a row with one real
token among them), for 64 new tokens; GPT-2 and Llama also at prompts of 1,
7, 17, 40 and 333 tokens.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from extent import FULL_ONLY, sweep
from hf_generation import hf_and_ours, hf_generate
from invocations import record_host_copies, record_invocations

from without_compilers import FORBID_COMPILERS

import anyshape

NEW_TOKENS = 64
VOCAB = 256
_SMALL = dict(hidden_size=64, n_embd=64, num_hidden_layers=2, n_layer=2, num_attention_heads=4,
              n_head=4, num_key_value_heads=2, intermediate_size=128, ffn_dim=128,
              vocab_size=VOCAB, word_embed_proj_dim=64, head_dim=16,
              max_position_embeddings=512, n_positions=512, pad_token_id=0)


def small_causal_lm(model_type: str, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type)
    for key, value in {**_SMALL, **overrides}.items():
        if hasattr(config, key) or key in overrides:
            try:
                setattr(config, key, value)
            except AttributeError:  # a derived property (Falcon's head_dim)
                pass
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_config(config).eval()


def mixed_batch(lengths: list[int], seed: int = 0):
    """Left-padded prompts of ``lengths`` real tokens (never the pad id 0)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(3, VOCAB, (len(lengths), width), generator=generator)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, width - length:] = 1
        ids[row, :width - length] = 0
    return ids, mask


def both(model, generator, lengths, seed=3, **kwargs):
    """``hf_and_ours`` on left-padded prompts of ``lengths`` tokens."""
    ids, mask = mixed_batch(lengths, seed=seed)
    return hf_and_ours(model, generator, ids, mask, **kwargs)


def copying_prompt(seed: int = 5) -> torch.Tensor:
    """One row whose last tokens repeat an earlier span, as a summary's copy
    of its source does: prompt lookup finds drafts in it from the start."""
    span = torch.randint(3, VOCAB, (1, 12), generator=torch.Generator().manual_seed(seed))
    return torch.cat([span, torch.randint(3, VOCAB, (1, 9)), span, span[:, :5]], dim=1)


_built: dict[tuple, tuple] = {}
_build_warnings: dict[tuple, list[str]] = {}


# Mistral's, Phi-3's and Gemma2's configs have sliding windows longer than any
# sequence here, which would never be reached: their family builds get a
# window of 8 slots, and the sliding-window tests below share those builds.
# Gemma2 (not in the list) is the family whose attention is HF's
# "eager" (its scores are soft-capped), which adds a float mask to the scores:
# given a boolean one it generated other tokens than HF's, silently.
FAMILY_OVERRIDES = {"mistral": {"sliding_window": 8}, "phi3": {"sliding_window": 8},
                    "gemma2": {"sliding_window": 8}}


def built(model_type: str, **overrides):
    """(HF model, generator) compiled once per test session; the warnings the
    compile gave are kept (``_build_warnings``)."""
    overrides = {**FAMILY_OVERRIDES.get(model_type, {}), **overrides}
    key = (model_type, repr(sorted(overrides.items())))
    if key not in _built:
        model = small_causal_lm(model_type, **overrides)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _built[key] = model, anyshape.compile_generator(model)
        _build_warnings[key] = [str(w.message) for w in caught]
    return _built[key]


FAMILIES = ["gpt2", "llama", "qwen2", "mistral", "phi3", "gemma", "gpt_neox", "opt", "bloom",
            "falcon", "gemma2"]


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_is_hf_generate_on_a_mixed_batch(model_type):
    model, generator = built(model_type)
    ids, mask = mixed_batch([17, 1, 7], seed=1)
    want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    assert torch.equal(got, want), f"{model_type}:\n{got[:, ids.shape[1]:]}\n" \
                                   f"HF:\n{want[:, ids.shape[1]:]}"


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
@pytest.mark.parametrize("prompt", [1, 7, 17, 40, 333])
def test_greedy_is_hf_generate_at_batch_1(model_type, prompt):
    model, generator = built(model_type)
    ids, _ = mixed_batch([prompt], seed=prompt)
    want = hf_generate(model, ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    got = generator.generate(ids, max_new_tokens=NEW_TOKENS)
    assert got.shape == (1, prompt + NEW_TOKENS)
    assert torch.equal(got, want), f"{model_type} prompt {prompt}"


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_is_hf_generate_at_batch_1_in_every_family(model_type):
    # Batch 1 decodes with each family's own batch-1 function; the builds are
    # the mixed-batch test's.
    model, generator = built(model_type)
    ids, _ = mixed_batch([7], seed=14)
    want = hf_generate(model, ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    assert torch.equal(generator.generate(ids, max_new_tokens=NEW_TOKENS), want), model_type


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
def test_beam_search_with_processors_is_hfs_in_every_family(model_type):
    """(Beside greedy, on its builds; test_generate_arguments.py has the rest
    of beam search and prompt lookup.) Every family's cache (grouped heads, ALiBi, sliding windows, soft-capped
    scores) reordered by the same gather: 4 beams, 2 returned, n-gram
    blocking and a repetition penalty, on the mixed batch."""
    model, generator = built(model_type)
    want, got = both(model, generator, [17, 1, 7], max_new_tokens=16, num_beams=4,
                     num_return_sequences=2, no_repeat_ngram_size=3, repetition_penalty=1.1)
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_prompt_lookup_is_greedy_in_every_family(model_type):
    model, generator = built(model_type)
    ids = copying_prompt(seed=6)
    greedy = generator.generate(ids, max_new_tokens=24)
    want, got = hf_and_ours(model, generator, ids, None, max_new_tokens=24,
                            prompt_lookup_num_tokens=4)
    assert torch.equal(got, greedy)
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
def test_greedy_is_hf_generate_on_a_batch_of_every_prompt_length():
    model, generator = built("llama")
    ids, mask = mixed_batch([40, 1, 17, 7, 33], seed=3)
    want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    assert torch.equal(generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS),
                       want)


# Windows of 8 slots, several times shorter than the prompts and outputs.
SLIDING_WINDOWS = [
    ("mistral", {"sliding_window": 8}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8,
               "layer_types": ["sliding_attention", "full_attention"]}),
    ("phi3", {"sliding_window": 8}),
]
SLIDING_WINDOW_IDS = ["mistral", "qwen2-per-layer", "phi3"]


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type,overrides", SLIDING_WINDOWS, ids=SLIDING_WINDOW_IDS)
def test_sliding_window_attention_is_hf_generate_beyond_the_window(model_type, overrides):
    # Prompts and outputs several times longer than the window of 8 slots.
    model, generator = built(model_type, **overrides)
    ids, mask = mixed_batch([17, 1, 9], seed=4)
    want = hf_generate(model, ids, mask, max_new_tokens=40, do_sample=False)
    assert torch.equal(generator.generate(ids, attention_mask=mask, max_new_tokens=40), want)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type,overrides", SLIDING_WINDOWS, ids=SLIDING_WINDOW_IDS)
def test_sliding_window_at_batch_1_is_hf_generate_beyond_the_window(model_type, overrides):
    # The batch-1 decode function masks the window too (same builds as above).
    model, generator = built(model_type, **overrides)
    ids, _ = mixed_batch([5], seed=15)
    want = hf_generate(model, ids, max_new_tokens=40, do_sample=False)
    assert torch.equal(generator.generate(ids, max_new_tokens=40), want)


@pytest.mark.builds_after_export
def test_falcon_with_alibi_is_hf_generate():
    model, generator = built("falcon", alibi=True)
    ids, mask = mixed_batch([17, 1, 7], seed=5)
    want = hf_generate(model, ids, mask, max_new_tokens=40, do_sample=False)
    assert torch.equal(generator.generate(ids, attention_mask=mask, max_new_tokens=40), want)


# Four experts, two per token: a mixed batch uses every expert, a short prompt not.
MOE = dict(num_local_experts=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
           shared_expert_intermediate_size=64)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", sweep(["mixtral", "qwen2_moe"], ["qwen3_moe"]))
def test_mixture_of_experts_as_loaded_is_hf_generate(model_type):
    model, generator = built(model_type, **MOE)
    assert model.config._experts_implementation == "grouped_mm"  # transformers' default
    for lengths, seed in (([17, 1, 7], 1), ([7], 14)):
        ids, mask = mixed_batch(lengths, seed=seed)
        want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
        got = generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
        assert torch.equal(got, want), f"{model_type} {lengths}:\n{got[:, ids.shape[1]:]}\n" \
                                       f"HF:\n{want[:, ids.shape[1]:]}"


@pytest.mark.builds_after_export
def test_grouped_query_attention_exports():
    # Llama's 4 heads share 2 key/value heads: without the export workaround,
    # torch.export refuses the dynamic cache length (step.py).
    from anyshape.generation.causal_lm import export_step
    from anyshape.generation.step import CausalLMStep, probe_cache

    model = small_causal_lm("llama")
    shapes = probe_cache(model)
    assert shapes[0] == ((2, 16), (2, 16))
    program = export_step(CausalLMStep(model, len(shapes)), shapes)
    dims = {str(d) for node in program.graph.nodes if node.op == "placeholder"
            for d in getattr(node.meta.get("val"), "shape", ())}
    assert any(not d.isdigit() for d in dims)


@pytest.mark.builds_after_export
def test_sampling_with_a_seed_is_reproducible_and_is_hf_sampling():
    model, generator = built("llama")
    ids, mask = mixed_batch([17, 1, 7], seed=6)
    options = dict(max_new_tokens=32, do_sample=True, temperature=0.7, top_k=20, top_p=0.9)
    torch.manual_seed(11)
    first = generator.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(11)
    second = generator.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(11)
    hf = hf_generate(model, ids, mask, **options)
    assert torch.equal(first, second)
    assert torch.equal(first, hf)
    torch.manual_seed(12)
    assert not torch.equal(generator.generate(ids, attention_mask=mask, **options), first)


@pytest.mark.builds_after_export
def test_repetition_penalty_and_min_new_tokens_as_hf():
    model, generator = built("gpt2")
    ids, mask = mixed_batch([17, 5], seed=7)
    greedy = hf_generate(model, ids, mask, max_new_tokens=24, do_sample=False)
    eos = int(greedy[0, ids.shape[1] + 3])  # a token greedy decoding emits early
    options = dict(max_new_tokens=24, repetition_penalty=1.3, min_new_tokens=6,
                   eos_token_id=eos, pad_token_id=1)
    want = hf_generate(model, ids, mask, do_sample=False, **options)
    assert torch.equal(generator.generate(ids, attention_mask=mask, **options), want)


@pytest.mark.builds_after_export
def test_rows_ending_at_eos_are_padded_and_generation_stops():
    model, generator = built("gpt2")
    ids, mask = mixed_batch([17, 5, 9], seed=8)
    greedy = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    start = ids.shape[1]
    # Two end tokens: the fourth new token of row 0 and the tenth of row 1.
    eos = [int(greedy[0, start + 3]), int(greedy[1, start + 9])]
    want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                       eos_token_id=eos, pad_token_id=1)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                             eos_token_id=eos, pad_token_id=1)
    assert torch.equal(got, want)
    assert (got[0, start + 4:] == 1).all() or got.shape[1] < start + NEW_TOKENS


@pytest.mark.builds_after_export
def test_streamer_gets_what_hf_streams():
    class Recorder:
        def __init__(self):
            self.calls = []

        def put(self, value):
            self.calls.append(("put", value.tolist()))

        def end(self):
            self.calls.append(("end",))

    model, generator = built("gpt2")
    ids, _ = mixed_batch([7], seed=9)
    ours, theirs = Recorder(), Recorder()
    generator.generate(ids, max_new_tokens=8, streamer=ours)
    hf_generate(model, ids, max_new_tokens=8, do_sample=False, streamer=theirs)
    assert ours.calls == theirs.calls


@pytest.mark.builds_after_export
def test_the_cache_stays_on_the_device(monkeypatch):
    # Per step one result comes to the host: the next-token logits.
    _, generator = built("gpt2")
    copies = record_host_copies(monkeypatch)
    ids, _ = mixed_batch([7, 7], seed=10)
    generator.generate(ids, max_new_tokens=10)
    # The prefill of the two prompts, then two rows as the four-row function's
    # batch (whose two extra rows repeat the first: copied, not prefilled).
    assert copies == [(2, VOCAB)] + [(4, VOCAB)] * 9


@pytest.mark.builds_after_export
@pytest.mark.parametrize("entry", [None, "decode_one", "decode_four"])
def test_a_step_writes_only_its_new_rows(entry):
    # A step writes its new tokens' keys and values into the cache buffers it is
    # given, after the filled slots, in place, and returns the logits only.
    # Eager's step on torch tensors (updated in place by the same code) is the
    # reference: the written slots hold its values, every other slot (filled
    # ones, and those past the mask) keeps what it held, bit for bit. Run again
    # (a retry), the step gives the same logits and leaves the same cache.
    import numpy as np

    from anyshape.generation.step import CausalLMStep

    model, generator = built("gpt2")
    module = generator.module
    batch, new = {None: (2, 3), "decode_one": (1, 1), "decode_four": (4, 1)}[entry]
    filled, capacity = 6, 13
    generator_ = torch.Generator().manual_seed(21)
    ids = torch.randint(3, VOCAB, (batch, new), generator=generator_)
    mask = torch.ones(batch, filled + new, dtype=torch.long)
    mask[:, 0] = 0  # the masked first slot
    positions = torch.arange(filled - 1, filled - 1 + new).expand(batch, new).contiguous()
    cache = [torch.randn(batch, heads, capacity, dim, generator=generator_)
             for layer in generator.spec["cache"] for heads, dim in layer]
    eager_cache = [t.clone() for t in cache]
    with torch.no_grad():
        expected = CausalLMStep(model, len(generator.spec["cache"]))(
            ids, positions, mask, *eager_cache)
    arrays = module.device_arrays([t.numpy() for t in cache])
    inputs = [ids.numpy(), positions.numpy(), mask.numpy()]
    results = module.invoke([*inputs, *arrays], entry=entry)
    assert len(results) == 1
    logits = np.asarray(results[0].to_host())
    np.testing.assert_allclose(logits, expected.numpy(), atol=1e-4, rtol=1e-4)
    written = slice(filled, filled + new)
    after = [np.asarray(a.to_host()).copy() for a in arrays]
    for before, now, reference in zip(cache, after, eager_cache):
        np.testing.assert_allclose(now[:, :, written], reference[:, :, written].numpy(),
                                   atol=1e-5, rtol=1e-5)
        untouched = np.ones(capacity, dtype=bool)
        untouched[written] = False
        assert np.array_equal(now[:, :, untouched], before.numpy()[:, :, untouched])
    again = module.invoke([*inputs, *arrays], entry=entry)
    assert np.array_equal(np.asarray(again[0].to_host()), logits)
    for a, previous in zip(arrays, after):
        assert np.array_equal(np.asarray(a.to_host()), previous)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_batch_1_decodes_with_its_own_function(model_type, monkeypatch):
    # After the prompt, every batch-1 step runs the function specialized for one
    # row and one token (the step with those sizes fixed, same weights), and the
    # tokens stay HF's; two rows run as four (the four-row function), nine (more
    # than the largest, eight) with the general step.
    model, generator = built(model_type)
    assert next(iter(generator.module.stage_seconds)) == "export-steps"
    assert generator.spec["decode_entry"] == "decode_one"
    assert generator.spec["decode_entries"] == {"1": "decode_one", "4": "decode_four",
                                                "8": "decode_eight"}
    calls = record_invocations(monkeypatch, generator.module)
    ids, _ = mixed_batch([9], seed=11)
    got = generator.generate(ids, max_new_tokens=12)
    assert torch.equal(got, hf_generate(model, ids, max_new_tokens=12))
    assert [entry for entry, _ in calls] == [None] + ["decode_one"] * 11
    calls.clear()
    two, mask = mixed_batch([9, 4], seed=12)
    got = generator.generate(two, attention_mask=mask, max_new_tokens=3)
    assert got.shape == (2, two.shape[1] + 3)
    assert [entry for entry, _ in calls] == [None] + ["decode_four"] * 2
    calls.clear()
    nine, mask = mixed_batch([9, 4, 1, 6, 2, 8, 3, 5, 7], seed=15)
    got = generator.generate(nine, attention_mask=mask, max_new_tokens=5)
    assert torch.equal(got, hf_generate(model, nine, mask, max_new_tokens=5, do_sample=False))
    assert [entry for entry, _ in calls] == [None] * 5


@pytest.mark.builds_after_export
def test_bloom_decodes_with_its_own_functions(monkeypatch):
    # BLOOM's softmax(scores, dtype=float32) of float32 scores is rewritten as
    # any softmax is (anyshape-logsumexp-softmax), so IREE compiles its decode
    # functions: left as a linalg.softmax over the unbounded cache length at a
    # static batch, IREE's CPU codegen failed on it. Batch-1 tokens are HF's.
    model, generator = built("bloom")
    said = [text for text in _build_warnings[("bloom", repr([]))] if "decode" in text]
    assert said == []
    assert generator.spec["decode_entries"] == {"1": "decode_one", "4": "decode_four",
                                                "8": "decode_eight"}
    calls = record_invocations(monkeypatch, generator.module)
    ids, _ = mixed_batch([7], seed=13)
    assert torch.equal(generator.generate(ids, max_new_tokens=8),
                       hf_generate(model, ids, max_new_tokens=8))
    assert [entry for entry, _ in calls] == [None] + ["decode_one"] * 7


@pytest.mark.builds_after_export
def test_the_decode_function_shares_the_weights():
    # Two functions over one set of weights: the module stores each weight once
    # (its bytes occur once in the .vmfb; the tied embedding and LM head too).
    model, generator = built("gpt2")
    vmfb = generator.module.vmfb
    counts = {name: vmfb.count(p.detach().contiguous().numpy().tobytes()[:256])
              for name, p in model.named_parameters() if p.ndim == 2 and p.numel() >= 64}
    assert counts and set(counts.values()) == {1}, counts


@pytest.mark.builds_after_export
def test_save_and_load_give_the_same_generate(tmp_path):
    model, generator = built("llama")
    generator.save(tmp_path / "llama")
    loaded = anyshape.load(tmp_path / "llama")
    assert isinstance(loaded, anyshape.Generator)
    ids, mask = mixed_batch([17, 4], seed=11)
    want = hf_generate(model, ids, mask, max_new_tokens=20, do_sample=False)
    assert torch.equal(loaded.generate(ids, attention_mask=mask, max_new_tokens=20), want)


GENERATE_WITHOUT_THE_COMPILERS = FORBID_COMPILERS + textwrap.dedent("""
    import torch, anyshape
    artifact, data = sys.argv[1], sys.argv[2]
    inputs = torch.load(data)
    generator = anyshape.load(artifact)
    tokens = generator.generate(inputs["ids"], attention_mask=inputs["mask"], max_new_tokens=20)
    torch.save(tokens, data + ".out")
""")


@pytest.mark.builds_after_export
def test_a_saved_generator_generates_without_the_compilers(tmp_path):
    """/// The generator's run-time half is the runtime's: a saved generator
    /// loads and generates HF's tokens in a process where torch-mlir and the
    /// IREE compiler cannot be imported."""
    model, generator = built("llama")
    generator.save(tmp_path / "llama")
    ids, mask = mixed_batch([9, 3], seed=5)
    torch.save({"ids": ids, "mask": mask}, tmp_path / "inputs.pt")
    subprocess.run([sys.executable, "-c", GENERATE_WITHOUT_THE_COMPILERS, str(tmp_path / "llama"),
                    str(tmp_path / "inputs.pt")], check=True)
    want = hf_generate(model, ids, mask, max_new_tokens=20, do_sample=False)
    assert torch.equal(torch.load(tmp_path / "inputs.pt.out"), want)


# -- errors ------------------------------------------------------------------

@pytest.mark.builds_after_export
def test_a_prompt_beyond_the_positions_is_refused():
    _, generator = built("gpt2")
    ids, _ = mixed_batch([500])
    with pytest.raises(ValueError, match=r"input_ids: generating up to 520 tokens \(prompt and "
                                         r"new tokens\) needs 520 positions; this gpt2 model "
                                         r"has 512"):
        generator.generate(ids, max_new_tokens=20)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("kwargs,error,match", [
    ({"assistant_early_exit": 1}, NotImplementedError,
     r"assistant_early_exit=1 .*the compiled step runs every layer"),
    ({"force_words_ids": [[7]], "num_beams": 2}, NotImplementedError,
     r"force_words_ids, constraints: constrained beam search is not in transformers' own "
     r"generate"),
    ({"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0}, NotImplementedError,
     r"num_beam_groups, diversity_penalty: group beam search"),
    ({"penalty_alpha": 0.6, "top_k": 4}, NotImplementedError, r"penalty_alpha: contrastive search"),
    ({"output_attentions": True, "return_dict_in_generate": True}, NotImplementedError,
     r"output_attentions=True .*the compiled step returns the next-token logits only"),
    ({"guidance_scale": 1.5}, NotImplementedError, r"guidance_scale=1.5 .*classifier-free"),
    ({"max_new_token": 5}, ValueError, r"not used by the model: \['max_new_token'\]"),
    ({"past_key_values": object()}, NotImplementedError,
     r"past_key_values: a compiled generator keeps its own cache"),
    ({"temperature": 0.0, "do_sample": True}, ValueError, r"temperature"),
    ({"max_new_tokens": 0}, ValueError, r"max_new_tokens.*(greater than 0|at least 1)"),
])
def test_arguments_generate_does_not_take_are_refused(kwargs, error, match):
    _, generator = built("gpt2")
    ids, _ = mixed_batch([5])
    with pytest.raises(error, match=match):
        generator.generate(ids, **kwargs)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("ids,mask,error,match", [
    (torch.ones(2, 3), None, TypeError, r"input_ids: expected integer token ids, got dtype "
                                        r"torch.float32"),
    (torch.ones(3, dtype=torch.long), None, ValueError, r"input_ids: expected shape \[batch, "
                                                        r"length\].*got \(3,\)"),
    (torch.full((1, 3), VOCAB), None, ValueError, rf"input_ids: expected token ids in \[0, "
                                                  rf"{VOCAB}\), got values from {VOCAB}"),
    (torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4), ValueError,
     r"attention_mask: expected shape \(2, 3\)"),
    (torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1], [1, 1, 0]]), ValueError,
     r"attention_mask: row 1 ends with padding.*padding_side = 'left'"),
], ids=["float-ids", "1-d", "out-of-vocab", "mask-shape", "right-padded"])
def test_bad_inputs_are_named(ids, mask, error, match):
    _, generator = built("gpt2")
    with pytest.raises(error, match=match):
        generator.generate(ids, attention_mask=mask, max_new_tokens=2)


def test_a_model_that_is_not_a_causal_lm_is_refused():
    with pytest.raises(TypeError, match=r"model: expected a HuggingFace \*ForCausalLM"):
        anyshape.compile_generator(torch.nn.Linear(2, 2))


def test_an_attention_implementation_without_known_masks_is_refused():
    # compile_generator builds the masks itself, in the form SDPA (boolean) or
    # eager attention (added to the scores) takes; another form is refused.
    model = small_causal_lm("llama")
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(NotImplementedError,
                       match=r"model: attention implementation 'flex_attention': .* "
                             r"attn_implementation='sdpa' or 'eager'"):
        anyshape.compile_generator(model)


def test_a_model_without_a_cache_is_refused():
    class NoCache(torch.nn.Module):
        config = type("Config", (), {"model_type": "toy", "is_encoder_decoder": False})()

        def generate(self):
            pass

        def forward(self, input_ids, attention_mask=None):
            return input_ids.float()

    with pytest.raises(TypeError, match=r"model: NoCache takes no past_key_values"):
        anyshape.compile_generator(NoCache())


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_check_validates_the_passes_on_the_step_graph(model_type):
    # Translation validation of the default pipeline on the prefill/decode step
    # (a dynamic cache length, mask length and new-token count), at random sizes.
    from anyshape.tools.check import check
    from anyshape.frontend.export import prepare_program
    from anyshape.frontend.importer import import_program
    from anyshape.generation.causal_lm import export_step
    from anyshape.generation.step import CausalLMStep, probe_cache
    from anyshape.passes import DEFAULT_PIPELINE
    from anyshape.frontend.program_signature import signature_from_program
    from anyshape.runtime.size_conditions import holds

    model = small_causal_lm(model_type)
    shapes = probe_cache(model)
    program = prepare_program(export_step(CausalLMStep(model, len(shapes)), shapes))
    text = str(import_program(program))
    # The step writes its new keys and values into the cache's slots after the
    # filled ones: the capacity must exceed the mask's length (a guard).
    signature = signature_from_program(program)
    conditions = signature.conditions
    batch, new = signature.inputs[0].dims
    length, capacity = signature.inputs[2].dims[1], signature.inputs[3].dims[2]
    too_few_slots = {batch: 2, new: 1, length: 9, capacity: 8}
    assert any(holds(c, too_few_slots) is False for c in conditions), conditions
    trials = check(text, DEFAULT_PIPELINE, trials=3, seed=2, max_size=24, conditions=conditions)
    assert len({tuple(sorted(t.sizes.items())) for t in trials}) > 1
    for trial in trials:
        assert trial.ok, f"sizes {trial.sizes}: " + "; ".join(str(e) for e in trial.errors
                                                              if not e.ok)


@pytest.mark.builds_after_export
@FULL_ONLY  # bfloat16, the CPU's half type, below in every extent
def test_float16_is_hf_generate_in_float16():
    model = small_causal_lm("llama")
    generator = anyshape.compile_generator(model, dtype=torch.float16)
    assert generator.spec["cache_dtype"] == "float16"
    assert next(model.parameters()).dtype == torch.float32  # the user's model is not cast
    ids, mask = mixed_batch([17, 5], seed=12)
    want = hf_generate(small_causal_lm("llama").half(), ids, mask, max_new_tokens=16,
                       do_sample=False)
    assert torch.equal(generator.generate(ids, attention_mask=mask, max_new_tokens=16), want)


@pytest.mark.builds_after_export
def test_bfloat16_is_hf_generate_in_bfloat16():
    # Its small norm weights once failed iree-compile (workaround
    # bf16_constants_not_inlined); the logits come back as bfloat16. bfloat16
    # keeps 8 bits of mantissa, so two logits a step apart can swap between
    # any two orders of summation: each row is HF's bfloat16 tokens up to its
    # first difference, if any, and there the two tokens' logits, computed in
    # float64 from the same bfloat16 weights, are within 2 bfloat16 steps.
    model = small_causal_lm("llama")
    generator = anyshape.compile_generator(model, dtype=torch.bfloat16)
    assert generator.spec["cache_dtype"] == "bfloat16"
    ids, mask = mixed_batch([17, 5], seed=12)
    weights = small_causal_lm("llama").to(torch.bfloat16)
    want = hf_generate(weights, ids, mask, max_new_tokens=32, do_sample=False)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=32)
    assert got.shape == want.shape and torch.equal(got[:, :ids.shape[1]], ids)
    assert len(set(want[0, ids.shape[1]:].tolist())) > 3, want
    exact = weights.double()
    for row in range(ids.shape[0]):
        differ = (got[row] != want[row]).nonzero()
        if not len(differ):
            continue
        step = int(differ[0])
        row_mask = torch.cat([mask[row:row + 1],
                              torch.ones(1, step - ids.shape[1], dtype=torch.long)], 1)
        with torch.no_grad():
            logits = exact(want[row:row + 1, :step], attention_mask=row_mask).logits[0, -1]
        pair = logits[got[row, step]], logits[want[row, step]]
        two_steps = 2 * 2.0 ** (math.floor(math.log2(float(max(map(abs, pair))))) - 7)
        gap = abs(float(pair[0] - pair[1]))
        assert gap <= two_steps, (f"row {row}, new token {step - ids.shape[1]}: "
                                  f"{int(got[row, step])} against HF's {int(want[row, step])}, "
                                  f"float64 logits {gap:.3g} apart (2 bfloat16 steps: "
                                  f"{two_steps:.3g})\n{got}\nHF:\n{want}")
