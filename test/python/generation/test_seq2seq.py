"""``anyshape.compile_generator`` on unmodified HF encoder-decoders, token for token against HF's ``generate``.

BART and T5 from their default configs, shrunk (d_model 64, 2 encoder and 2
decoder layers, 4 heads, vocabulary 256), with random weights scaled up so
that greedy decoding does not repeat one token, each compiled once per
session. BART keeps its config's decoder start and forced end tokens; T5 gets
the decoder start token its checkpoints have (0). T5 is built with its
weights in a ``params.irpa``, BART with them in the ``.vmfb``. MarianMT
(sinusoidal positions, a final logits bias; its pad, start and end tokens
moved into the small vocabulary) and mT5 (T5 with gated-GELU feed-forwards)
are checked on the batch of source lengths.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from extent import sweep
from invocations import record_invocations
from test_generate import copying_prompt, hf_and_ours

import anyshape

VOCAB = 256
NEW_TOKENS = 48
SOURCES = [1, 9, 40, 333]
_SMALL = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
              max_position_embeddings=512, d_kv=16, d_ff=128, num_layers=2,
              num_decoder_layers=2, num_heads=4, vocab_size=VOCAB)
_FAMILY = {"bart": dict(init_std=0.5), "t5": dict(initializer_factor=8.0, decoder_start_token_id=0),
           "marian": dict(init_std=0.5, decoder_vocab_size=VOCAB, pad_token_id=1,
                          decoder_start_token_id=1, eos_token_id=0, forced_eos_token_id=0),
           "mt5": dict(initializer_factor=8.0, decoder_start_token_id=0)}
_BACKEND = {"t5": dict(params="external")}

_built: dict[str, tuple] = {}


def built(model_type: str, attention: str | None = None):
    """(HF model, generator), compiled once per test session; ``attention``:
    the HF attention implementation, where not the family's default."""
    key = model_type if attention is None else f"{model_type}:{attention}"
    if key not in _built:
        from transformers import AutoConfig, AutoModelForSeq2SeqLM

        config = AutoConfig.for_model(model_type)
        for name, value in {**_SMALL, **_FAMILY[model_type]}.items():
            if hasattr(config, name) or name == "decoder_start_token_id":
                setattr(config, name, value)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForSeq2SeqLM.from_config(
                config, **({} if attention is None else {"attn_implementation": attention})).eval()
        backend = anyshape.BackendOptions(**_BACKEND.get(model_type, {}))
        _built[key] = model, anyshape.compile_generator(model, backend=backend)
    return _built[key]


