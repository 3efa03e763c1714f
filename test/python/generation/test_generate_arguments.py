"""``generate``'s arguments beyond greedy decoding, token for token against HF's ``generate``.

The same small Llama and GPT-2 as ``test_generate.py`` (the same builds,
random weights): every logits processor and warper, a user's own processor
and stopping criteria, ``stop_strings``, ``return_dict_in_generate`` with
scores and logits, ``num_return_sequences``, beam search, assisted decoding,
and the model's own generation config as its defaults. Each at batch 1 and
on a left-padded batch of mixed prompt lengths (a row with one real token
among them). Beam search and prompt lookup in every family are in
``test_generate.py``, on its builds, and BART's and T5's in
``test_seq2seq.py``: a test here that built them again would compile each
model twice in one session.
"""

from __future__ import annotations

import copy

import pytest
import torch
from invocations import record_calls, record_host_copies, record_invocations
from test_generate import (VOCAB, both, built, copying_prompt, hf_and_ours, hf_generate,
                           mixed_batch)

import anyshape
from anyshape.runtime.generator import Generator

BATCHES = {"batch_1": [7], "mixed": [17, 1, 7]}
SCORE_TOLERANCE = 1e-4  # float32 logits of the compiled step and of eager torch


def char_tokenizer():
    """A tokenizer of the test models' vocabulary: token i is the character
    ``chr(33 + i)`` (so "abcdef", which HF's stop strings tokenize, is text)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = Tokenizer(models.WordLevel({chr(33 + i): i for i in range(VOCAB)},
                                       unk_token=chr(34)))
    chars.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    chars.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=chars, unk_token=chr(34), pad_token=chr(33))


# -- logits processors and warpers --------------------------------------------

PROCESSORS = {
    "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
    "bad_words_ids": dict(bad_words_ids=[[5], [7, 8], [9, 10, 11]]),
    "suppress_tokens": dict(suppress_tokens=[10, 11, 12], begin_suppress_tokens=[13, 14]),
    "sequence_bias": dict(sequence_bias={(9,): -5.0, (20, 21): 4.0}),
    "forced_bos_and_eos": dict(forced_bos_token_id=4, forced_eos_token_id=6),
    "exponential_decay_length_penalty": dict(exponential_decay_length_penalty=(5, 1.5),
                                             eos_token_id=20),
    "renormalize_logits": dict(renormalize_logits=True, repetition_penalty=1.2),
    "min_length": dict(min_length=30, eos_token_id=[20, 21], pad_token_id=1),
}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
@pytest.mark.parametrize("name", PROCESSORS)
def test_greedy_with_each_logits_processor_is_hf_generate(name, lengths):
    model, generator = built("llama")
    want, got = both(model, generator, lengths, max_new_tokens=24, **PROCESSORS[name])
    assert torch.equal(got, want)


WARPERS = {
    "min_p": dict(min_p=0.05, temperature=0.8),
    "typical_p": dict(typical_p=0.7),
    "epsilon_cutoff": dict(epsilon_cutoff=3e-3),
    "eta_cutoff": dict(eta_cutoff=3e-3),
    "top_k_top_p": dict(top_k=20, top_p=0.8, temperature=1.3),
}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
@pytest.mark.parametrize("name", WARPERS)
def test_seeded_sampling_with_each_warper_is_hf_sampling(name, lengths):
    model, generator = built("llama")
    want, got = both(model, generator, lengths, max_new_tokens=24, do_sample=True,
                     **WARPERS[name])
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
def test_a_users_own_processor_and_stopping_criteria_are_applied_as_hf_applies_them():
    from transformers import (LogitsProcessor, LogitsProcessorList, StoppingCriteria,
                              StoppingCriteriaList)

    class BanLowIds(LogitsProcessor):
        def __call__(self, input_ids, scores):
            scores[:, :100] = -float("inf")
            return scores

    class StopAfterAnEvenToken(StoppingCriteria):
        def __init__(self, prompt: int):
            self.prompt = prompt

        def __call__(self, input_ids, scores, **kwargs):
            past_four = input_ids.shape[1] >= self.prompt + 4
            return (input_ids[:, -1] % 2 == 0) & torch.tensor(past_four)

    model, generator = built("llama")
    ids, mask = mixed_batch([17, 1, 7], seed=4)
    kwargs = dict(max_new_tokens=40, pad_token_id=1, eos_token_id=2)
    want = hf_generate(model, ids, mask, logits_processor=LogitsProcessorList([BanLowIds()]),
                       stopping_criteria=StoppingCriteriaList(
                           [StopAfterAnEvenToken(ids.shape[1])]), **kwargs)
    got = generator.generate(ids, attention_mask=mask,
                             logits_processor=LogitsProcessorList([BanLowIds()]),
                             stopping_criteria=StoppingCriteriaList(
                                 [StopAfterAnEvenToken(ids.shape[1])]), **kwargs)
    assert torch.equal(got, want)
    assert (got[:, ids.shape[1]:] >= 100).logical_or(got[:, ids.shape[1]:] == 1).all()
    assert got.shape[1] < ids.shape[1] + 40  # the criterion stopped it


@pytest.mark.builds_after_export
def test_stop_strings_with_a_tokenizer_stop_where_hf_stops():
    model, generator = built("gpt2")
    ids, mask = mixed_batch([17], seed=5)
    greedy = hf_generate(model, ids, mask, max_new_tokens=30)
    start = ids.shape[1] + 5
    tokenizer = char_tokenizer()
    stop = tokenizer.decode(greedy[0, start:start + 2])  # two tokens row 0 says early
    kwargs = dict(max_new_tokens=30, stop_strings=[stop], tokenizer=tokenizer, pad_token_id=1)
    want = hf_generate(model, ids, mask, **kwargs)
    got = generator.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(got, want)
    assert got.shape[1] < ids.shape[1] + 30


@pytest.mark.builds_after_export
def test_max_time_stops_after_the_token_that_passes_it():
    model, generator = built("gpt2")
    ids, mask = mixed_batch([9], seed=6)
    want = hf_generate(model, ids, mask, max_new_tokens=30, max_time=1e-9)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=30, max_time=1e-9)
    assert got.shape == want.shape == (1, ids.shape[1] + 1)
    assert torch.equal(got, want)


# -- outputs -----------------------------------------------------------------

@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
@pytest.mark.parametrize("sampling", [False, True], ids=["greedy", "sampling"])
def test_return_dict_in_generate_has_hfs_scores_and_logits(sampling, lengths):
    model, generator = built("llama")
    want, got = both(model, generator, lengths, max_new_tokens=12, do_sample=sampling,
                     top_k=30, return_dict_in_generate=True, output_scores=True,
                     output_logits=True)
    assert type(got) is type(want)
    assert torch.equal(got.sequences, want.sequences)
    assert len(got.scores) == len(want.scores) == len(got.logits) == 12
    for ours, theirs in [*zip(got.scores, want.scores), *zip(got.logits, want.logits)]:
        finite = torch.isfinite(theirs)
        assert torch.equal(torch.isfinite(ours), finite)
        assert torch.allclose(ours[finite], theirs[finite], atol=SCORE_TOLERANCE, rtol=0)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
def test_num_return_sequences_samples_as_hf_does(lengths):
    model, generator = built("llama")
    want, got = both(model, generator, lengths, max_new_tokens=16, do_sample=True,
                     num_return_sequences=3)
    assert got.shape[0] == 3 * len(lengths)
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
def test_a_text_iterator_streamer_gets_hfs_text():
    from transformers import TextIteratorStreamer

    model, generator = built("gpt2")
    ids, _ = mixed_batch([7], seed=9)
    texts = []
    for run in (lambda s: hf_generate(model, ids, max_new_tokens=10, streamer=s),
                lambda s: generator.generate(ids, max_new_tokens=10, streamer=s)):
        streamer = TextIteratorStreamer(char_tokenizer(), timeout=60)
        run(streamer)
        texts.append("".join(streamer))
    assert texts[0] == texts[1] != ""


# -- beam search ---------------------------------------------------------------

BEAMS = {
    "2_beams": dict(num_beams=2),
    "4_beams_2_returned": dict(num_beams=4, num_return_sequences=2),
    "5_beams_length_penalty": dict(num_beams=5, length_penalty=2.0, no_repeat_ngram_size=3,
                                   early_stopping=True),
    "4_beams_eos_never_stop_early": dict(num_beams=4, eos_token_id=[30, 40, 50, 60, 70],
                                         early_stopping="never", pad_token_id=1),
    "5_beams_all_returned_eos": dict(num_beams=5, num_return_sequences=5,
                                     eos_token_id=[30, 40, 50, 60, 70], pad_token_id=1),
    "3_beams_sampling": dict(num_beams=3, do_sample=True),
}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
@pytest.mark.parametrize("name", BEAMS)
def test_beam_search_is_hf_beam_search(name, lengths):
    model, generator = built("llama")
    want, got = both(model, generator, lengths, max_new_tokens=24, **BEAMS[name])
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
def test_beam_search_scores_and_indices_are_hfs(lengths):
    model, generator = built("gpt2")
    want, got = both(model, generator, lengths, max_new_tokens=16, num_beams=4,
                     num_return_sequences=3, eos_token_id=[30, 40, 50], pad_token_id=1,
                     return_dict_in_generate=True, output_scores=True)
    assert type(got) is type(want)
    assert torch.equal(got.sequences, want.sequences)
    assert torch.equal(got.beam_indices, want.beam_indices)
    assert torch.allclose(got.sequences_scores, want.sequences_scores, atol=SCORE_TOLERANCE,
                          rtol=0)
    for ours, theirs in zip(got.scores, want.scores):
        finite = torch.isfinite(theirs)
        assert torch.equal(torch.isfinite(ours), finite)
        assert torch.allclose(ours[finite], theirs[finite], atol=SCORE_TOLERANCE, rtol=0)


@pytest.mark.builds_after_export
def test_beam_search_reorders_the_cache_on_the_device(monkeypatch):
    from anyshape.runtime.compiled_module import CompiledModule

    model, generator = built("llama")
    calls = record_invocations(monkeypatch, generator.module)
    move_calls = record_calls(monkeypatch, CompiledModule, "move_rows")
    copies = record_host_copies(monkeypatch)
    ids, mask = mixed_batch([17, 1, 7], seed=3)
    generator.generate(ids, attention_mask=mask, max_new_tokens=12, num_beams=2)
    # Each prompt's prefill once, then six rows as the eight-row function's batch.
    assert calls == [(None, 3)] + [("decode_eight", 8)] * 11
    moved = [list(moves) for _, moves, _ in move_calls]
    assert moved and all(i < 6 and j < 6 for move in moved for i, j in move)
    assert copies == [(3, VOCAB)] + [(8, VOCAB)] * 11


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
def test_a_prompt_repeated_for_beams_and_samples_is_run_once(monkeypatch, lengths):
    """/// HF repeats each prompt for its beams (and its returned sequences):
    /// the prefill runs each prompt once, and the device copies its cache
    /// into the rows that repeat it."""
    from anyshape.runtime.compiled_module import CompiledModule

    model, generator = built("gpt2")
    calls = record_invocations(monkeypatch, generator.module)
    copied = record_calls(monkeypatch, CompiledModule, "copy_rows")
    for kwargs, rows in ((dict(num_beams=4), 4), (dict(do_sample=True, num_return_sequences=3), 3)):
        calls.clear()
        copied.clear()
        want, got = both(model, generator, lengths, max_new_tokens=12, **kwargs)
        assert torch.equal(got, want), kwargs
        assert calls[0] == (None, len(lengths)), calls
        beams = len(lengths) * rows
        pairs = copied[0][2]
        assert [j for _, j in pairs][:beams] == list(range(beams))
        assert [i for i, _ in pairs][:beams] == [r // rows for r in range(beams)]


@pytest.mark.builds_after_export
def test_moving_rows_on_the_device_follows_cycles_and_repeats():
    """Rows read by one move and written by another (a cycle, a row taken
    twice): each ends with the row it was given, from before any move."""
    import numpy as np

    _, generator = built("llama")
    module = generator.module
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((5, 2, 7, 3)).astype(np.float32) for _ in range(3)]
    arrays = module.device_arrays(host)
    scratch = module.device_arrays([np.zeros_like(h) for h in host])
    order = [2, 0, 0, 3, 1]
    module.move_rows(arrays, [(i, j) for i, j in enumerate(order) if i != j], scratch)
    for before, after in zip(host, arrays):
        assert np.array_equal(np.asarray(after.to_host()), before[order])


