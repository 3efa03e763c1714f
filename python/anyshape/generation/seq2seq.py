"""Encoder-decoder models (T5, BART, Marian, mT5): the encoder once, the decoder per token.

Functions of one module, on one copy of the weights (and beside them the decode
steps at static batches and the selection of source rows, below):

    encode(input_ids [B, S], attention_mask [B, S])
      -> encoder states [B, S, H], then each decoder layer's cross-attention
         keys and values [B, H_kv, S, D]

    main(decoder_input_ids [B, T], decoder_mask [B, P + T], attention_mask [B, S],
         encoder states [B, S, H], *self_cache [B, H_kv, C, D], *cross [B, H_kv, S, D])
      -> next-token logits [B, V]

    verify_draft(the same inputs) -> every new token's logits [B, T, V]

``encode`` runs the model's encoder, then HF's decoder once on one token with
an empty cross-attention cache: HF fills that cache with each layer's keys
and values of the encoder states, which are returned (the token's logits are
not, and IREE drops what only they needed). The cross keys and values are
thus HF's own, for every family, and stay on the device for the request.

``main`` is the decoder step. Its self-attention cache is written in place
as the causal step's is (``step.py``): a buffer of capacity C whose first P
slots are filled, P the decoder mask's length less T. The decoder has no
padding (every row starts from the decoder start token), so no slot is
masked and positions are the slots' indices, as HF's decoder counts them
from the cache's length. The cross-attention cache is a layer HF finds
already updated, so it reads the given keys and values and computes none.
The encoder's mask reaches the cross-attention as a 4-D mask, the decoder's
causal mask likewise, each used by HF as given: boolean for SDPA, additive
for eager attention (``step.attention_mask_for``).

The decoder is fed one token a step, so beside ``main`` is the step at a
static batch of 1, 4 and 8 rows and one token, its lengths dynamic
(``model_spec.DECODE_ENTRIES``), as for causal LMs: IREE then packs the
products for tiles of that many rows. As there, only the step returning
every new token's logits is traced; ``main`` and the decode steps are
derived from it (``frontend/derived_programs.py``). A batch between them runs as the next
one up, from ``encode`` on.
"""

from __future__ import annotations

import functools
import time

import torch

from anyshape.generation.step import (SourceRowGather, _filled_in_place_layer,
                                      attention_mask_for, takes_additive_mask)

# Example sizes for torch.export, each above 1 and each different (see
# causal_lm.py): the decoder's cache has ``past`` filled slots of ``capacity``.
_EXAMPLE = {"batch": 2, "source": 5, "new": 3, "past": 5, "capacity": 11}


@functools.cache
def _fixed_layer():
    from transformers.cache_utils import DynamicLayer

    class Fixed(DynamicLayer):
        """Keys and values given whole (the cross-attention's, from ``encode``)."""

        def __init__(self, keys, values):
            super().__init__()
            self.keys, self.values = keys, values
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True

    return Fixed


def _cross_cache(past) -> list:
    return [t for layer in past.cross_attention_cache.layers for t in (layer.keys, layer.values)]