def sources(lengths: list[int], pad: int, seed: int = 0):
    """Right-padded sources (as tokenizers pad for encoder-decoders), tokens from 3 up."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(3, VOCAB, (len(lengths), width), generator=generator)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        ids[row, length:] = pad
    return ids, mask


def hf_generate(model, ids, mask=None, **kwargs):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, attention_mask=mask, **kwargs)


FAMILIES = ["bart", "t5"]
# Marian and mT5 are the full extent's (extent.py).
MORE_FAMILIES = sweep([], ["marian", "mt5"])


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES + MORE_FAMILIES)
def test_greedy_is_hf_generate_on_a_batch_of_source_lengths(model_type):
    model, generator = built(model_type)
    ids, mask = sources(SOURCES, model.config.pad_token_id, seed=1)
    want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    assert torch.equal(got, want), f"{model_type}:\n{got}\nHF:\n{want}"
    # Rows that differ, not one token repeated: the comparison says something.
    rows = want[:, 1:].tolist()
    assert len({tuple(row) for row in rows}) == len(rows), want
    assert any(len(set(row)) > 3 for row in rows), want


@pytest.mark.builds_after_export
def test_eager_attention_is_hf_generate_on_a_batch_of_source_lengths():
    # Eager attention adds its masks to the scores: BART built with it (as
    # LED, LongT5 and FSMT are by default) once got the boolean masks SDPA
    # takes, and generated other tokens than HF's, with no error.
    model, generator = built("bart", attention="eager")
    assert model.config._attn_implementation == "eager"
    ids, mask = sources(SOURCES, model.config.pad_token_id, seed=1)
    want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    assert torch.equal(got, want), f"{got}\nHF:\n{want}"


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("length", SOURCES)
def test_greedy_is_hf_generate_at_batch_1(model_type, length):
    model, generator = built(model_type)
    ids, _ = sources([length], model.config.pad_token_id, seed=length)
    want = hf_generate(model, ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    got = generator.generate(ids, max_new_tokens=NEW_TOKENS)
    assert torch.equal(got, want), f"{model_type} source {length}:\n{got}\nHF:\n{want}"


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
def test_each_batch_decodes_with_its_own_function(model_type, monkeypatch):
    # The encoder runs once, on the sources; each decoder step then runs the
    # function for one token at that batch (1, 4 or 8 rows, same weights): two
    # rows run as four (the encoded rows selected on the device), and nine
    # (more than eight) with the general step.
    model, generator = built(model_type)
    assert generator.spec["decode_entries"] == {"1": "decode_one", "4": "decode_four",
                                                "8": "decode_eight"}
    assert next(iter(generator.module.stage_seconds)) == "export-steps"
    calls = record_invocations(monkeypatch, generator.module)
    for lengths, entry, rows in (([9], "decode_one", 1), ([9, 4], "decode_four", 4),
                                 ([5, 1, 9, 2, 7, 3, 8, 6, 4], None, 9)):
        batch = len(lengths)
        calls.clear()
        ids, mask = sources(lengths, model.config.pad_token_id, seed=len(lengths))
        got = generator.generate(ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6)
        want = hf_generate(model, ids, mask, max_new_tokens=6, min_new_tokens=6,
                           do_sample=False)
        assert torch.equal(got, want), f"{model_type} {lengths}:\n{got}\nHF:\n{want}"
        selected = [("select_source_rows", rows)] if rows != batch else []
        assert calls == [("encode", batch)] + selected + [(entry, rows)] * 6, calls


@pytest.mark.builds_after_export
def test_sampling_with_a_seed_is_reproducible_and_is_hf_sampling():
    model, generator = built("bart")
    ids, mask = sources([9, 40], model.config.pad_token_id, seed=4)
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=True, top_k=50, temperature=0.9)
    torch.manual_seed(7)
    first = generator.generate(ids, attention_mask=mask, **kwargs)
    torch.manual_seed(7)
    second = generator.generate(ids, attention_mask=mask, **kwargs)
    torch.manual_seed(7)
    hf = hf_generate(model, ids, mask, **kwargs)
    assert torch.equal(first, second)
    assert torch.equal(first, hf), f"{first}\nHF:\n{hf}"


@pytest.mark.builds_after_export
def test_rows_ending_at_eos_are_padded_as_hf(tmp_path):
    # BART's forced end token at the last step, and an eos that some rows reach
    # early: the first token of a row's greedy output.
    model, generator = built("bart")
    ids, mask = sources([9, 40, 1], model.config.pad_token_id, seed=5)
    free = hf_generate(model, ids, mask, max_new_tokens=8, do_sample=False)
    eos = int(free[0, 3])
    want = hf_generate(model, ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                       eos_token_id=eos)
    got = generator.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                             eos_token_id=eos)
    assert torch.equal(got, want), f"{got}\nHF:\n{want}"


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", FAMILIES)
def test_tied_weights_are_stored_once(model_type):
    # The shared embedding (encoder, decoder, LM head) and every other weight
    # occur once in what holds the weights: BART's .vmfb as they are; T5's
    # params.irpa packed for the products that read them
    # (runtime/parameter_encoding.py), with the shared table as it is for the
    # lookups besides its packed copy for the LM head. Some weights are in it
    # in two forms, as the module packed them at load before: the attention's
    # projections concatenated for one product, and each alone for another
    # (docs/benchmarks.md, "sixth session").
    model, generator = built(model_type)
    module = generator.module
    embedding = model.get_input_embeddings().weight
    assert (module.parameters_path is not None) == (model_type == "t5")
    if module.parameters_path is None:
        stored = module.vmfb
        counts = {name: stored.count(p.detach().contiguous().numpy().tobytes()[:256])
                  for name, p in model.named_parameters() if p.ndim == 2 and p.numel() >= 64}
        assert counts and set(counts.values()) == {1}, counts
        assert model.get_output_embeddings().weight is embedding
        return
    stored = module.parameters_path.read_bytes()
    assert stored.count(embedding.detach().numpy().tobytes()[:256]) == 1
    unique = sum(p.numel() * p.element_size() for p in model.parameters())
    table = embedding.numel() * embedding.element_size()
    assert unique + table <= len(stored) <= 1.25 * (unique + table), (len(stored), unique, table)


@pytest.mark.builds_after_export
def test_save_and_load_give_the_same_generate(tmp_path):
    model, generator = built("t5")
    generator.save(tmp_path / "t5")
    loaded = anyshape.load(tmp_path / "t5")
    assert type(loaded).__name__ == "Seq2SeqGenerator"
    ids, mask = sources([17, 9], model.config.pad_token_id, seed=6)
    assert torch.equal(loaded.generate(ids, attention_mask=mask, max_new_tokens=12),
                       generator.generate(ids, attention_mask=mask, max_new_tokens=12))


@pytest.mark.builds_after_export
@pytest.mark.parametrize("kwargs,error,match", [
    (dict(decoder_start_token_id=[0, 2]), ValueError,
     r"`decoder_start_token_id` expected to have length 1 but got 2"),
    (dict(max_new_tokens=513), ValueError,
     r"max_new_tokens: generating up to 514 decoder tokens feeds the decoder 513; this bart "
     r"model has 512 positions"),
    (dict(output_hidden_states=True), NotImplementedError,
     r"output_hidden_states=True .*the compiled step returns the next-token logits only"),
    (dict(decoder_attention_mask=torch.tensor([[0, 1]]), decoder_input_ids=torch.tensor([[2, 5]])),
     NotImplementedError, r"decoder_attention_mask: the compiled decoder runs every decoder "
                          r"token"),
])
def test_arguments_generate_does_not_take_are_refused(kwargs, error, match):
    model, generator = built("bart")
    ids, _ = sources([5], model.config.pad_token_id)
    with pytest.raises(error, match=match):
        generator.generate(ids, **kwargs)


@pytest.mark.builds_after_export
def test_defaults_are_hf_defaults():
    # No max_new_tokens: HF's 20 new tokens; sampling with no top_k: HF's top_k=50.
    model, generator = built("bart")
    ids, mask = sources([9, 1], model.config.pad_token_id, seed=8)
    got = generator.generate(ids, attention_mask=mask)
    assert torch.equal(got, hf_generate(model, ids, mask)) and got.shape[1] == 21
    torch.manual_seed(3)
    got = generator.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=24)
    torch.manual_seed(3)
    assert torch.equal(got, hf_generate(model, ids, mask, do_sample=True, max_new_tokens=24))
    # The full count fits the decoder's positions (the last token is never fed).
    assert generator.generate(ids[:1, :2], max_new_tokens=512,
                              eos_token_id=None).shape == (1, 513)


@pytest.mark.builds_after_export
def test_a_generation_config_passed_is_applied_as_hf_applies_it():
    model, generator = built("bart")
    config = generator.generation_config
    config.no_repeat_ngram_size = 2
    config.max_new_tokens = 30
    ids, mask = sources([5, 17], model.config.pad_token_id, seed=9)
    want = hf_generate(model, ids, mask, generation_config=config)
    got = generator.generate(ids, attention_mask=mask, generation_config=config)
    assert torch.equal(got, want), f"{got}\nHF:\n{want}"
    assert got.shape[1] == 31


@pytest.mark.builds_after_export
@pytest.mark.parametrize("mask,match", [
    (torch.tensor([[1, 1, 0], [0, 0, 0]]), "row 1 is all padding"),
    (torch.tensor([[1, 1, 0]]), r"expected shape \(2, 3\)"),
    (torch.tensor([[1, 2, 0], [1, 0, 0]]), "expected 0 .padding. and 1"),
])
def test_bad_source_masks_are_named(mask, match):
    _, generator = built("bart")
    with pytest.raises(ValueError, match=f"attention_mask: {match}"):
        generator.generate(torch.full((2, 3), 5), attention_mask=mask, max_new_tokens=2)


def test_a_speech_encoder_decoder_is_refused():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration(WhisperConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32))
    with pytest.raises(NotImplementedError, match=r"model: WhisperForConditionalGeneration's "
                                                  r"encoder takes input_features, not token ids"):
        anyshape.compile_generator(model)


# -- beam search (issue 67) --------------------------------------------------------

SEQ2SEQ_BEAMS = {
    "2_beams": dict(num_beams=2),
    "4_beams": dict(num_beams=4),
    "5_beams_3_returned": dict(num_beams=5, num_return_sequences=3),
    "sampling_2_returned": dict(do_sample=True, num_return_sequences=2),
}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", [[9], [17, 1, 40]], ids=["batch_1", "mixed"])
@pytest.mark.parametrize("name", SEQ2SEQ_BEAMS)
@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_encoder_decoder_beam_search_is_hfs(model_type, name, lengths):
    model, generator = built(model_type)
    ids, mask = sources(lengths, model.config.pad_token_id, seed=2)
    want, got = hf_and_ours(model, generator, ids, mask, generate=hf_generate,
                            max_new_tokens=20, **SEQ2SEQ_BEAMS[name])
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("lengths", [[9], [17, 1, 40]], ids=["batch_1", "mixed"])
def test_bart_with_its_summarization_defaults_is_hf_generate(lengths):
    """BART summarization checkpoints' generation config (bart-large-cnn's:
    4 beams, no repeated trigram, length penalty 2, 56 to 142 tokens, early
    stopping), applied as the model's defaults with no arguments."""
    model, generator = built("bart")
    defaults = dict(num_beams=4, no_repeat_ngram_size=3, length_penalty=2.0, min_length=56,
                    max_length=142, early_stopping=True)
    model = copy.deepcopy(model)
    for key, value in defaults.items():
        setattr(model.generation_config, key, value)
    own = type(generator)(generator.module, generator.spec,
                          {**generator._generation_config, **defaults})
    ids, mask = sources(lengths, model.config.pad_token_id, seed=3)
    want, got = hf_and_ours(model, own, ids, mask, generate=hf_generate)
    assert torch.equal(got, want)
    assert got.shape[1] >= 56