@pytest.mark.builds_after_export
def test_a_saved_generator_does_beam_search(tmp_path):
    model, generator = built("llama")
    loaded = anyshape.load(generator.save(tmp_path / "llama"))
    want, got = both(model, loaded, [17, 1, 7], max_new_tokens=16, num_beams=4)
    assert torch.equal(got, want)


# -- the model's generation config -------------------------------------------

@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
def test_the_models_generation_config_is_the_default_and_arguments_override_it(lengths):
    """A summarizer's defaults (BART's: beams, n-gram blocking, a length
    penalty, a minimum length) on a causal LM: applied with no arguments, and
    overridden by the ones given."""
    model, generator = built("llama")
    defaults = dict(num_beams=4, no_repeat_ngram_size=3, length_penalty=2.0, min_length=12,
                    max_length=40, early_stopping=True)
    model = copy.deepcopy(model)
    for key, value in defaults.items():
        setattr(model.generation_config, key, value)
    own = Generator(generator.module, generator.spec,
                    {**generator._generation_config, **defaults})
    for kwargs in ({}, {"num_beams": 1}, {"max_new_tokens": 6, "no_repeat_ngram_size": 0}):
        want, got = both(model, own, lengths, **kwargs)
        assert torch.equal(got, want), kwargs


# -- assisted decoding -----------------------------------------------------------

