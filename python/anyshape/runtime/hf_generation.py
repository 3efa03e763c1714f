"""HF's own ``generate`` over a compiled generator, its cache on the device.

``GenerationMixin.generate`` is HF's whole contract: the generation config's
precedence, every logits processor and stopping criterion, ``streamer``,
``num_return_sequences``, ``return_dict_in_generate`` with scores and
logits, beam search. Rather than restate it, ``CompiledGenerationModel`` is a
model HF's ``generate`` can drive: its ``forward`` is one call of the
compiled step, and its ``past_key_values`` is a ``DeviceCache``, the keys
and values in device buffers that the step writes in place
(``generation/step.py``). Only the next-token logits come to the host; a
beam search's reordering of the cache is done by the device's own buffer
copies (``CompiledModule.move_rows``).
An encoder-decoder's ``get_encoder()`` runs the compiled ``encode`` once per
source; the rows HF repeats for beams are gathered on the device too.
"""

from __future__ import annotations

import contextlib
import functools

import torch

# generate()'s arguments whose work the compiled step cannot do: each is
# refused with the reason, never ignored.
_REFUSED_CONFIG = {
    "output_attentions": "the compiled step returns the next-token logits only, not attentions",
    "output_hidden_states": "the compiled step returns the next-token logits only, not hidden "
                            "states",
    "guidance_scale": "classifier-free guidance runs the model on a second prompt inside a "
                      "logits processor, which a compiled generator does not take",
    "prefill_chunk_size": "the compiled step takes a prompt of any length in one call",
    "assistant_early_exit": "drafting with the model's first layers needs a model that can "
                            "stop early; the compiled step runs every layer (pass a smaller "
                            "compiled generator as assistant_model)",
    "use_mtp": "multi-token prediction drafts with heads the compiled step does not return",
    "speculation_type": "that drafting reads the model's embeddings, which stay on the device",
}
# The generation config's fields that select a decoding mode transformers 5
# moved to the Hub, by the mode's name.
_MODE_FIELDS = {"constrained beam search": "force_words_ids, constraints",
                "group beam search": "num_beam_groups, diversity_penalty",
                "contrastive search": "penalty_alpha", "dola generation": "dola_layers"}
# The values of those fields that leave them off (None always does).
_OFF = {"output_attentions": (False,), "output_hidden_states": (False,), "guidance_scale": (1.0,),
        "prefill_chunk_size": (), "assistant_early_exit": (), "use_mtp": (False,),
        "speculation_type": ()}
_REFUSED_ARGUMENTS = {
    "negative_prompt_ids": "classifier-free guidance is not supported",
    "negative_prompt_attention_mask": "classifier-free guidance is not supported",
    "custom_generate": "custom decoding loops are not supported",
    "synced_gpus": "a compiled generator runs in one process",
    "past_key_values": "a compiled generator keeps its own cache on the device",
    "inputs_embeds": "a compiled generator takes token ids",
    "position_ids": "a compiled generator derives positions from attention_mask, as HF does",
}