@pytest.mark.builds_after_export
def test_encoder_decoder_beam_scores_are_hfs():
    """Within float32 rounding of HF's: over all steps, no further than twice
    as far from HF's float64 scores as HF's float32 ones are, give or take 1e-5
    (T5's scaled-up random weights give logits of about 250, which float32
    rounds by tenths)."""
    model, generator = built("t5")
    ids, mask = sources([17, 1, 40], model.config.pad_token_id, seed=4)
    kwargs = dict(max_new_tokens=12, num_beams=4, num_return_sequences=2,
                  return_dict_in_generate=True, output_scores=True, output_logits=True)
    want = hf_generate(model, ids, mask, **kwargs)
    exact = hf_generate(copy.deepcopy(model).double(), ids, mask, **kwargs)
    got = generator.generate(ids, attention_mask=mask, **kwargs)
    assert type(got) is type(want)
    assert torch.equal(got.sequences, want.sequences)
    assert torch.equal(got.sequences, exact.sequences)
    assert torch.equal(got.beam_indices, want.beam_indices)
    for name in ("sequences_scores", "scores", "logits"):
        ours, theirs, reference = (_finite_values(getattr(output, name), exact, name)
                                   for output in (got, want, exact))
        rounding = (theirs - reference).abs().max()
        assert (ours - reference).abs().max() <= 2 * rounding + 1e-5, name


