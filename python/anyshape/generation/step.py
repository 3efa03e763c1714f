"""The one function a compiled causal LM runs: its forward on new tokens after a cache.

``CausalLMStep`` wraps an unmodified HF ``*ForCausalLM``. Prefill and decode are
the same call, so one compiled module, with one copy of the weights, serves
both, at any prompt length, cache length and batch:

    step(input_ids [B, T], position_ids [B, T], attention_mask [B, P + T],
         *cache: each layer's keys and values [B, H_kv, C, D])
      -> next-token logits [B, V]

The cache is a buffer of capacity C >= P + T whose first P slots are filled:
the step writes the new tokens' keys and values into slots P to P + T in
place (``cache.narrow(2, P, T).copy_(new)``, which torch.export records as an
update of the input) and attends over the first P + T. Compiled with
``BackendOptions(in_place_writes=True)`` the module writes those T slots into
the caller's device buffers and returns the logits only: a step writes T
slots, where a step returning a new cache copied all P + T (and, at batch 4,
page-faulted a fresh 100 MB result buffer every step; docs/generation.md).
P is the mask's length less T, so no size is passed as a value. The slots
past P + T are never read, and the first P never written, so a step that
fails or is run again writes the same slots with the same values.

Only the last position's logits are returned (``anyshape-hoist-slices`` then
computes the LM head for that row only). The cache is never empty: a prefill
passes one slot of zeros whose mask column is 0, so every dim of the call is
at least 1 and no size is specialized by ``torch.export``. That slot stays at
the cache's front, masked, for the whole generation.

The attention mask the model sees is built here, inside the graph, from the
2-D mask and the slot indices (as HF's ``create_causal_mask`` does): a 4-D
boolean mask is used by HF as given, so none of ``masking_utils``' guards on
the cache length are traced. Models whose layers differ (sliding and full
attention, ``config.layer_types``) get one mask per layer type; a sliding
window hides the keys more than ``sliding_window`` slots back, as HF's.
Models that build ALiBi from the 2-D mask (BLOOM) get the 2-D mask.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch

from anyshape.stages import Workaround



def takes_two_d_mask(config) -> bool:
    """Models that build ALiBi biases from the 2-D mask (BLOOM, Falcon with
    ``alibi``) take it, and make the causal mask themselves."""
    return config.model_type == "bloom" or (config.model_type == "falcon"
                                            and bool(getattr(config, "alibi", False)))


def takes_additive_mask(config) -> bool:
    """Whether the model's attention adds a float mask to its scores (HF's
    "eager" implementation, Gemma2's default: its scores are soft-capped)
    rather than taking a boolean one (SDPA). A boolean mask added to the
    scores would be silently wrong."""
    implementation = getattr(config, "_attn_implementation", None) or "sdpa"
    if implementation not in ("sdpa", "eager"):
        raise NotImplementedError(
            f"model: attention implementation {implementation!r}: compile_generator builds "
            f"the attention masks of 'sdpa' and 'eager' only; load the model with "
            f"attn_implementation='sdpa' or 'eager'")
    return implementation == "eager"


def attention_mask_for(model: torch.nn.Module, allowed: torch.Tensor, additive: bool):
    """A 4-D mask of where keys are seen (``allowed``, boolean) as the model's
    attention takes it: as it is for SDPA; for eager attention, which adds its
    mask to the scores, 0 where a key is seen and the dtype's lowest value
    where it is hidden, as HF's masking_utils makes it."""
    if not additive:
        return allowed
    dtype = next(model.parameters()).dtype
    return torch.where(allowed, torch.tensor(0.0, dtype=dtype),
                       torch.tensor(torch.finfo(dtype).min, dtype=dtype))