class Seq2SeqEncode(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        from transformers import DynamicCache, EncoderDecoderCache

        states = self.model.get_encoder()(input_ids=input_ids,
                                          attention_mask=attention_mask).last_hidden_state
        past = EncoderDecoderCache(DynamicCache(), DynamicCache())
        token = torch.zeros(input_ids.shape[0], 1, dtype=input_ids.dtype, device=input_ids.device)
        self.model(encoder_outputs=(states,), attention_mask=attention_mask,
                   decoder_input_ids=token, past_key_values=past, use_cache=True)
        return (states, *_cross_cache(past))


class Seq2SeqDecoderStep(torch.nn.Module):
    """The decoder on new tokens after its cache: the last new token's logits
    [batch, vocab], or with ``every_position`` every new token's [batch, new,
    vocab] (assisted decoding's verification of draft tokens)."""

    def __init__(self, model: torch.nn.Module, layers: int, every_position: bool = False):
        super().__init__()
        self.model = model
        self.layers = layers
        self.every_position = every_position
        self.additive_mask = takes_additive_mask(model.config)

    def forward(self, decoder_input_ids, decoder_mask, attention_mask, states, *cache):
        from transformers import DynamicCache, EncoderDecoderCache

        layers = self.layers
        new, total = decoder_input_ids.shape[1], decoder_mask.shape[1]
        own = DynamicCache()
        filled_layer = _filled_in_place_layer()
        own.layers = [filled_layer(cache[2 * i], cache[2 * i + 1], total - new)
                      for i in range(layers)]
        cross = DynamicCache()
        fixed = _fixed_layer()
        cross.layers = [fixed(cache[2 * layers + 2 * i], cache[2 * layers + 2 * i + 1])
                        for i in range(layers)]
        past = EncoderDecoderCache(own, cross)
        for i in range(layers):
            past.is_updated[i] = True
        query = torch.arange(new, device=decoder_mask.device) + (total - new)
        key = torch.arange(total, device=decoder_mask.device)
        causal = attention_mask_for(self.model, (key[None, :] <= query[:, None])[None, None] &
                                    (decoder_mask[:, None, None, :] != 0), self.additive_mask)
        source = attention_mask_for(self.model, attention_mask[:, None, None, :] != 0,
                                    self.additive_mask)
        out = self.model(encoder_outputs=(states,), attention_mask=source,
                         decoder_input_ids=decoder_input_ids, decoder_attention_mask=causal,
                         past_key_values=past, use_cache=True)
        return out.logits if self.every_position else out.logits[:, -1, :]


def probe_caches(model) -> tuple[list, list]:
    """Each decoder layer's self-attention and cross-attention key and value
    shapes without batch and length ([H_kv, D] each), from an eager call."""
    from transformers import DynamicCache, EncoderDecoderCache

    ids = torch.full((1, 2), 3, dtype=torch.long)
    past = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=ids[:, :1],
              past_key_values=past, use_cache=True)

    def shapes(cache):
        out = []
        for layer in cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is None or keys.ndim != 4 or values.ndim != 4:
                raise NotImplementedError(f"model: {type(model).__name__}'s decoder cache is not "
                                          f"[batch, heads, length, dim] keys and values")
            out.append(((keys.shape[1], keys.shape[3]), (values.shape[1], values.shape[3])))
        return out

    own, cross = shapes(past.self_attention_cache), shapes(past.cross_attention_cache)
    if not own or len(own) != len(cross):
        raise NotImplementedError(f"model: {type(model).__name__} filled {len(own)} self- and "
                                  f"{len(cross)} cross-attention cache layers")
    return own, cross


def _step_inputs(model, own_shapes, cross_shapes, batch: int, new: int, states) -> tuple:
    dtype = next(model.parameters()).dtype
    source, past, capacity = (_EXAMPLE[k] for k in ("source", "past", "capacity"))
    own = tuple(torch.zeros(batch, heads, capacity, dim, dtype=dtype)
                for layer in own_shapes for heads, dim in layer)
    cross = tuple(torch.randn(batch, heads, source, dim).to(dtype)
                  for layer in cross_shapes for heads, dim in layer)
    return (torch.randint(3, 100, (batch, new)), torch.ones(batch, past + new, dtype=torch.long),
            torch.ones(batch, source, dtype=torch.long), states[:1].expand(batch, -1, -1).clone(),
            *own, *cross)


def export_encode(model):
    """``encode`` exported: (its program, the encoder states of its example)."""
    from torch.export import Dim

    batch, source = _EXAMPLE["batch"], _EXAMPLE["source"]
    b, s = Dim("batch", min=1), Dim("source", min=1)
    ids = torch.randint(3, 100, (batch, source))
    mask = torch.ones(batch, source, dtype=torch.long)
    encode = Seq2SeqEncode(model)
    with torch.no_grad():
        program = torch.export.export(encode, (ids, mask),
                                      dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}))
        return program, encode(ids, mask)[0]


def step_dims(layers: int) -> tuple:
    """The decoder step's dynamic dims, as its flat inputs: new tokens, the
    decoder mask, the source mask, the encoder states, then ``layers``
    layers' own cache and cross-attention cache."""
    from torch.export import Dim

    b, s = Dim("batch", min=1), Dim("source", min=1)
    n, length, cap = Dim("new", min=1), Dim("length", min=1), Dim("capacity", min=2)
    return ({0: b, 1: n}, {0: b, 1: length}, {0: b, 1: s}, {0: b, 1: s},
            *([{0: b, 2: cap}] * (2 * layers) + [{0: b, 2: s}] * (2 * layers)))


def export_verify(model, own_shapes, cross_shapes, states) -> torch.export.ExportedProgram:
    """The decoder step returning every new token's logits over the layers
    ``own_shapes`` and ``cross_shapes`` describe (the first of the model's
    where fewer), exported."""
    layers = len(own_shapes)
    inputs = _step_inputs(model, own_shapes, cross_shapes, _EXAMPLE["batch"], _EXAMPLE["new"],
                          states)
    dims = step_dims(layers)
    with torch.no_grad():
        return torch.export.export(Seq2SeqDecoderStep(model, layers, every_position=True),
                                   inputs, dynamic_shapes=(*dims[:4], dims[4:]))