def _finite_values(values, exact, name: str) -> torch.Tensor:
    """The values (one tensor or a tuple of steps') where HF's float64 ones
    are finite, in float64, as one vector."""
    values = values if isinstance(values, tuple) else (values,)
    references = getattr(exact, name)
    references = references if isinstance(references, tuple) else (references,)
    return torch.cat([v[torch.isfinite(r)].double() for v, r in zip(values, references)])


# -- assisted decoding (issue 67) ----------------------------------------------------

PROMPT_LOOKUP = {"greedy": dict(prompt_lookup_num_tokens=5),
                 "sampling": dict(prompt_lookup_num_tokens=3, do_sample=True, top_k=20)}


@pytest.mark.builds_after_export
@pytest.mark.parametrize("name", PROMPT_LOOKUP)
@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_encoder_decoder_prompt_lookup_is_hfs(model_type, name):
    """The decoder's drafts looked up in its own output (the source is not
    the decoder's prompt), verified by the decoder's verify step."""
    model, generator = built(model_type)
    want, got = hf_and_ours(model, generator, copying_prompt(), None,
                            generate=hf_generate, max_new_tokens=40, **PROMPT_LOOKUP[name])
    assert torch.equal(got, want)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_an_encoder_decoder_draft_model_is_greedy_in_verify_steps(monkeypatch, model_type):
    """An encoder-decoder as its own draft: the draft encodes the source
    once and keeps its decoder cache across drafting calls, and each call's
    eight drafts are checked by one verify step of nine decoder tokens."""
    model, generator = built(model_type)
    ids = copying_prompt(seed=9)
    greedy = generator.generate(ids, max_new_tokens=40)
    assert torch.equal(greedy, hf_generate(model, ids, None, max_new_tokens=40))
    calls = record_invocations(monkeypatch, generator.module, dim=1)
    draft = type(generator)(generator.module, generator.spec,
                            {**generator._generation_config, "num_assistant_tokens": 8,
                             "assistant_confidence_threshold": 0.0})
    assert torch.equal(generator.generate(ids, max_new_tokens=40, assistant_model=draft), greedy)
    verified = [new for entry, new in calls if entry == "verify_draft"]
    assert verified and len(verified) <= 6 and max(verified) == 9, calls
    assert [entry for entry, _ in calls].count("encode") == 2, calls  # the model's, the draft's