ASSISTED = {
    "prompt_lookup": dict(prompt_lookup_num_tokens=5),
    "prompt_lookup_sampling": dict(prompt_lookup_num_tokens=3, do_sample=True, top_k=20),
    "prompt_lookup_with_processors": dict(prompt_lookup_num_tokens=4, repetition_penalty=1.3,
                                          bad_words_ids=[[5], [7, 8]]),
}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("name", ASSISTED)
@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_prompt_lookup_decoding_is_hfs(model_type, name):
    model, generator = built(model_type)
    want, got = hf_and_ours(model, generator, copying_prompt(), None, max_new_tokens=40,
                            **ASSISTED[name])
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
def test_a_compiled_draft_model_assists_greedy_decoding():
    model, generator = built("gpt2")
    _, draft = built("gpt2", n_layer=1, num_hidden_layers=1)
    ids = copying_prompt(seed=7)
    greedy = generator.generate(ids, max_new_tokens=40)
    assert torch.equal(generator.generate(ids, max_new_tokens=40, assistant_model=draft), greedy)
    assert torch.equal(greedy, hf_generate(model, ids, None, max_new_tokens=40))


@pytest.mark.builds_after_export
def test_draft_tokens_are_verified_in_one_step_each(monkeypatch):
    """The model as its own draft: every draft token is accepted, so a few
    verify steps make all 40 tokens, and the draft's cache, which grows on
    the device from one drafting call to the next, drafts what greedy
    decoding gives (a draft cache that lost its tokens would be refused)."""
    _, generator = built("gpt2")
    ids = copying_prompt(seed=8)
    greedy = generator.generate(ids, max_new_tokens=40)
    calls = record_invocations(monkeypatch, generator.module, dim=1)
    grown = []
    grow_cache = Generator.grow_cache

    def recorded(self, cache, capacity):
        grown.append(capacity)
        return grow_cache(self, cache, capacity)

    monkeypatch.setattr(Generator, "grow_cache", recorded)
    # Drafting eight tokens a call: the draft's own generation config says how
    # many, and HF's default confidence threshold (0.4) would stop this random
    # model's drafts at one token.
    draft = Generator(generator.module, generator.spec,
                      {**generator._generation_config, "num_assistant_tokens": 8,
                       "assistant_confidence_threshold": 0.0})
    got = generator.generate(ids, max_new_tokens=40, assistant_model=draft)
    assert torch.equal(got, greedy)
    verified = [new for entry, new in calls if entry == "verify_draft"]
    assert verified and len(verified) <= 5, calls
    assert max(verified) == 9  # eight draft tokens and the one before them
    # Only the two prefills (the draft's and the model's) run more tokens
    # than a verification: no call runs again what the caches hold.
    assert [new for _, new in calls if new > 9] == [38, 37], calls
    # Grown when too small, to at most twice what the request holds.
    assert grown and max(grown) <= 2 * (ids.shape[1] + 40 + 8 + 2), grown