def decoder_name(model) -> str:
    """The dotted name of ``model``'s decoder ("" where it has none by that
    name: the whole model is searched for the layers)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    return next((name for name, module in model.named_modules() if module is decoder), "")


def export_source_rows(states, cross_shapes) -> torch.export.ExportedProgram:
    """``step.SourceRowGather`` for this model's encoded source, its rows (in
    and out) and the source's length dynamic."""
    from torch.export import Dim

    rows, batch, source = Dim("rows", min=1), Dim("batch", min=1), Dim("source", min=1)
    count, length = _EXAMPLE["batch"], _EXAMPLE["source"]
    example = states[:1, :1].expand(count, length, -1).contiguous()
    cross = tuple(torch.zeros(count, heads, length, dim, dtype=states.dtype)
                  for layer in cross_shapes for heads, dim in layer)
    order = torch.tensor([1, 0, 1])
    dims = ({0: rows}, {0: batch, 1: source}, tuple({0: batch, 2: source} for _ in cross))
    with torch.no_grad():
        return torch.export.export(SourceRowGather(), (order, example, *cross),
                                   dynamic_shapes=dims)


def compile_seq2seq(model, *, target, backend, cache, report, dump_ir_dir):
    """``compile_generator`` for an encoder-decoder (``backend`` as it set it;
    ``report``: its progress function)."""
    import anyshape
    from anyshape.frontend.derived_programs import selected_output
    from anyshape.frontend.export import prepare_program
    from anyshape.frontend.repeated_layers import decomposed_step
    from anyshape.generation.model_spec import (DECODE_ENTRIES, SOURCE_ROWS_ENTRY, VERIFY_ENTRY,
                                                 decode_step, generation_config_of, model_spec,
                                                 start_building_kernels)
    from anyshape.runtime.generator import Seq2SeqGenerator

    start_building_kernels(target, backend)
    started = time.monotonic()
    report(f"exporting the encoder and the decoder step of {type(model).__name__} with "
             f"torch.export, and decomposing them")
    own_shapes, cross_shapes = probe_caches(model)
    encode_program, states = export_encode(model)
    layers = len(own_shapes)
    # Traced once: the step is the verifier's last position, each decode
    # step the step with its batch and new tokens fixed (as causal_lm.py);
    # its first layers traced, the later ones copied (repeated_layers.py).
    verify_program = decomposed_step(
        model, layers,
        lambda count: prepare_program(export_verify(model, own_shapes[:count],
                                                    cross_shapes[:count], states)),
        report, within=decoder_name(model), leading_inputs=4, cache_groups=2)
    names = step_dims(layers)
    step_program = selected_output(verify_program, dim=1, index=-1)
    report(f"  deriving the decode steps of batch {', '.join(map(str, DECODE_ENTRIES))} "
             f"from the step")
    decode = {}
    for batch, name in DECODE_ENTRIES.items():
        program = decode_step(step_program, batch)
        if program is not None:
            decode[name] = program
    others = {SOURCE_ROWS_ENTRY: export_source_rows(states, cross_shapes),
              VERIFY_ENTRY: verify_program}

    traced = time.monotonic() - started
    module = anyshape.compile(step_program, dynamic_shapes=names, target=target, backend=backend,
                              cache=cache, progress=report, dump_ir_dir=dump_ir_dir,
                              entries={"encode": encode_program, **decode, **others})
    # The exports, the verifier's decomposition and the programs derived from
    # it (encode and the source rows decompose in the compile's "export" stage).
    module.stage_seconds = {"export-steps": traced, **module.stage_seconds}
    spec = {**model_spec(model, own_shapes), "kind": "seq2seq",
            "cross_cache": [[list(k), list(v)] for k, v in cross_shapes],
            "decode_entry": None,
            "decode_entries": {str(batch): name for batch, name in DECODE_ENTRIES.items()
                               if name in decode},
            "source_rows_entry": SOURCE_ROWS_ENTRY, "verify_entry": VERIFY_ENTRY}
    # T5's relative attention has no table of positions to run out of.
    if getattr(model.config, "relative_attention_num_buckets", None):
        spec["max_positions"] = None
    return Seq2SeqGenerator(module, spec, generation_config_of(model))
