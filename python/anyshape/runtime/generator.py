"""``Generator``: HF's ``generate`` contract on a compiled ``CausalLMStep``.

Needs only the runtime (torch, numpy, iree-base-runtime) and transformers'
generation utilities (``GenerationConfig`` and its logits processors, the
same objects HF's ``generate`` builds, in its order). The cache stays on the
device: ``generate`` makes one buffer per layer's keys and values, with room
for the whole request (the masked first slot, the prompt and
``max_new_tokens``), and each step writes its new slots into them in place
(``generation/step.py``); only the next-token logits come to the host. The buffers are
sized once per call, so they never grow during one, and a call of any length
needs no recompile. A step writes only past the slots already filled, so a
step that fails, or is run again, leaves the filled ones as they were.
``Seq2SeqGenerator``: the same contract on an encoder-decoder's ``encode``
and decoder step (``generation/seq2seq.py``).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anyshape.runtime.host_arrays import host_tensor, numpy_dtype

GENERATOR_FILE = "generator.json"
GENERATOR_FORMAT = "anyshape-generator"
GENERATOR_SCHEMA = 2  # 2: the step writes its cache in place
SEQ2SEQ_SCHEMA = 3  # an encoder-decoder's (seq2seq.py), which schema 2 readers refuse

# generate()'s keywords besides input_ids and attention_mask. The other
# GenerationConfig fields are not applied here, so they are refused, not ignored.
GENERATE_KEYWORDS = (
    "max_new_tokens", "max_length", "min_new_tokens", "min_length", "do_sample",
    "temperature", "top_k", "top_p", "repetition_penalty", "eos_token_id", "pad_token_id",
    "bos_token_id", "decoder_start_token_id", "streamer", "num_beams", "use_cache",
    "generation_config",
)


# GenerationConfig fields that change the tokens and that generate() does not
# apply, with the values that leave them off (None always does): any other
# value is refused, never ignored. The sampling ones count only with do_sample.
NOT_APPLIED = {
    "no_repeat_ngram_size": (0,), "encoder_no_repeat_ngram_size": (0,), "bad_words_ids": (),
    "sequence_bias": (), "suppress_tokens": ([],), "begin_suppress_tokens": ([],),
    "encoder_repetition_penalty": (1.0,), "exponential_decay_length_penalty": (),
    "renormalize_logits": (False,), "remove_invalid_values": (False,),
    "guidance_scale": (1.0,), "watermarking_config": (), "stop_strings": ([],), "max_time": (),
}
NOT_APPLIED_WHEN_SAMPLING = {"min_p": (0.0,), "typical_p": (1.0,), "epsilon_cutoff": (0.0,),
                             "eta_cutoff": (0.0,), "top_h": ()}


class Generator:
    """A causal LM compiled once (``anyshape.compile_generator``) for every
    prompt length, output length and batch."""

    SCHEMA = GENERATOR_SCHEMA

    def __init__(self, module, spec: dict, generation_config: dict):
        self.module = module
        self.spec = spec
        self._generation_config = generation_config

    # -- what it is --------------------------------------------------------
    @property
    def model_type(self) -> str:
        return self.spec["model_type"]

    @property
    def vocab_size(self) -> int:
        return self.spec["vocab_size"]

    @property
    def max_positions(self) -> int | None:
        return self.spec.get("max_positions")

    @property
    def generation_config(self):
        from transformers import GenerationConfig

        return GenerationConfig.from_dict(dict(self._generation_config))

    def _config_positions(self) -> int | None:
        """The model config's ``max_position_embeddings``, which HF's default
        length is capped at."""
        value = self.spec.get("config", {}).get("max_position_embeddings")
        return value if isinstance(value, int) and value > 0 else None

    # -- generate ----------------------------------------------------------
    def generate(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        """The prompt and the new tokens, [batch, prompt + new], as HF's
        ``model.generate(input_ids, attention_mask=..., **kwargs)`` returns
        them (greedy or sampling; prompts left-padded; rows that end early
        are padded with ``pad_token_id``)."""
        config = self._config_for(kwargs)
        streamer = kwargs.get("streamer")
        ids = _token_ids(input_ids, self.vocab_size)
        mask = _attention_mask(attention_mask, ids, config)
        batch, prompt = ids.shape
        new_tokens = _new_token_count(config, prompt, self._config_positions())
        if self.max_positions is not None and prompt + new_tokens > self.max_positions:
            raise ValueError(
                f"input_ids: a prompt of {prompt} tokens and {new_tokens} new tokens need "
                f"{prompt + new_tokens} positions; this {self.model_type} model has "
                f"{self.max_positions} (max_position_embeddings)")
        eos = _token_list(config.eos_token_id)
        pad = config.pad_token_id
        if eos and pad is None:
            pad = eos[0]  # as HF does (with a warning there)
        processors = self._processors(config, mask, prompt, eos, prompt + new_tokens)

        if streamer is not None:
            streamer.put(ids.cpu())
        # A batch with no decode function of its own runs as the next one up,
        # the extra rows copies of the first (their tokens are dropped).
        ids, mask = self._padded_to_decode_rows(ids, mask)
        rows = ids.shape[0]
        # The masked first slot, the prompt, every new token but the last (which
        # no step is given), and one more: the step was exported with more slots
        # than its mask covers, and torch.export's guards keep the two apart.
        cache = self._empty_cache(rows, 1 + prompt + new_tokens)
        with _torch_on_one_thread():
            return self._loop(ids, mask, cache, processors, config, new_tokens, eos, pad,
                              streamer, batch)

    def _padded_to_decode_rows(self, ids: torch.Tensor, mask: torch.Tensor):
        """``ids`` and ``mask`` with copies of their first row added up to the
        batch of the decode function that holds them (``_decode_rows``)."""
        extra = self._decode_rows(ids.shape[0]) - ids.shape[0]
        if extra == 0:
            return ids, mask
        return (torch.cat([ids, ids[:1].expand(extra, -1)]),
                torch.cat([mask, mask[:1].expand(extra, -1)]))

    def _decode_rows(self, batch: int) -> int:
        """The rows ``batch`` runs as: the smallest batch with a decode function
        of its own that holds it (``generation/model_spec.DECODE_ENTRIES``), else itself."""
        sizes = sorted(int(size) for size in self._decode_entries())
        return next((size for size in sizes if size >= batch), batch)

    def _decode_entries(self) -> dict:
        """Batch (as text) -> the module's decode function for it."""
        return self.spec["decode_entries"]

    def _loop(self, ids, mask, cache, processors, config, new_tokens, eos, pad, streamer,
              batch):
        """``ids`` and ``mask`` may hold more rows than ``batch`` (copies of the
        first): those are computed, and their logits dropped; the tokens they
        are fed are the first row's."""
        step_ids, step_mask = ids, mask
        extra = ids.shape[0] - batch
        sequences = ids[:batch]
        unfinished = torch.ones(batch, dtype=torch.long)
        for _ in range(new_tokens):
            logits = self._step(step_ids, step_mask, cache)[:batch]
            scores = processors(sequences, logits)
            if config.do_sample:
                probs = torch.nn.functional.softmax(scores, dim=-1)
                next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            else:
                next_tokens = torch.argmax(scores, dim=-1)
            if eos:
                next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
            sequences = torch.cat([sequences, next_tokens[:, None]], dim=-1)
            if streamer is not None:
                streamer.put(next_tokens.cpu())
            if eos:
                unfinished = unfinished & ~torch.isin(next_tokens, torch.tensor(eos))
                if not unfinished.any():
                    break
            step_ids = torch.cat([next_tokens, next_tokens[:1].expand(extra)])[:, None]
            step_mask = torch.cat([step_mask, torch.ones(batch + extra, 1, dtype=step_mask.dtype)],
                                  dim=-1)
        if streamer is not None:
            streamer.end()
        return sequences

    def _config_for(self, kwargs: dict):
        """The generation config of a call, by HF's precedence
        (``GenerationMixin._prepare_generation_config``): the config passed (or
        a blank one), its unset fields from the model's, then HF's global
        defaults (``top_k=50``, ``max_length=20``, ...), then the keywords."""
        from transformers import GenerationConfig

        accepted = (*GENERATE_KEYWORDS, *NOT_APPLIED, *NOT_APPLIED_WHEN_SAMPLING)
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise TypeError(f"generate() got unexpected keyword argument(s) {', '.join(unknown)}: "
                            f"it takes input_ids, attention_mask and "
                            f"{', '.join(GENERATE_KEYWORDS)}")
        given = kwargs.get("generation_config")
        config = GenerationConfig.from_dict(given.to_dict()) if given is not None \
            else GenerationConfig()
        own = self.generation_config
        # HF's "by default, 20 new tokens" holds where no max_length was set.
        config.anyshape_default_length = (kwargs.get("max_length") is None
                                          and config.max_length is None
                                          and own.max_length is None)
        config.update(**own.to_dict(), defaults_only=True, allow_custom_entries=True)
        config.update(**config._get_default_generation_params(), defaults_only=True)
        config.update(**{k: v for k, v in kwargs.items()
                         if k not in ("streamer", "generation_config")})
        if config.num_beams not in (None, 1):
            raise NotImplementedError(
                f"num_beams: beam search is not supported by anyshape's generate (got "
                f"num_beams={config.num_beams}); use num_beams=1 (greedy or sampling)")
        if getattr(config, "num_return_sequences", 1) not in (None, 1):
            raise NotImplementedError("num_return_sequences: only 1 is supported")
        fields = {**NOT_APPLIED, **(NOT_APPLIED_WHEN_SAMPLING if config.do_sample else {})}
        set_here = [name for name, off in fields.items()
                    if getattr(config, name, None) is not None and getattr(config, name) not in off]
        if set_here:
            off = ", ".join(f"{n}={(fields[n] or (None,))[0]!r}" for n in set_here)
            raise NotImplementedError(
                f"generation config: {', '.join(f'{n}={getattr(config, n)!r}' for n in set_here)} "
                f"(from the model's generation_config or an argument) is not applied by "
                f"anyshape's generate; pass {off} to generate without it")
        return config

    def _processors(self, config, mask: torch.Tensor | None, prompt: int, eos: list[int],
                    max_length: int):
        """HF's logits processors for ``config``, in the order ``generate``
        builds them; ``mask`` None: no padding before the tokens (a decoder's)."""
        from transformers.generation import logits_process as lp

        processors = lp.LogitsProcessorList()
        if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
            padding = (mask != 0).int().argmax(dim=1) if mask is not None else None
            processors.append(lp.RepetitionPenaltyLogitsProcessor(
                config.repetition_penalty, prompt_ignore_length=padding))
        eos_tensor = torch.tensor(eos) if eos else None
        if config.min_length and eos_tensor is not None:
            processors.append(lp.MinLengthLogitsProcessor(config.min_length, eos_tensor))
        if config.min_new_tokens and eos_tensor is not None:
            processors.append(lp.MinNewTokensLengthLogitsProcessor(
                prompt, config.min_new_tokens, eos_tensor))
        if config.forced_bos_token_id is not None:
            processors.append(lp.ForcedBOSTokenLogitsProcessor(config.forced_bos_token_id))
        if config.forced_eos_token_id is not None:
            processors.append(lp.ForcedEOSTokenLogitsProcessor(max_length,
                                                               config.forced_eos_token_id))
        if config.do_sample:
            if config.temperature is not None and config.temperature != 1.0:
                if config.temperature <= 0:
                    raise ValueError(f"temperature: expected a positive number, got "
                                     f"{config.temperature}")
                processors.append(lp.TemperatureLogitsWarper(config.temperature))
            if config.top_k is not None and config.top_k != 0:
                processors.append(lp.TopKLogitsWarper(top_k=config.top_k))
            if config.top_p is not None and config.top_p < 1.0:
                processors.append(lp.TopPLogitsWarper(top_p=config.top_p))
        return processors

    # -- the compiled step -------------------------------------------------
    def _empty_cache(self, batch: int, capacity: int) -> list:
        """Each layer's keys and values, zeros of ``capacity`` slots on the
        device, the first of which is the masked slot (``step.py``: the cache
        is never empty)."""
        dtype = numpy_dtype(self.spec["cache_dtype"])
        return self.module.device_arrays([np.zeros((batch, heads, capacity, dim), dtype=dtype)
                                          for layer in self.spec["cache"] for heads, dim in layer])

    def _step(self, ids: torch.Tensor, mask: torch.Tensor, cache: list) -> torch.Tensor:
        """One call, which writes ``ids``' keys and values into ``cache`` after
        the filled slots: ``mask`` covers the cache's tokens and ``ids``
        (without the cache's masked first slot, which is added here)."""
        batch = ids.shape[0]
        full_mask = np.concatenate([np.zeros((batch, 1), dtype=np.int64),
                                    mask.numpy().astype(np.int64)], axis=1)
        positions = mask.long().cumsum(-1) - 1
        positions.masked_fill_(mask == 0, 1)
        positions = positions[:, -ids.shape[1]:]
        # One token at a batch with a function of its own (generation/causal_lm.py).
        entry = self._decode_entries().get(str(ids.shape[0])) if ids.shape[1] == 1 else None
        results = self.module.invoke([ids.numpy().astype(np.int64),
                                      positions.numpy().astype(np.int64), full_mask, *cache],
                                     entry=entry)
        return host_tensor(np.asarray(results[0].to_host()),
                           self.spec["cache_dtype"]).to(torch.float32)

    # -- persistence -------------------------------------------------------
    def save(self, directory) -> Path:
        """The compiled module and what ``generate`` needs, in ``directory``;
        ``anyshape.load(directory)`` gives the generator back."""
        out = Path(directory)
        self.module.save(out)
        (out / GENERATOR_FILE).write_text(json.dumps(
            {"format": GENERATOR_FORMAT, "schema": self.SCHEMA, "spec": self.spec,
             "generation_config": self._generation_config}, indent=1, sort_keys=True) + "\n")
        return out


