"""`make family-sweep`: every causal-LM and encoder family transformers builds from a
small config, compiled once with unbounded dynamic batch and sequence, against eager.

The families come from transformers' auto mappings: the causal LMs are the model
types of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``; the encoders those of
``MODEL_FOR_MASKED_LM_MAPPING_NAMES`` and ``MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES``
that are neither encoder-decoders (``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES``)
nor decoders. A type with a masked-LM head (BERT, RoBERTa, ...) is an encoder
even where transformers also has a causal-LM head for it, and runs once, as
an encoder (its masked-LM model; sequence classification where it has none).

Each family is built by ``anyshape.frontend.hf.build`` (for a composite, multimodal
config without a vocabulary of its own: from its text config, the model
``AutoModelForCausalLM`` loads for text) from transformers' default config
of the type, shrunk (``small_overrides``: hidden 64, 2 layers or one of each
layer type, 4 heads, 2 KV heads where the config has the field (1 where it is 1), intermediate 128,
vocabulary 1000, a sliding window of 12 where the config has one, so the
window is crossed at the lengths below) and otherwise as it is. In a fresh
process per family (``--worker``), with ``--timeout``: the model wrapped to take
``input_ids, attention_mask`` and return its logits, compiled once with
``anyshape.compile`` and plain ``Dim("batch")``, ``Dim("seq")`` (no bounds,
no options: where the model's config states the bound torch.export needs,
anyshape applies it, and the note carries its warning), example inputs of
batch 2, length 16 with an
all-ones mask; then run at (batch, length) = (1, 7), (3, 17) with row 0 half
padded (on the left for causal LMs, as generation pads; on the right for
encoders; padded tokens are the pad token), (2, 65) and (1, 1). The error is
the max |anyshape - eager float32| over the real (mask 1) positions. Where it
exceeds 1e-4 * max(1, max |logit|), eager runs in float64 too: the family is
WRONG when anyshape is much further (``F64_FACTOR``) from float64 than eager
float32 is.

Statuses: ``pass``; ``WRONG`` (compiled and ran, and disagrees); ``compile-error``
(anyshape or IREE failed after export: the first line of the error);
``export-error`` (torch.export itself failed); ``run-error`` (compiled, failed
at one of the shapes); ``build-error`` (transformers cannot build or run it from
a small config with ids and mask only); ``needs-library`` (transformers refuses
to build it without a library that is not installed, and says which);
``not-standalone`` (its forward needs another model's states: ``NOT_STANDALONE``
says why); ``timeout``; ``crash`` (the worker died).
Writes ``family_sweep.{md,json}`` under ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, NamedTuple

HERE = Path(__file__).resolve().parent
SHAPES = [(1, 7), (3, 17), (2, 65), (1, 1)]
PADDED_SHAPE = (3, 17)       # row 0 half padded
EXAMPLE_SHAPE = (2, 16)
VOCAB = 1000
REL_TOLERANCE = 1e-4        # of max(1, max |logit|)
F64_FACTOR = 10             # WRONG: anyshape this much further from float64 than eager f32

class Sizes(NamedTuple):
    """What ``small_overrides`` sets: the sweep's (``SWEEP``) or a test's."""
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate: int = 128
    vocab: int = VOCAB
    window: int = 12          # a sliding window: crossed at lengths 17 and 65
    min_layers: int = 2
    max_layers: int = 4


SWEEP = Sizes()


def size_fields(z: Sizes) -> list[tuple[tuple[str, ...], int]]:
    """(config fields, small value): each field set wherever the default config
    has it as an int above that value (or a list of such), so that the model
    keeps its own structure at a small size."""
    return [
        (("hidden_size", "n_embd", "d_model", "dim", "emb_dim", "embed_dim",
          "hidden_size_global"), z.hidden),
        (HEAD_FIELDS, z.heads),
        (("intermediate_size", "n_inner", "ffn_dim", "hidden_dim", "decoder_ffn_dim",
          "encoder_ffn_dim", "ffn_hidden_size", "d_ff", "d_inner", "feed_forward_size"),
         2 * z.hidden),
        (HEAD_DIM_FIELDS, z.head_dim),
        (("vocab_size", "vocab_size_per_layer_input"), z.vocab),
        (("embedding_size", "word_embed_proj_dim", "pooler_hidden_size", "attention_hidden_size",
          "lru_width", "hidden_size_per_layer_input", "input_embedding_size",
          "output_embedding_size"), z.hidden // 2),
        (("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
          "moe_shared_expert_intermediate_size", "shared_intermediate_size",
          "dense_intermediate_size"), z.hidden),
        (EXPERT_FIELDS, 4),
        (EXPERTS_PER_TOKEN_FIELDS, 2),
        (("n_group", "num_expert_group"), 2),  # expert groups (DeepSeek's router): 2 experts each
        (("topk_group",), 1),
        (("q_lora_rank",), 2 * z.head_dim),
        (("kv_lora_rank",), z.head_dim),
        (("qk_rope_head_dim", "qk_nope_head_dim", "rotary_dim"), z.head_dim // 2),
        (("swa_num_attention_heads", "linear_num_value_heads", "linear_num_heads",
          "index_n_heads"), z.heads),
        (("linear_num_key_heads",), z.kv_heads),
        (("mamba_d_state", "state_size", "ssm_state_size"), 16),
        (("n_groups", "mamba_n_groups"), 2),  # Mamba-2 groups of heads: they divide the 4 heads
        (("time_step_rank", "mamba_dt_rank"), 8),
        (("sliding_window", "sliding_window_size"), z.window),
    ]


HEAD_FIELDS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads",
               "decoder_attention_heads", "encoder_attention_heads")
HEAD_DIM_FIELDS = ("head_dim", "d_head", "d_kv", "kv_channels", "attention_head_size",
                   "qk_head_dim", "v_head_dim", "swa_head_dim", "linear_key_head_dim",
                   "linear_value_head_dim", "linear_head_dim", "index_head_dim")
EXPERT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
EXPERTS_PER_TOKEN_FIELDS = ("num_experts_per_tok", "moe_topk", "moe_k")
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
KV_FIELDS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num",
             "num_query_groups", "swa_num_key_value_heads")
# Mamba-2 mixers: heads x head width must equal expand x hidden.
MAMBA_HEADS = ("mamba_n_heads", "mamba_num_heads")
MAMBA_HEAD_DIMS = ("mamba_d_head", "mamba_head_dim", "mamba_headdim")
MAMBA_EXPAND = ("mamba_expand", "expand")

# Overrides some types need besides the generic shrinking, each with why: a dict,
# or a function of the sizes. Keyed by model type, or "type.field" for a part of
# a composite config whose own type is unnamed.
EXTRA_OVERRIDES: dict[str, dict | Callable[[Sizes], dict]] = {
    # Attention every 8th layer from layer 4, experts every 2nd: with 2 layers, no
    # attention layer at all. One Mamba and one attention(+MoE) layer instead.
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                  expert_layer_offset=1),
    # The first k layers are dense (k = 1 to 3): one dense layer, one MoE layer.
    **{t: dict(first_k_dense_replace=1) for t in (
        "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa", "dots1",
        "longcat_flash", "solar_open")},
    # Its axial position embeddings' widths must sum to the hidden size.
    "reformer": dict(axial_pos_embds_dim=[32, 32]),
    # The default config has no padding token, and the embeddings compare ids with it.
    "esm": dict(pad_token_id=1, mask_token_id=2),
    # Its key norm spans all heads' keys (hidden size wide): no grouped KV heads.
    "esmc": dict(num_key_value_heads=4),
    # The last 15 layers reuse earlier layers' keys and values: 2 of the 4 here.
    "gemma3n_text": dict(num_kv_shared_layers=2),
    # Mamba-2 heads x head width must equal expand x hidden (2 x 64).
    "mamba2": dict(num_heads=4, head_dim=32, n_groups=1),
    # Its embeddings must be as wide as the hidden states.
    "squeezebert": dict(embedding_size=64),
    # The default config has no rope parameters for its layer type, which a
    # checkpoint's config states: the model reads them by layer type.
    "cohere_compass_text": dict(rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # The attention reads attn_config.rope_theta, which DBRX checkpoints' configs
    # carry and the default config's class lacks, and clamps to clip_qkv, which
    # the default leaves unset and the checkpoints set to 8.
    "dbrx.attn_config": dict(rope_theta=500000.0, clip_qkv=8.0),
    # Box embeddings: hidden / 6 per coordinate (LiLT), or 4 coordinates and 2
    # shapes that fill the hidden width (LayoutLMv3): 64 is not a multiple of 6.
    "lilt": dict(hidden_size=96),
    "layoutlmv3": dict(hidden_size=96, coordinate_size=16, shape_size=16),
    # The default config leaves the layer types unset, which the model indexes;
    # one convolution layer (dense) and one attention layer with experts.
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    # Its attention layers select blocks of tokens with an indexer the default
    # config leaves unset: 4 heads of 16 (one key head, as required), a budget of
    # 8 tokens in blocks of 4, so that the selection is exercised from length 9.
    "qwen4_exp_text": dict(indexer_n_heads=4, indexer_kv_heads=1, indexer_head_dim=16,
                           indexer_budget=8, indexer_compress_ratio=4),
    # The shared attention block reads the hidden states next to the embeddings:
    # twice the hidden width, in 4 heads.
    # Zamba ties every later hybrid layer's shared block to the first one's, and
    # refuses a model with one hybrid layer: two here.
    "zamba": lambda z: dict(attention_hidden_size=2 * z.hidden,
                            attention_head_dim=2 * z.hidden // z.heads, num_hidden_layers=3,
                            layers_block_type=["linear_attention", "hybrid", "hybrid"]),
    "zamba2": lambda z: dict(attention_hidden_size=2 * z.hidden,
                             attention_head_dim=2 * z.hidden // z.heads),
    # Its adapters are per language, and the default config names none.
    "xmod": dict(default_language="en_XX"),
    # The decoder reads one row of ids per codebook (batch x codebooks rows,
    # the mask batch rows): with one codebook, ids and mask share the batch.
    "musicgen_decoder": dict(num_codebooks=1),
    "musicgen_melody_decoder": dict(num_codebooks=1),
}

# Families that cannot run from ids and a mask at all, and why: their rows say so.
NOT_STANDALONE: dict[str, str] = {
    t: "a draft model for Gemma 4's assisted decoding: its forward needs the target "
       "model's embeddings and key/value states (inputs_embeds, shared_kv_states)"
    for t in ("gemma4_assistant", "gemma4_unified_assistant")}


def families(kind: str) -> list[tuple[str, str, str]]:
    """(model type, kind, task), sorted by type: kind 'causal' or 'encoder'."""
    from transformers.models.auto import modeling_auto as auto

    causal = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    masked = set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    classify = set(auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)
    seq2seq = set(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
    encoders = {t for t in masked | classify
                if t not in seq2seq and (t in masked or t not in causal)}
    out = []
    if kind in ("causal", "all"):
        out += [(t, "causal", "causal-lm") for t in causal - encoders]
    if kind in ("encoder", "all"):
        out += [(t, "encoder", "masked-lm" if t in masked else "sequence-classification")
                for t in encoders]
    return sorted(out)


# ---------------------------------------------------------------- small configs

def _fields(config) -> dict:
    """The config's fields (to_dict's keys) as attributes: sub-configs as configs.
    A per-layer field, which a heterogeneous config refuses to read globally,
    as to_dict has it: the value of every layer that does not override it."""
    values, stored = {}, config.to_dict()
    for key, value in stored.items():
        try:
            values[key] = getattr(config, key)
        except Exception:
            values[key] = value
    return values


def _shrink(config, z: Sizes, head_dims: bool = True) -> dict:
    """Overrides that make ``config`` (a transformers config) small; the fields
    of a head's width only with ``head_dims``."""
    from transformers import PretrainedConfig

    values = _fields(config)
    aliases = getattr(config, "attribute_map", {}) or {}
    out = _fewer_layers(values, z)
    values.update(out)  # per-layer lists cut first, then their sizes shrunk
    for names, small in size_fields(z):
        if small == z.head_dim and names is HEAD_DIM_FIELDS and not head_dims:
            continue
        for name in {*names, *(aliases[n] for n in names if n in aliases)}:
            value = values.get(name)
            if _is_int(value) and value > small:
                out[name] = small
            elif isinstance(value, list) and value and all(_is_int(v) for v in value) \
                    and max(value) > small and name not in ("vocab_size",):
                out[name] = [min(v, small) for v in value]  # a size per layer
    moe = any(name in values for name in EXPERT_FIELDS)
    for names, small in ((EXPERT_FIELDS, 4), (EXPERTS_PER_TOKEN_FIELDS, 2),
                         (("n_shared_experts",), 1)):
        for name in names:  # some default configs leave the MoE unset (None)
            if moe and name in values and values[name] is None:
                out[name] = small
    heads = next((values[n] for n in HEAD_FIELDS if _is_int(values.get(n))), None)
    mla = values.get("kv_lora_rank") is not None
    for name in KV_FIELDS:
        kv = values.get(name)
        if (_is_int(kv) or (kv is None and name in values)) and heads:
            # grouped (GQA), multi-query kept; multi-head latent attention: one per head
            out[name] = z.heads if mla else 1 if kv == 1 else z.kv_heads
    if "vocab_size" in values and values["vocab_size"] is None:
        out["vocab_size"] = z.vocab  # ESM's default config leaves it unset
    if head_dims and "head_dim" in values and values["head_dim"] is None \
            and z.hidden == z.heads * z.head_dim:
        out["head_dim"] = z.head_dim  # None: hidden / heads, which HunYuan does not derive
    out.update(_rotary_width(values, out))
    for name, value in values.items():  # sub-configs (a text or vision tower)
        if isinstance(value, PretrainedConfig):
            sub = copy.deepcopy(value)
            extra = {**_extra(getattr(value, "model_type", "") or "?", z),
                     **_extra(f"{values.get('model_type')}.{name}", z)}
            for key, small in {**_shrink(value, z), **extra}.items():
                setattr(sub, key, small)
            out[name] = sub
    vocab = out.get("vocab_size", values.get("vocab_size"))
    if vocab is None and any(getattr(v, "vocab_size", None) == z.vocab for v in out.values()):
        vocab = z.vocab  # a composite config: its text tower's vocabulary
    out.update(_token_ids(values, vocab))
    return out


