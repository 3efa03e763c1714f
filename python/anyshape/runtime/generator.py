"""``Generator``: HF's ``generate`` on a compiled ``CausalLMStep``.

Needs only the runtime (torch, numpy, iree-base-runtime) and transformers'
generation code: ``generate`` is HF's own ``GenerationMixin.generate``, over
this compiled step (``hf_generation.py``). The cache stays on the device:
the first step makes one buffer per layer's keys and values, with room for
the whole request (the masked first slot, the prompt and the new tokens),
and each step writes its new slots into them in place
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


class Generator:
    """A causal LM compiled once (``anyshape.compile_generator``) for every
    prompt length, output length and batch."""

    SCHEMA = GENERATOR_SCHEMA

    def __init__(self, module, spec: dict, generation_config: dict):
        self.module = module
        self.spec = spec
        self._generation_config = generation_config

    def preload(self) -> bool:
        """Its module loaded into its context (``CompiledModule.preload``) and
        HF's generation utilities imported, which the first ``generate``
        did otherwise (seconds each). Returns whether the module loaded."""
        from anyshape.runtime.hf_generation import prepare

        prepare()
        return self.module.preload()

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

    # -- generate ----------------------------------------------------------
    def generate(self, input_ids, attention_mask=None, **kwargs):
        """HF's ``model.generate(input_ids, attention_mask=..., **kwargs)``, run
        by HF's own ``GenerationMixin.generate`` over the compiled step
        (``hf_generation.py``): the prompt and the new tokens, [batch, prompt +
        new] (prompts left-padded; rows that end early padded with
        ``pad_token_id``), or HF's output object with
        ``return_dict_in_generate=True``."""
        from anyshape.runtime.hf_generation import hf_generate

        ids = _token_ids(input_ids, self.vocab_size)
        mask = None if attention_mask is None else _attention_mask(attention_mask, ids)
        with _torch_on_one_thread():
            return hf_generate(self, ids, mask, kwargs)

    def cached_step(self, ids: torch.Tensor, mask: torch.Tensor, cache,
                    keep: int = 1) -> torch.Tensor:
        """The next-token logits [batch, vocab] of ``ids`` after the tokens
        ``cache`` (``hf_generation.DeviceCache``) holds, whose keys and values
        the step writes after them; ``mask`` covers both. With ``keep`` > 1,
        the logits [batch, keep, vocab] of the last ``keep`` tokens (assisted
        decoding's verification of ``keep - 1`` draft tokens), the tokens
        before them run by the ordinary step."""
        batch, new = ids.shape
        self._check_keep(keep, new)
        if keep > 1 and new > keep:
            self.cached_step(ids[:, :new - keep], mask[:, :mask.shape[1] - keep], cache)
            ids = ids[:, new - keep:]
            new = keep
        if cache.buffers is None:
            cache.rows = self._decode_rows(batch)
            cache.buffers = self._empty_cache(cache.rows, cache.capacity)
            if new > 1 and keep == 1:
                logits = self._prefill_each_prompt_once(ids, mask, cache)
                if logits is not None:
                    return logits
        if self._decode_rows(batch) != cache.rows:
            raise RuntimeError(f"a step of {batch} rows on a cache of {cache.rows}")
        self._make_room(cache, new)
        ids, mask = self._padded_to_decode_rows(ids, mask)
        entry = self.spec["verify_entry"] if keep > 1 else None
        logits = self._step(ids, mask, cache.buffers, entry)[:batch]
        cache.filled += new
        return logits

    def _prefill_each_prompt_once(self, ids: torch.Tensor, mask: torch.Tensor, cache):
        """The first step's logits where rows repeat a prompt (HF repeats
        each prompt for its beams, and for its returned sequences): each
        distinct prompt is run once, into a cache of its own rows, which the
        device then copies into every row that repeats it. None where no row
        repeats another (the step then runs as usual)."""
        rows, _ = self._padded_to_decode_rows(torch.cat([ids, mask], dim=1), mask)
        firsts: dict[tuple, int] = {}
        of_row = [firsts.setdefault(tuple(row), len(firsts)) for row in rows.tolist()]
        if len(firsts) == len(of_row):
            return None
        prompts = [of_row.index(number) for number in range(len(firsts))]
        own = self._empty_cache(len(prompts), cache.capacity)
        logits = self._step(ids[prompts], mask[prompts], own)
        self.module.copy_rows(own, cache.buffers,
                              [(number, row) for row, number in enumerate(of_row)])
        cache.filled += ids.shape[1]
        return logits[torch.tensor(of_row[:ids.shape[0]])]

    def _check_keep(self, keep: int, new: int) -> None:
        if not 1 <= keep <= new:
            raise ValueError(f"keep: expected 1 to the {new} new tokens, got {keep}")
        if keep > 1 and self.spec.get("verify_entry") is None:
            raise NotImplementedError(
                "assisted decoding: this generator was saved by an anyshape without the step "
                "that verifies draft tokens; compile it again")

    def _make_room(self, cache, new: int) -> None:
        """Grow ``cache`` where ``new`` tokens overflow it: draft tokens past
        the request's length (assisted decoding), verified and then cropped."""
        if cache.filled + new >= cache.capacity:
            self.grow_cache(cache, max(cache.filled + new + 1, cache.capacity * 5 // 4))

    def grow_cache(self, cache, capacity: int) -> None:
        """Give ``cache`` at least ``capacity`` slots, its tokens copied on the
        device into the larger buffers (an assistant's cache, which lives
        across the ``generate`` calls that draft tokens)."""
        if capacity <= cache.capacity:
            return
        if cache.buffers is not None:
            larger = self._empty_cache(cache.rows, capacity)
            # The masked first slot and the filled ones after it.
            self.module.copy_slots(cache.buffers, larger, cache.filled + 1)
            cache.buffers, cache.scratch = larger, None
        cache.capacity = capacity

    def reorder_cache(self, cache, order: list[int]) -> None:
        """Row ``i`` of ``cache`` (``hf_generation.DeviceCache``) becomes row
        ``order[i]``, copied on the device (``CompiledModule.move_rows``)."""
        moves = [(i, j) for i, j in enumerate(order) if i != j]
        if not moves:
            return
        if cache.scratch is None:
            cache.scratch = self._empty_cache(cache.rows, cache.capacity)
        self.module.move_rows(cache.buffers, moves, cache.scratch)

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

    # -- the compiled step -------------------------------------------------
    def _empty_cache(self, batch: int, capacity: int) -> list:
        """Each layer's keys and values, zeros of ``capacity`` slots on the
        device, the first of which is the masked slot (``step.py``: the cache
        is never empty)."""
        dtype = numpy_dtype(self.spec["cache_dtype"])
        return self.module.device_arrays([np.zeros((batch, heads, capacity, dim), dtype=dtype)
                                          for layer in self.spec["cache"] for heads, dim in layer])

    def _step(self, ids: torch.Tensor, mask: torch.Tensor, cache: list,
              entry: str | None = None) -> torch.Tensor:
        """One call, which writes ``ids``' keys and values into ``cache`` after
        the filled slots: ``mask`` covers the cache's tokens and ``ids``
        (without the cache's masked first slot, which is added here). ``entry``:
        the module's function to call, else the decode function for the batch
        (one new token) or the general step."""
        batch = ids.shape[0]
        full_mask = np.concatenate([np.zeros((batch, 1), dtype=np.int64),
                                    mask.numpy().astype(np.int64)], axis=1)
        positions = mask.long().cumsum(-1) - 1
        positions.masked_fill_(mask == 0, 1)
        positions = positions[:, -ids.shape[1]:]
        # One token at a batch with a function of its own (generation/causal_lm.py).
        if entry is None and ids.shape[1] == 1:
            entry = self._decode_entries().get(str(ids.shape[0]))
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

    def generate(self, input_ids, attention_mask=None, **kwargs):
        """HF's ``model.generate(input_ids, attention_mask=..., **kwargs)`` for an
        encoder-decoder, run by HF's ``GenerationMixin.generate``
        (``hf_generation.py``): the decoder's tokens, [batch, 1 + new], the
        decoder start token first (sources padded on either side; rows that
        end early padded with ``pad_token_id``), or HF's output object."""
        from anyshape.runtime.hf_generation import hf_generate

        ids = _token_ids(input_ids, self.vocab_size)
        mask = None if attention_mask is None else _source_mask(attention_mask, ids)
        limit = self.max_positions
        if limit is not None and ids.shape[1] > limit:
            raise ValueError(f"input_ids: a source of {ids.shape[1]} tokens; this "
                             f"{self.model_type} model has {limit} positions "
                             f"(max_position_embeddings)")
        with _torch_on_one_thread():
            return hf_generate(self, ids, mask, kwargs)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor | None) -> list:
        """The encoder states and each decoder layer's cross-attention keys
        and values of these sources, on the device."""
        mask = torch.ones_like(ids) if mask is None else mask
        return list(self.module.invoke([ids.numpy().astype(np.int64),
                                        mask.numpy().astype(np.int64)], entry="encode"))

    def cached_step(self, ids: torch.Tensor, mask: torch.Tensor, cache, keep: int = 1,
                    source=None, source_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The next-token logits [batch, vocab] of decoder tokens ``ids`` after
        the ones ``cache`` holds (``mask`` covers both, all 1: the decoder has
        no padding), on ``source`` (``hf_generation.EncodedSource``, its rows
        repeated as HF repeats them for beams and returned sequences). With
        ``keep`` > 1, the logits [batch, keep, vocab] of the last ``keep``
        tokens (assisted decoding), as ``Generator.cached_step``."""
        batch, new = ids.shape
        self._check_keep(keep, new)
        if keep > 1 and new > keep:
            self.cached_step(ids[:, :new - keep], None, cache, source=source,
                             source_mask=source_mask)
            ids = ids[:, new - keep:]
            new = keep
        if cache.buffers is None:
            cache.rows = self._decode_rows(batch)
            cache.buffers = self._empty_cache(cache.rows, cache.capacity)
            cache.source = self._source_rows(source, cache.rows)
        self._make_room(cache, new)
        if source_mask is None:
            source_mask = torch.ones(batch, cache.source[0].shape[1], dtype=torch.long)
        ids, source_mask = self._padded_to_decode_rows(ids, source_mask)
        states, *cross = cache.source
        # One token a step at a batch with a function of its own; a decoder
        # prefix (decoder_input_ids) at the first step runs main.
        if keep > 1:
            entry = self.spec["verify_entry"]
        else:
            entry = self._decode_entries().get(str(ids.shape[0])) if new == 1 else None
        decoder_mask = np.ones((ids.shape[0], cache.filled + new), dtype=np.int64)
        results = self.module.invoke([ids.numpy().astype(np.int64), decoder_mask,
                                      source_mask.numpy().astype(np.int64), states,
                                      *cache.buffers, *cross], entry=entry)
        cache.filled += new
        return host_tensor(np.asarray(results[0].to_host()),
                           self.spec["cache_dtype"]).to(torch.float32)[:batch]

    def _source_rows(self, source, rows: int) -> list:
        """The encoded source for ``rows`` decoder rows: row i the source row
        ``source.rows[i]``, the rows past them copies of the first."""
        order = [int(i) for i in source["rows"]]
        order += order[:1] * (rows - len(order))
        arrays = source.arrays
        if order == list(range(arrays[0].shape[0])):
            return arrays
        entry = self.spec.get("source_rows_entry")
        if entry is None:  # an earlier build: the rows encoded again
            index = torch.tensor(order)
            return self.encode(source.ids[index], source.mask[index])
        return list(self.module.invoke([np.asarray(order, dtype=np.int64), *arrays],
                                       entry=entry))


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


def _checked_mask(mask: Any, ids: torch.Tensor) -> torch.Tensor:
    """``mask`` checked against ``ids``: its shape, 0 and 1 only."""
    mask = torch.as_tensor(mask) if not isinstance(mask, torch.Tensor) else mask
    if tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"attention_mask: expected shape {tuple(ids.shape)} (as input_ids), got "
                         f"{tuple(mask.shape)}")
    mask = mask.detach().cpu().long()
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("attention_mask: expected 0 (padding) and 1 (token) only")
    return mask


def _attention_mask(mask: Any, ids: torch.Tensor) -> torch.Tensor:
    """A prompt's mask: padding on the left only."""
    checked = _checked_mask(mask, ids)
    if bool((checked[:, -1] == 0).any()):
        row = int(torch.nonzero(checked[:, -1] == 0)[0])
        raise ValueError(f"attention_mask: row {row} ends with padding; generation needs prompts "
                         f"padded on the left (tokenizer.padding_side = 'left')")
    return checked


def _source_mask(mask: Any, ids: torch.Tensor) -> torch.Tensor:
    """An encoder's mask: padding on either side, each row with a token."""
    checked = _checked_mask(mask, ids)
    empty = torch.nonzero(~checked.bool().any(dim=1))
    if len(empty):
        raise ValueError(f"attention_mask: row {int(empty[0])} is all padding; each source "
                         f"needs at least one token")
    return checked