class Seq2SeqGenerator(Generator):
    """An encoder-decoder (T5, BART, ...) compiled once (``anyshape.compile_generator``,
    ``seq2seq.py``): the encoder runs once per call, its cross-attention keys
    and values stay on the device, and the decoder's cache is written in place."""

    SCHEMA = SEQ2SEQ_SCHEMA

    def generate(self, input_ids, attention_mask=None, **kwargs) -> torch.Tensor:
        """The decoder's tokens, [batch, 1 + new], the decoder start token
        first, as HF's ``model.generate(input_ids, attention_mask=..., **kwargs)``
        returns them for an encoder-decoder (sources padded on either side;
        rows that end early are padded with ``pad_token_id``)."""
        config = self._config_for(kwargs)
        streamer = kwargs.get("streamer")
        ids = _token_ids(input_ids, self.vocab_size)
        mask = _source_mask(attention_mask, ids, config)
        batch, source = ids.shape
        new_tokens = _new_token_count(config, 1, self._config_positions())
        limit = self.max_positions
        if limit is not None and source > limit:
            raise ValueError(f"input_ids: a source of {source} tokens; this {self.model_type} "
                             f"model has {limit} positions (max_position_embeddings)")
        # The decoder is fed the start token and every new token but the last.
        if limit is not None and new_tokens > limit:
            raise ValueError(f"max_new_tokens: {new_tokens} new tokens feed the decoder "
                             f"{new_tokens} tokens; this {self.model_type} model has {limit} "
                             f"positions (max_position_embeddings)")
        start = config.decoder_start_token_id
        if start is None:
            start = config.bos_token_id
        if start is None:
            raise ValueError("decoder_start_token_id: neither it nor bos_token_id is set, so "
                             "the decoder has no first token")
        if len(_token_list(start)) != 1:
            raise NotImplementedError(f"decoder_start_token_id: one start token for every row "
                                      f"is supported, got {start!r}")
        eos = _token_list(config.eos_token_id)
        pad = config.pad_token_id
        if eos and pad is None:
            pad = eos[0]
        processors = self._processors(config, None, 1, eos, 1 + new_tokens)
        # A batch with no decode function of its own runs as the next one up,
        # from the encoder on, the extra rows copies of the first.
        ids, mask = self._padded_to_decode_rows(ids, mask)
        rows = ids.shape[0]
        decoder = torch.full((rows, 1), int(_token_list(start)[0]), dtype=torch.long)
        if streamer is not None:
            streamer.put(decoder[:batch].cpu())
        with _torch_on_one_thread():
            states, *cross = self.module.invoke([ids.numpy(), mask.numpy()], entry="encode")
            # The decoder's slots: every token fed (the start token and all new
            # ones but the last), and one more (torch.export's guards keep the
            # capacity above the length).
            own = self._empty_cache(rows, new_tokens + 1)
            context = (own, cross, states, mask.numpy())
            return self._loop(decoder, torch.ones(rows, 1, dtype=torch.long), context,
                              processors, config, new_tokens, eos, pad, streamer, batch)

    def _step(self, ids: torch.Tensor, mask: torch.Tensor, context) -> torch.Tensor:
        own, cross, states, source_mask = context
        # One token a step: a batch with a function of its own calls it.
        entry = self._decode_entries().get(str(ids.shape[0]))
        results = self.module.invoke([ids.numpy().astype(np.int64),
                                      mask.numpy().astype(np.int64), source_mask, states,
                                      *own, *cross], entry=entry)
        return host_tensor(np.asarray(results[0].to_host()),
                           self.spec["cache_dtype"]).to(torch.float32)