def _extra(key: str, z: Sizes) -> dict:
    extra = EXTRA_OVERRIDES.get(key, {})
    return extra(z) if callable(extra) else extra


def _rotary_width(values: dict, out: dict) -> dict:
    """Multi-head latent attention's rotary part of a head: where the default config's
    rotary embedding spans ``head_dim`` (LongCat-Flash: head_dim = qk_rope_head_dim),
    or ``head_dim`` x partial_rotary_factor (dots3), it spans qk_rope_head_dim
    after the shrinking too."""
    rope, head = values.get("qk_rope_head_dim"), values.get("head_dim")
    if not (_is_int(rope) and _is_int(head)):
        return {}
    small = out.get("qk_rope_head_dim", rope)  # already small: a rebuilt config's
    if head == rope:
        return {"head_dim": small}
    factors = {p.get("partial_rotary_factor") for p in _rope_parameter_sets(values)} - {None}
    if len(factors) == 1 and head * factors.pop() == rope:
        return {"head_dim": head * small // rope}
    return {}


def _rope_parameter_sets(values: dict) -> list[dict]:
    """The rope parameters: one set, or one per layer type."""
    rope = values.get("rope_parameters")
    if not isinstance(rope, dict):
        return []
    if all(isinstance(v, dict) for v in rope.values()) and rope:
        return list(rope.values())
    return [rope]


def _mamba_heads(config, out: dict) -> dict:
    """Mamba-2 heads x head width = expand x hidden, after the shrinking."""
    values = {**_fields(config), **out}
    # Mamba-2's own config names them as attention configs do
    own = ("num_heads", "head_dim") if getattr(config, "model_type", None) == "mamba2" else ()
    heads = next((n for n in MAMBA_HEADS + own[:1] if _is_int(values.get(n))), None)
    width = next((n for n in MAMBA_HEAD_DIMS + own[1:] if n in values), None)
    expand = next((values[n] for n in MAMBA_EXPAND if _is_int(values.get(n))), None)
    hidden = next((values[n] for n in ("hidden_size", "d_model") if _is_int(values.get(n))), None)
    if not (heads and width and expand and hidden):
        return {}
    n = min(values[heads], 4)
    out = {heads: n, width: expand * hidden // n}
    if _is_int(values.get("mamba_d_ssm")):  # Falcon-H1: the mixer's width, expand x hidden
        out["mamba_d_ssm"] = expand * hidden
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fewer_layers(values: dict, z: Sizes) -> dict:
    """The layer count, and every per-layer list cut to the same layers: the first
    layer of each kind (a kind: the layer's entries in all per-layer lists), at
    least ``min_layers``, at most ``max_layers``."""
    out = {}
    for name in LAYER_FIELDS:
        layers = values.get(name)
        if not _is_int(layers) or layers <= z.min_layers:
            continue
        lists = {k: v for k, v in values.items()
                 if isinstance(v, (list, tuple)) and len(v) == layers and k not in ("eos_token_id",)}
        kept, seen = [], set()
        for i in range(layers):
            kind = tuple(repr(v[i]) for v in lists.values())
            if kind not in seen:
                seen.add(kind)
                kept.append(i)
        kept = kept[:z.max_layers]
        for i in range(layers):
            if len(kept) >= z.min_layers:
                break
            if i not in kept:
                kept.append(i)
        kept.sort()
        out[name] = len(kept)
        for key, value in lists.items():
            out[key] = type(value)(value[i] for i in kept)
    return out


def _token_ids(values: dict, vocab) -> dict:
    """Special token ids the smaller vocabulary no longer holds, moved inside it
    (pad 0, bos 1, eos 2, others from the top down)."""
    if not _is_int(vocab):
        return {}
    out, top = {}, vocab - 1
    fixed = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    for name in sorted(values):
        if not (name.endswith("_token_id") or name.endswith("_token_index")):
            continue
        value = values[name]
        if _is_int(value) and value >= vocab:
            if name in fixed:
                out[name] = fixed[name]
            else:
                out[name] = top
                top -= 1
        elif isinstance(value, list) and any(_is_int(v) and v >= vocab for v in value):
            out[name] = [2 + i for i in range(len(value))]
    return out


def _settable(value) -> bool:
    """A value a config takes back (not a derived view such as per_layer_config)."""
    from transformers import PretrainedConfig

    return isinstance(value, (int, float, str, bool, list, tuple, dict, type(None),
                              PretrainedConfig))


def small_overrides(model_type: str, z: Sizes = SWEEP) -> dict:
    """The overrides for ``hf.build``: the small sizes, and every field the config
    derives from them (a head_dim, per-layer lists) as the config's own
    constructor derives it from the small sizes."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    extra = {k: v for k, v in _extra(model_type, z).items() if k in _fields(config)}
    # Heads' widths last: many configs derive them from the other sizes, and
    # one passed in would win over the derived one.
    out = dict(_shrink(config, z, head_dims=False), **extra)
    try:
        rebuilt = transformers.AutoConfig.for_model(model_type, **out)
        out.update(_shrink(rebuilt, z), **extra)
        out.update(_mamba_heads(rebuilt, out))
        rebuilt = transformers.AutoConfig.for_model(model_type, **out)
    except Exception:
        out = dict(_shrink(config, z), **extra)  # the constructor refuses: hf.build says why
        return dict(out, **_mamba_heads(config, out))
    before = _fields(config)
    for key, value in _fields(rebuilt).items():  # where the constructor derives a
        # field (deepseek's head_dim from qk_rope_head_dim), its value wins
        if (key in out or _differ(before.get(key), value)) and key in before \
                and not key.startswith("_") and key != "transformers_version" \
                and _settable(value):
            out[key] = value
    return out


def _differ(a, b) -> bool:
    try:
        return bool(a != b)
    except Exception:
        return True


# ---------------------------------------------------------------- the worker

def _logits_wrapper(model):
    import torch

    forward = inspect.signature(model.forward).parameters
    takes_cache = "use_cache" in forward or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in forward.values())

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            extra = {"use_cache": False} if takes_cache else {}
            return self.m(input_ids=input_ids, attention_mask=attention_mask, **extra).logits

    return Logits(model).eval()


def _special_ids(config) -> set[int]:
    ids = set()
    for name in dir(config):
        if name.endswith("_token_id") or name.endswith("_token_index"):
            try:
                value = getattr(config, name)
            except Exception:
                continue
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if _is_int(v):
                    ids.add(v)
    return ids


def make_inputs(batch: int, length: int, vocab: int, kind: str, pad_id, special: set[int],
                seed: int):
    """Random ids in [3, vocab) that are no special token, and a mask; the padded
    shape's row 0 is half padding (left for causal LMs), holding the pad token."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=generator)
    for token in special:  # a special id drawn: moved to the next id that is none
        if 3 <= token < vocab:
            other = next(t for t in range(3, vocab) if t not in special)
            ids[ids == token] = other
    mask = torch.ones(batch, length, dtype=torch.long)
    if (batch, length) == PADDED_SHAPE:
        pad = length // 2
        if kind == "causal":
            mask[0, :pad] = 0
        else:
            mask[0, length - pad:] = 0
        if _is_int(pad_id) and 0 <= pad_id < vocab:
            ids[mask == 0] = pad_id
    return ids, mask


def _first_line(error: BaseException) -> str:
    text = str(error)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{type(error).__name__}: {line}"[:400]


def masked_error(got, expected, mask) -> tuple[float, str]:
    """max |got - expected| over positions whose mask is 1 (all rows for outputs
    without a sequence axis); inf where only one side is finite there."""
    import torch

    if got.shape != expected.shape:
        return float("inf"), f"shape {tuple(got.shape)} != eager's {tuple(expected.shape)}"
    if got.dim() >= 2 and got.shape[:2] == mask.shape:
        keep = mask.bool()
        got, expected = got[keep], expected[keep]
    got, expected = got.double(), expected.double()
    finite_got, finite_exp = torch.isfinite(got), torch.isfinite(expected)
    if not torch.equal(finite_got, finite_exp):
        return float("inf"), (f"non-finite values: anyshape {int((~finite_got).sum())}, "
                              f"eager {int((~finite_exp).sum())} at real positions")
    both = finite_got & finite_exp
    if not both.any():
        return 0.0, "no finite values"
    note = "" if both.all() else "eager itself non-finite at some real positions"
    return float((got[both] - expected[both]).abs().max()), note


def _compile(wrapper, ids, mask):
    """anyshape.compile with unbounded dims and its defaults: where torch.export
    needs a bound the model's config states, anyshape applies it and warns
    (``DimBoundedByConfig``), and the note says so."""
    import warnings

    import anyshape
    from torch.export import Dim

    dims = {0: Dim("batch"), 1: Dim("seq")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", anyshape.DimBoundedByConfig)
        compiled = anyshape.compile(wrapper, (ids, mask),
                                    dynamic_shapes={"input_ids": dims, "attention_mask": dims})
    bounded = [str(w.message) for w in caught if issubclass(w.category, anyshape.DimBoundedByConfig)]
    return compiled, " / ".join(bounded)[:700]


def _export_causes(error) -> str:
    """The lines of an export CompileError that say which dim and why (each
    explained condition starts 'torch.export could not ...' or 'torch.export fixed')."""
    lines = [ln.strip() for ln in error.diagnostic.splitlines()
             if ln.startswith("torch.export could not") or ln.startswith("torch.export fixed")]
    return " / ".join(lines or error.diagnostic.splitlines()[:1])[:700]


class Family:
    """One family built small: ``wrapper`` (ids, mask -> logits) around ``built``'s
    model, and inputs for it."""

    def __init__(self, model_type: str, kind: str, task: str, sizes: Sizes = SWEEP,
                 seed: int = 0, extra: dict | None = None):
        import torch

        from anyshape.frontend import hf

        self.model_type, self.kind, self.task = model_type, kind, task
        torch.manual_seed(seed)
        overrides = dict(small_overrides(model_type, sizes), **(extra or {}))
        self.built = hf.build(model_type, task, overrides, seed=seed)
        self.wrapper = _logits_wrapper(self.built.model)
        config = self.built.model.config
        self.routers_drawn = _draw_zero_routers(self.built.model, seed)
        self.special = _special_ids(config)
        self.pad_id = getattr(config, "pad_token_id", None)
        self.vocab = min(self.built.vocab_size, sizes.vocab)
        # the longest sequence its positions allow (hf.build's; XLNet's -1: none)
        self.max_seq = self.built.max_seq if (self.built.max_seq or 0) > 0 else None

    def inputs(self, batch: int, length: int, seed: int):
        return make_inputs(batch, length, self.vocab, self.kind, self.pad_id, self.special, seed)

    def example(self):
        """What a user passes first: batch 2, length 16, an all-ones mask."""
        import torch

        ids, _ = self.inputs(*EXAMPLE_SHAPE, seed=0)
        return ids, torch.ones_like(ids)

    def compile(self):
        """(compiled module, note): see ``_compile``."""
        return _compile(self.wrapper, *self.example())


def _draw_zero_routers(model, seed: int) -> list[str]:
    """Routers a family initializes to zero (AfMoE's) tie every expert, and
    topk's order among ties is unspecified (eager's CPU topk picks the last
    experts, IREE's the first): the comparison would measure tie-breaking, not
    the model. Such a router's weights (a linear layer's, all zero, one output
    per expert) are drawn from N(0, 0.02), as a trained router's would differ.
    Returns their names."""
    import torch

    config = model.config
    experts = next((getattr(config, f) for f in EXPERT_FIELDS
                    if isinstance(getattr(config, f, None), int)), None)
    drawn = []
    generator = torch.Generator().manual_seed(seed)
    for name, module in model.named_modules():
        if experts and isinstance(module, torch.nn.Linear) and \
                module.out_features == experts and not module.weight.detach().any():
            with torch.no_grad():
                module.weight.normal_(0.0, 0.02, generator=generator)
            drawn.append(f"{name}.weight")
    return drawn


def work(model_type: str, kind: str, task: str) -> dict:
    import torch

    import anyshape

    row = {"family": model_type, "kind": kind, "task": task, "status": None, "note": "",
           "error_f32": None, "error_f64": None, "eager_f32_vs_f64": None, "shapes": {}}
    if model_type in NOT_STANDALONE:
        row["status"], row["note"] = "not-standalone", NOT_STANDALONE[model_type]
        return row
    try:
        family = Family(model_type, kind, task)
        built, wrapper = family.built, family.wrapper
        row["parameters"] = built.parameters()
        row["class"] = type(built.model).__name__
        row["max_seq"] = family.max_seq
        text_type = built.model.config.model_type
        if text_type != model_type:
            row["built_from"] = text_type
        with torch.no_grad():
            example_out = wrapper(*family.example())
        if not isinstance(example_out, torch.Tensor):
            raise TypeError(f"logits: expected a tensor, got {type(example_out).__name__}")
    except Exception as error:
        frames = traceback.extract_tb(error.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames)
                      if "transformers" in f.filename or "anyshape" in f.filename), "")
        # a model class that needs a library pip cannot install (detectron2)
        needs = isinstance(error, ImportError) and "requires the" in str(error)
        row["status"], row["note"] = "needs-library" if needs else "build-error", \
            _first_line(error) + (f" (at {where})" if where else "")
        row["traceback"] = traceback.format_exc()[-3000:]
        return row

    started = time.monotonic()
    try:
        compiled, note = family.compile()
    except anyshape.CompileError as error:
        row["status"] = "export-error" if error.stage == "export" else "compile-error"
        row["note"] = f"stage '{error.stage}': " + (
            _export_causes(error) if error.stage == "export"
            else error.diagnostic.splitlines()[0][:400])
        row["message"] = str(error)[:4000]
        if "aten.histc" in error.diagnostic:
            row["batched_mm"] = _batched_mm(model_type, kind, task)
            row["note"] += "; " + row["batched_mm"]["summary"]
        return row
    except Exception as error:  # not a CompileError: the message may well not name the cause
        row["status"], row["note"] = "compile-error", "(not a CompileError) " + _first_line(error)
        row["traceback"] = traceback.format_exc()[-3000:]
        return row
    row["compile_s"] = round(time.monotonic() - started, 1)
    result = compare(family, compiled)
    built_from = ([f"its text model ({row['built_from']}), as AutoModelForCausalLM loads it "
                   f"from the text config"] if row.get("built_from") else [])
    if family.routers_drawn:
        built_from.append(f"{len(family.routers_drawn)} router(s) initialized to zero, drawn "
                          f"from N(0, 0.02) (every expert tied)")
    row.update(result, note="; ".join(built_from + ([note] if note else []) + result["note"]))
    return row


def _batched_mm(model_type: str, kind: str, task: str) -> dict:
    """transformers' default MoE experts (grouped_mm) count tokens per expert with
    aten.histc, which does not compile; the way around it a user has is
    ``experts_implementation="batched_mm"``: the same model with that, checked
    the same way."""
    import anyshape

    name = "experts_implementation='batched_mm'"
    try:
        family = Family(model_type, kind, task, extra={"_experts_implementation": "batched_mm"})
        compiled, _ = family.compile()
    except anyshape.CompileError as error:
        return {"status": "compile-error", "summary": f"with {name}: compile-error at stage "
                f"'{error.stage}': {error.diagnostic.splitlines()[0][:200]}"}
    except Exception as error:
        return {"status": "error", "summary": f"with {name}: {_first_line(error)[:200]}"}
    result = compare(family, compiled)
    result["summary"] = (f"with {name}: {result['status']}, max error vs eager f32 "
                         f"{result['error_f32']:.1e}" + (
                             f", vs f64 {result['error_f64']:.1e}" if result.get("error_f64")
                             else ""))
    return result


def _float64_copy(wrapper):
    """The model in float64, as the reference. transformers' default MoE experts
    (``grouped_mm``) take float32 and 16-bit floats only: there, the experts
    run as its ``eager`` implementation, one product per expert, which computes
    the same function."""
    f64 = copy.deepcopy(wrapper).double()
    model = f64.m
    if getattr(model.config, "_experts_implementation", None) == "grouped_mm":
        model.set_experts_implementation("eager")
    return f64


def compare(family: Family, run) -> dict:
    """``run`` (ids, mask -> logits) against the family's eager model at ``SHAPES``:
    status ('pass', 'WRONG', 'run-error', 'build-error'), notes, errors per shape."""
    import torch

    wrapper, max_seq = family.wrapper, family.max_seq
    shapes, notes, wrong = {}, [], []
    f64 = None
    worst, worst64, worst_eager64 = 0.0, None, None
    for batch, length in SHAPES:
        key = f"{batch}x{length}"
        if max_seq and length > max_seq:
            shapes[key] = {"skipped": f"beyond {max_seq} positions"}
            continue
        ids, mask = family.inputs(batch, length, seed=length)
        try:
            with torch.no_grad():
                expected = wrapper(ids, mask)
        except Exception as error:
            shapes[key] = {"eager-error": _first_line(error)}
            notes.append(f"eager fails at {key}: {_first_line(error)[:150]}")
            continue
        try:
            got = run(ids, mask)
        except Exception as error:
            shapes[key] = {"run-error": _first_line(error)}
            return {"status": "run-error", "shapes": shapes,
                    "note": [f"at {key}: {_first_line(error)}"] + notes}
        finite = expected[torch.isfinite(expected)]
        scale = float(finite.abs().max()) if finite.numel() else 0.0
        error, why = masked_error(got, expected, mask)
        entry = {"error_f32": error, "max_logit": scale}
        if why:
            entry["note"] = why
        tolerance = REL_TOLERANCE * max(1.0, scale)
        worst = max(worst, error)
        if error > tolerance:
            if f64 is None:
                f64 = _float64_copy(wrapper)
            with torch.no_grad():
                exact = f64(ids, mask)
            e64, _ = masked_error(got, exact, mask)
            eager64, _ = masked_error(expected, exact, mask)
            entry.update(error_f64=e64, eager_f32_vs_f64=eager64)
            worst64 = max(worst64 or 0.0, e64)
            worst_eager64 = max(worst_eager64 or 0.0, eager64)
            if e64 > max(F64_FACTOR * eager64, tolerance):
                wrong.append(f"{key}: {error:.2e} from eager f32, {e64:.2e} from f64 "
                             f"(eager f32: {eager64:.2e})" + (f"; {why}" if why else ""))
            else:
                notes.append(f"{key}: {error:.1e} from eager f32 but as close to f64 as "
                             f"eager f32 ({e64:.1e} vs {eager64:.1e})")
        shapes[key] = entry
    if wrong:
        status, notes = "WRONG", wrong + notes
    elif not any("error_f32" in e for e in shapes.values()):
        status = "build-error"
        notes.insert(0, "eager ran at none of the shapes")
    else:
        status = "pass"
    return {"status": status, "shapes": shapes, "note": notes, "error_f32": worst,
            "error_f64": worst64, "eager_f32_vs_f64": worst_eager64}


# ---------------------------------------------------------------- the driver

def run_family(model_type: str, kind: str, task: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="family-sweep-") as tmp:
        out = Path(tmp) / "row.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", model_type, kind,
                   task, str(out)]
        started = time.monotonic()
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"family": model_type, "kind": kind, "task": task, "status": "timeout",
                    "note": f"no result in {timeout:.0f} s", "wall_s": round(timeout, 1)}
        wall = round(time.monotonic() - started, 1)
        if not out.exists():
            tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
            return {"family": model_type, "kind": kind, "task": task, "status": "crash",
                    "note": f"worker exited {result.returncode}: " + " | ".join(tail)[-400:],
                    "wall_s": wall}
        row = json.loads(out.read_text())
        row["wall_s"] = wall
        return row