class DeviceCache:
    """The keys and values of one ``generate`` call: device buffers of
    ``capacity`` slots per row (the first a masked slot, ``step.py``), of
    which the first ``filled`` after it hold tokens. Allocated by the first
    step, for as many rows as the compiled function it calls computes."""

    is_compileable = False
    is_croppable = True

    def __init__(self, generator, capacity: int):
        self._generator = generator
        self.capacity = capacity
        self.buffers: list | None = None
        self.rows = 0
        self.filled = 0
        self.source: list | None = None  # an encoder-decoder's encoded rows, on the device
        self.scratch: list | None = None  # buffers a reordering copies rows through

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.filled

    def activate_past_recording(self) -> None:
        """Nothing to record: ``crop`` forgets slots by their count, and the
        next step writes over them."""

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` tokens (0: none), as HF's
        caches crop (transformers 5): the next step writes over their slots."""
        if tokens_to_remove > 0 or -tokens_to_remove > self.filled:
            raise ValueError(f"crop: expected 0 to -{self.filled} (the tokens to remove of the "
                             f"{self.filled} held), got {tokens_to_remove}")
        self.filled += tokens_to_remove

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Row ``i`` becomes row ``beam_idx[i]``, on the device (beam search)."""
        if self.buffers is not None:
            self._generator.reorder_cache(self, [int(i) for i in beam_idx])


class EncodedSource(dict):
    """An encoder-decoder's encoded sources, as ``generate`` passes them on:
    ``rows`` (a tensor, which HF repeats for beams and returned sequences as
    it repeats an encoder's states) says which source each decoder row reads;
    the states and cross-attention keys and values (``arrays``) stay on the
    device, one row per source. ``ids`` and ``mask`` are the sources."""

    def __init__(self, arrays: list, ids: torch.Tensor, mask: torch.Tensor):
        super().__init__(rows=torch.arange(ids.shape[0]))
        self.arrays, self.ids, self.mask = arrays, ids, mask

    @property
    def last_hidden_state(self) -> torch.Tensor:
        """[rows, source length, 0]: what HF reads of the states, their shape
        but for the width (an assistant's ``generate``, given encoder outputs
        and no source, makes placeholder ids of that shape); the states stay
        on the device."""
        return torch.empty(len(self["rows"]), self.ids.shape[1], 0)


class _Encoder:
    """An encoder-decoder's ``get_encoder()``: the compiled ``encode``."""

    def __init__(self, generator):
        self._generator = generator

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, input_ids, attention_mask=None, output_attentions=None,
                output_hidden_states=None, return_dict=None):
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        return EncodedSource(self._generator.encode(input_ids, mask), input_ids, mask)


class _LogitsOutput(dict):
    """What HF's decoding loops read of a forward: ``logits`` and the cache."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def prepare() -> None:
    """Import what ``generate`` imports on its first call (transformers'
    generation utilities take seconds), now."""
    _compiled_model_class()


@functools.cache
def _compiled_model_class():
    """The class, made on first use: transformers is imported only when a
    generator generates."""
    from transformers import GenerationMixin

    class CompiledGenerationModel(GenerationMixin):
        """Enough of a ``PreTrainedModel`` for ``GenerationMixin.generate``."""

        main_input_name = "input_ids"
        base_model_prefix = "model"
        _is_stateful = False

        def __init__(self, generator, config, generation_config):
            self._generator = generator
            self.config = config
            self.generation_config = generation_config
            self.device = torch.device("cpu")
            self.dtype = torch.float32

        def __call__(self, *args, **kwargs):
            return self.forward(*args, **kwargs)

        def forward(self, input_ids=None, attention_mask=None, past_key_values=None,
                    decoder_input_ids=None, encoder_outputs=None, decoder_attention_mask=None,
                    use_cache=None, return_dict=None, logits_to_keep=None, **kwargs):
            for name in ("output_attentions", "output_hidden_states"):
                if kwargs.get(name):
                    raise NotImplementedError(f"{name}: {_REFUSED_CONFIG[name]}")
            cache = past_key_values
            if self.config.is_encoder_decoder:
                if decoder_attention_mask is not None and not bool(decoder_attention_mask.all()):
                    raise NotImplementedError("decoder_attention_mask: the compiled decoder "
                                              "runs every decoder token, with no padding")
                keep = min(int(logits_to_keep or 1), decoder_input_ids.shape[1])
                logits = self._generator.cached_step(decoder_input_ids, None, cache, keep,
                                                     source=encoder_outputs,
                                                     source_mask=attention_mask)
            else:
                batch, new = input_ids.shape
                if attention_mask is None:
                    attention_mask = torch.ones(batch, cache.filled + new, dtype=torch.long)
                if attention_mask.shape[1] != cache.filled + new:
                    raise RuntimeError(f"a step of {new} tokens after {cache.filled} has a "
                                       f"mask of {attention_mask.shape[1]} columns")
                # Assisted decoding asks for the logits of the draft tokens
                # and the one before them: one verify step.
                keep = min(int(logits_to_keep or 1), new)
                logits = self._generator.cached_step(input_ids, attention_mask, cache, keep)
            if keep > 1:
                return _LogitsOutput(logits=logits, past_key_values=cache)
            return _LogitsOutput(logits=logits[:, None, :], past_key_values=cache)

        def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None,
                                          past_key_values=None, attention_mask=None,
                                          is_first_iteration=False, **kwargs):
            # The tokens the cache does not hold yet, whatever HF asks: a
            # prefill, a decode step, or a step after a crop.
            new = input_ids[:, past_key_values.get_seq_length():]
            if self.config.is_encoder_decoder:
                return {"decoder_input_ids": new, "attention_mask": attention_mask,
                        "encoder_outputs": kwargs.get("encoder_outputs"),
                        "decoder_attention_mask": kwargs.get("decoder_attention_mask"),
                        "past_key_values": past_key_values,
                        "logits_to_keep": kwargs.get("logits_to_keep")}
            if attention_mask is not None and attention_mask.shape[1] != input_ids.shape[1]:
                raise RuntimeError(f"input_ids of {input_ids.shape[1]} tokens with a mask of "
                                   f"{attention_mask.shape[1]}")
            return {"input_ids": new, "attention_mask": attention_mask,
                    "past_key_values": past_key_values,
                    "logits_to_keep": kwargs.get("logits_to_keep")}

        def get_encoder(self):
            return _Encoder(self._generator)

        def _prepare_cache_for_generation(self, generation_config, model_kwargs,
                                          generation_mode, batch_size, max_cache_length):
            for name, reason in _REFUSED_CONFIG.items():
                value = getattr(generation_config, name, None)
                if value is not None and value not in _OFF[name]:
                    raise NotImplementedError(f"{name}={value!r} (from the model's generation "
                                              f"config or an argument): {reason}")
            limit = self._generator.max_positions
            if limit is not None and self.config.is_encoder_decoder \
                    and generation_config.max_length - 1 > limit:
                # The decoder is fed the start token and every new token but the last.
                raise ValueError(
                    f"max_new_tokens: generating up to {generation_config.max_length} decoder "
                    f"tokens feeds the decoder {generation_config.max_length - 1}; this "
                    f"{self._generator.model_type} model has {limit} positions "
                    f"(max_position_embeddings)")
            if limit is not None and not self.config.is_encoder_decoder \
                    and generation_config.max_length > limit:
                raise ValueError(
                    f"input_ids: generating up to {generation_config.max_length} tokens (prompt "
                    f"and new tokens) needs {generation_config.max_length} positions; this "
                    f"{self._generator.model_type} model has {limit} (max_position_embeddings)")
            # The masked first slot, every token but the last (which no step
            # is given), and one more: the step was exported with more slots
            # than its mask covers, and torch.export's guards keep them apart.
            capacity = max_cache_length + 2
            # The compiled step always keeps its cache; use_cache=False (the
            # config of a model exported without one) would change only HF's
            # speed, and HF's assisted decoding refuses it.
            generation_config.use_cache = True
            cache = model_kwargs.get("past_key_values")
            if isinstance(cache, DeviceCache) and cache._generator is self._generator:
                # An assistant's, kept across the calls that draft tokens:
                # grown (doubled, so that the copies are few) when too small.
                if capacity > cache.capacity:
                    self._generator.grow_cache(cache, max(capacity, 2 * cache.capacity))
            else:
                model_kwargs["past_key_values"] = DeviceCache(self._generator, capacity)

        def _get_deprecated_gen_repo(self, generation_mode, trust_remote_code,
                                     custom_generate=None):
            from transformers.generation.utils import GENERATION_MODES_MAPPING

            repo = GENERATION_MODES_MAPPING[generation_mode]
            if custom_generate is None and "/" in repo:
                mode = generation_mode.name.replace("_", " ").lower()
                raise NotImplementedError(
                    f"{_MODE_FIELDS.get(mode, mode)}: {mode} is not in transformers' own "
                    f"generate since version 5 (it is the Hub repository {repo}), and anyshape "
                    f"runs no decoding code from the Hub")
            return None

        def _get_logits_processor(self, *args, **kwargs):
            # HF's processors, but top-p sorts only what top-k left (top_p.py).
            from anyshape.runtime.top_p import with_sparse_top_p

            return with_sparse_top_p(super()._get_logits_processor(*args, **kwargs))

        def _valid_auto_compile_criteria(self, model_kwargs, generation_config) -> bool:
            return False

        @contextlib.contextmanager
        def _optimize_model_for_decode(self):
            yield

        def _supports_logits_to_keep(self) -> bool:
            return True

    return CompiledGenerationModel


def hf_generate(generator, input_ids, attention_mask, kwargs: dict):
    """``GenerationMixin.generate`` over ``generator``'s compiled step."""
    for name, reason in _REFUSED_ARGUMENTS.items():
        if kwargs.get(name) is not None and kwargs.get(name) is not False:
            raise NotImplementedError(f"{name}: {reason}")
    assistant = kwargs.get("assistant_model")
    if assistant is not None and hasattr(assistant, "cached_step"):
        kwargs = {**kwargs, "assistant_model": _as_model(assistant)}
    return _as_model(generator).generate(input_ids, attention_mask=attention_mask, **kwargs)


def _as_model(generator):
    """``generator`` as a model HF's ``generate`` drives."""
    return _compiled_model_class()(generator, _model_config(generator.spec),
                                   generator.generation_config)


# What HF's generate reads of a model's config besides its vocabulary:
# is_encoder_decoder, and the positions for MaxLengthCriteria's warning.
_CONFIG_READ = ("is_encoder_decoder", "max_position_embeddings")


def _model_config(spec: dict):
    """A config with what HF's ``generate`` reads of the saved one. Not the
    saved one rebuilt: a config edited after it was made (fewer layers than
    its ``layer_types``) no longer passes its own class's checks."""
    from transformers import PretrainedConfig

    saved = spec.get("config", {})
    config = PretrainedConfig()
    for name in _CONFIG_READ:
        if name in saved:
            setattr(config, name, saved[name])
    config.vocab_size = spec["vocab_size"]  # the logits' width (a watermark's processor)
    return config