def probe_cache(model: torch.nn.Module) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each layer's key and value shapes without batch and length ([H_kv, D]
    each, as [heads, head dim]), read off an eager forward of two tokens: the
    model says what it caches (grouped or multi-query heads, per-layer dims)."""
    import inspect

    from transformers import DynamicCache

    parameters = inspect.signature(model.forward).parameters
    if "past_key_values" not in parameters:
        raise TypeError(f"model: {type(model).__name__} takes no past_key_values; "
                        f"compile_generator needs a causal LM with a key/value cache")
    ids = torch.zeros(1, 2, dtype=torch.long)
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
              use_cache=True)
    if not cache.layers or any(getattr(layer, "keys", None) is None for layer in cache.layers):
        raise TypeError(f"model: {type(model).__name__} fills no key/value cache (use_cache=True "
                        f"left its past_key_values empty)")
    shapes = []
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        if keys is None or keys.ndim != 4 or values.ndim != 4:
            raise NotImplementedError("a cache layer that is not [batch, heads, length, dim] "
                                      "keys and values")
        shapes.append(((keys.shape[1], keys.shape[3]), (values.shape[1], values.shape[3])))
    return shapes


@functools.cache
def _filled_in_place_layer():
    """The cache layer class, made on first use: transformers is imported only by
    the compile side (the runtime needs its generation utilities only)."""
    from transformers.cache_utils import DynamicLayer

    class FilledInPlace(DynamicLayer):
        """A layer over the caller's buffers [B, H, C, D] of which the first
        ``filled`` slots hold keys and values: ``update`` writes the new ones
        after them, in place, and returns the filled slots."""

        def __init__(self, keys, values, filled):
            super().__init__()
            self.keys, self.values = keys, values
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self.filled = filled

        def update(self, key_states, value_states, *args, **kwargs):
            new = key_states.shape[-2]
            self.keys.narrow(2, self.filled, new).copy_(key_states)
            self.values.narrow(2, self.filled, new).copy_(value_states)
            self.filled = self.filled + new
            return self.keys.narrow(2, 0, self.filled), self.values.narrow(2, 0, self.filled)

        def get_seq_length(self) -> int:
            return self.filled

    return FilledInPlace


class CausalLMStep(torch.nn.Module):
    """One call of ``model`` on new tokens after a cache it writes in place:
    the last new token's logits [batch, vocab], or with ``every_position``
    every new token's [batch, new, vocab] (the verification of draft tokens
    in assisted decoding)."""

    def __init__(self, model: torch.nn.Module, layers: int, every_position: bool = False):
        super().__init__()
        self.model = model
        self.every_position = every_position
        config = model.config
        self.layers = layers
        self.layer_types = tuple(getattr(config, "layer_types", None) or ())
        self.sliding_window = getattr(config, "sliding_window", None)
        self.two_d_mask = takes_two_d_mask(config)
        self.additive_mask = takes_additive_mask(config)

    def forward(self, input_ids, position_ids, attention_mask, *cache):
        from transformers import DynamicCache

        filled = attention_mask.shape[1] - input_ids.shape[1]
        # One plain layer per layer, sliding ones included: a sliding layer would
        # drop keys, and the mask below hides them instead, so slots stay aligned.
        past = DynamicCache()
        layer_type = _filled_in_place_layer()
        past.layers = [layer_type(cache[2 * layer], cache[2 * layer + 1], filled)
                       for layer in range(self.layers)]
        mask = attention_mask if self.two_d_mask else self._masks(input_ids, attention_mask)
        kwargs = {"position_ids": position_ids} if not self.two_d_mask else {}
        out = self.model(input_ids=input_ids, attention_mask=mask, past_key_values=past,
                         use_cache=True, **kwargs)
        return out.logits if self.every_position else out.logits[:, -1, :]

    def _masks(self, input_ids, attention_mask):
        new, total = input_ids.shape[1], attention_mask.shape[1]
        query = torch.arange(new, device=input_ids.device) + (total - new)
        key = torch.arange(total, device=input_ids.device)
        causal = key[None, :] <= query[:, None]
        real = attention_mask[:, None, None, :] != 0

        def masked(window):
            allowed = causal if window is None else causal & (key[None, :] > query[:, None] - window)
            return attention_mask_for(self.model, allowed[None, None] & real, self.additive_mask)

        if self.layer_types:
            windows = {"full_attention": None, "sliding_attention": self.sliding_window}
            unknown = sorted(set(self.layer_types) - set(windows))
            if unknown:
                raise NotImplementedError(f"layer types {unknown} (only full and sliding "
                                          f"attention are masked here)")
            return {kind: masked(windows[kind]) for kind in sorted(set(self.layer_types))}
        return masked(self.sliding_window)


class SourceRowGather(torch.nn.Module):
    """An encoder-decoder's encoded source for the rows a call decodes:

        select(order [B'], states [B, S, H], *cross: [B, H_kv, S, D])
          -> states[order], *cross[order]

    HF's ``generate`` encodes each source once, then repeats its rows for
    beams and returned sequences; the encoded rows stay on the device."""

    def forward(self, order, states, *cross):
        return (states.index_select(0, order), *(c.index_select(0, order) for c in cross))


@contextlib.contextmanager
def grouped_query_attention_in_sdpa():
    """HF's SDPA attention expands grouped keys and values with ``repeat_kv``
    (expand, then reshape), whose view check puts a guard on the cache length
    that ``torch.export`` cannot keep dynamic. Asking HF for SDPA's own
    ``enable_gqa`` instead gives the same attention without it."""
    old = os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA")
    os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TRANSFORMERS_SDPA_FORCE_GQA"]
        else:
            os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = old


WORKAROUNDS = (
    Workaround(
        name='sdpa_enable_gqa_for_export', stage='export',
        where='grouped_query_attention_in_sdpa',
        upstream="transformers' repeat_kv (expand + reshape of the keys and values) makes "
                 "torch.export guard Min(a*(P+1), b*(P+1)) == a*(P+1) on the cache length P "
                 "('Constraints violated (past)'); export runs with "
                 "TRANSFORMERS_SDPA_FORCE_GQA=1 (SDPA's enable_gqa).",
        guard='test/python/generation/test_generate.py::test_grouped_query_attention_exports',
        remove_when="(inferred) when torch.export keeps the view of an expanded tensor with a "
                    "dynamic dim without that guard"),
)