def _fmt(value) -> str:
    return "" if value is None else f"{value:.1e}"


def table(rows: list[dict]) -> str:
    head = ["family", "kind", "status", "max error vs eager f32", "error vs f64",
            "eager f32 vs f64", "compile s", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        note = (r.get("note") or "").replace("|", "\\|").replace("\n", " ")
        lines.append("| " + " | ".join([
            r["family"], r["kind"], r["status"], _fmt(r.get("error_f32")),
            _fmt(r.get("error_f64")), _fmt(r.get("eager_f32_vs_f64")),
            "" if r.get("compile_s") is None else f"{r['compile_s']:.0f}", note]) + " |")
    return "\n".join(lines)


def host_cpu() -> str:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    features = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx512f", "avx512_bf16"))
    return f"{model} ({features}), {os.cpu_count()} cores"


def write(rows: list[dict], out: Path, command: str) -> None:
    from collections import Counter

    import torch
    import transformers

    counts = Counter(r["status"] for r in rows)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    text = (f"# anyshape family sweep\n\n"
            f"command: `{command}` (`make family-sweep`)\n\n"
            f"host: {host_cpu()}; torch {torch.__version__}, transformers "
            f"{transformers.__version__}; {time.strftime('%Y-%m-%d %H:%M')}; "
            f"{sum(r.get('wall_s') or 0 for r in rows) / 60:.0f} min (the families' wall "
            f"times, one at a time)\n\n"
            f"Each family from transformers' default config, shrunk (bench/family_sweep.py), "
            f"random weights, in a fresh process; compiled once with unbounded `Dim('batch')`, "
            f"`Dim('seq')` from batch 2, length 16; run at (batch, length) = "
            f"{', '.join(f'({b}, {l})' for b, l in SHAPES)}, row 0 of {PADDED_SHAPE} half "
            f"padded (left for causal LMs, right for encoders). Errors: max over real "
            f"positions; float64 where the float32 error exceeds {REL_TOLERANCE:g} x "
            f"max(1, max |logit|).\n\n{len(rows)} families: {summary}\n\n"
            + table(rows) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    (out / "family_sweep.md").write_text(text)
    (out / "family_sweep.json").write_text(json.dumps(
        {"command": command, "host": host_cpu(), "rows": rows}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        model_type, kind, task, out = argv[1:5]
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        row = work(model_type, kind, task)
        Path(out).write_text(json.dumps(row))
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=None, help="model types (default: all)")
    parser.add_argument("--kind", choices=["causal", "encoder", "all"], default="all")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per family")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of family_sweep.json under --out for families not "
                             "run now")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows of family_sweep.json under --out and run only the "
                             "families it has no row for, or a crash (a sweep that was cut off)")
    args = parser.parse_args(argv)
    todo = families(args.kind)
    if args.families:
        known = {t for t, _, _ in todo}
        unknown = [f for f in args.families if f not in known]
        if unknown:
            parser.error(f"--families: not a {args.kind} family here: {', '.join(unknown)}")
        todo = [f for f in todo if f[0] in args.families]
    command = " ".join(["python bench/family_sweep.py", *argv])
    kept = []
    if (args.merge or args.resume) and (args.out / "family_sweep.json").exists():
        kept = json.loads((args.out / "family_sweep.json").read_text())["rows"]
        if args.resume:  # a worker that crashed runs again
            kept = [r for r in kept if r["status"] != "crash"]
            done = {(r["family"], r["kind"]) for r in kept}
            todo = [f for f in todo if (f[0], f[1]) not in done]
        else:
            now = {(t, k) for t, k, _ in todo}
            kept = [r for r in kept if (r["family"], r["kind"]) not in now]
    rows = []
    for i, (model_type, kind, task) in enumerate(todo):
        print(f"[{time.strftime('%H:%M:%S')}] {i + 1}/{len(todo)} {model_type} ({kind}, {task})",
              flush=True)
        row = run_family(model_type, kind, task, args.timeout)
        rows.append(row)
        print(f"    {row['status']} {_fmt(row.get('error_f32'))} {row.get('wall_s', '')} s "
              f"{row.get('note', '')[:300]}", flush=True)
        merged = sorted(kept + rows, key=lambda r: (r["family"], r["kind"]))
        write(merged, args.out, command)
    return 1 if any(r["status"] != "pass" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