@contextlib.contextmanager
def _torch_on_one_thread():
    """torch's own threads off while generate runs: between steps torch only
    works on [batch, vocab] rows, and its idle threads spinning beside IREE's
    made HF's logits processors take 4 ms a step (GPT-2, 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def load_generator(directory: Path, module) -> Generator:
    path = Path(directory) / GENERATOR_FILE
    try:
        data = json.loads(path.read_text())
        kind = {GENERATOR_SCHEMA: Generator, SEQ2SEQ_SCHEMA: Seq2SeqGenerator}.get(
            data.get("schema"))
        if data.get("format") != GENERATOR_FORMAT or kind is None or \
                (kind is Seq2SeqGenerator) != (data["spec"].get("kind") == "seq2seq"):
            raise ValueError(f"format {data.get('format')} schema {data.get('schema')}")
        return kind(module, data["spec"], data["generation_config"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: expected format {GENERATOR_FORMAT} schema {GENERATOR_SCHEMA} "
                         f"(a causal LM's) or {SEQ2SEQ_SCHEMA} (an encoder-decoder's), got one "
                         f"that does not fit ({error})") from None


def _token_ids(input_ids: Any, vocab_size: int) -> torch.Tensor:
    ids = torch.as_tensor(input_ids) if not isinstance(input_ids, torch.Tensor) else input_ids
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"input_ids: expected integer token ids, got dtype {ids.dtype}")
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"input_ids: expected shape [batch, length] with both at least 1, got "
                         f"{tuple(ids.shape)}")
    ids = ids.detach().cpu().long()
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"input_ids: expected token ids in [0, {vocab_size}), got values from "
                         f"{low} to {high}")
    return ids


def _given_or_inferred_mask(mask: Any, ids: torch.Tensor, config) -> torch.Tensor:
    """``mask`` checked against ``ids`` (its shape, 0 and 1 only), or where it
    is None, HF's: inferred from pad tokens only where pad is not eos."""
    if mask is None:
        pad, eos = config.pad_token_id, _token_list(config.eos_token_id)
        if pad is not None and pad not in eos and bool((ids == pad).any()):
            return (ids != pad).long()
        return torch.ones_like(ids)
    mask = torch.as_tensor(mask) if not isinstance(mask, torch.Tensor) else mask
    if tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"attention_mask: expected shape {tuple(ids.shape)} (as input_ids), got "
                         f"{tuple(mask.shape)}")
    mask = mask.detach().cpu().long()
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("attention_mask: expected 0 (padding) and 1 (token) only")
    return mask