@pytest.mark.builds_after_export
def test_a_grown_cache_keeps_its_slots_on_the_device():
    import numpy as np

    _, generator = built("llama")
    module = generator.module
    rng = np.random.default_rng(1)
    host = [rng.standard_normal((2, 3, 5, 4)).astype(np.float32) for _ in range(2)]
    arrays = module.device_arrays(host)
    larger = module.device_arrays([np.zeros((2, 3, 9, 4), np.float32) for _ in host])
    module.copy_slots(arrays, larger, 4)
    for before, after in zip(host, larger):
        after = np.asarray(after.to_host())
        assert np.array_equal(after[:, :, :4], before[:, :, :4])
        assert not after[:, :, 4:].any()


@pytest.mark.builds_after_export
def test_assisted_decoding_takes_one_row_as_hf_does():
    _, generator = built("gpt2")
    ids, mask = mixed_batch([17, 7], seed=3)
    with pytest.raises(ValueError, match=r"assisted generate is only supported for "
                                         r"batch_size = 1"):
        generator.generate(ids, attention_mask=mask, max_new_tokens=8,
                           prompt_lookup_num_tokens=3)


@pytest.mark.builds_after_export
def test_a_generator_saved_without_the_verify_step_refuses_assisted_decoding():
    _, generator = built("gpt2")
    older = Generator(generator.module, {**generator.spec, "verify_entry": None},
                      generator._generation_config)
    ids = copying_prompt()
    assert torch.equal(older.generate(ids, max_new_tokens=8), generator.generate(
        ids, max_new_tokens=8))
    with pytest.raises(NotImplementedError, match=r"assisted decoding: this generator was saved "
                                                  r"by an anyshape without the step that "
                                                  r"verifies draft tokens"):
        older.generate(ids, max_new_tokens=8, prompt_lookup_num_tokens=3)