def _attention_mask(mask: Any, ids: torch.Tensor, config) -> torch.Tensor:
    """A prompt's mask: padding on the left only."""
    checked = _given_or_inferred_mask(mask, ids, config)
    if mask is not None and bool((checked[:, -1] == 0).any()):
        row = int(torch.nonzero(checked[:, -1] == 0)[0])
        raise ValueError(f"attention_mask: row {row} ends with padding; generation needs prompts "
                         f"padded on the left (tokenizer.padding_side = 'left')")
    return checked


def _source_mask(mask: Any, ids: torch.Tensor, config) -> torch.Tensor:
    """An encoder's mask: padding on either side, each row with a token."""
    checked = _given_or_inferred_mask(mask, ids, config)
    empty = torch.nonzero(~checked.bool().any(dim=1))
    if len(empty):
        raise ValueError(f"attention_mask: row {int(empty[0])} is all padding; each source "
                         f"needs at least one token")
    return checked


def _new_token_count(config, prompt: int, positions: int | None = None) -> int:
    """HF's count: ``max_new_tokens``, else ``max_length`` less the prompt, and
    where no max_length was set, 20 new tokens within the model's
    ``positions`` (its config's ``max_position_embeddings``)."""
    if config.max_new_tokens is not None:
        count = config.max_new_tokens
    elif getattr(config, "anyshape_default_length", False):
        total = config.max_length + prompt
        count = (min(total, positions) if positions else total) - prompt
    else:
        count = (config.max_length or 20) - prompt
    if count < 1:
        raise ValueError(f"max_new_tokens: expected at least 1 new token, got {count} (prompt of "
                         f"{prompt} tokens, max_length {config.max_length})")
    return int(count)


def _token_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1)]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]
