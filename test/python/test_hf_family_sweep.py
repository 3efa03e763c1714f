"""The HuggingFace families that pass `make family-sweep` (bench/family_sweep.py,
bench/results/family_sweep.md), each built from transformers' default config at a
smaller size than there, compiled once as a user would (unbounded ``Dim("batch")``,
``Dim("seq")`` from batch 2, length 16, an all-ones mask), and checked against
eager float32 at an odd length and at batch 3 with a half-padded row (padded on
the left for causal LMs, on the right for encoders).

``ANYSHAPE_HF_FAMILIES=all`` runs every family that passes the sweep; by default
``CORE``, one family for each structurally different mechanism.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

_SWEEP = Path(__file__).resolve().parents[2] / "bench" / "family_sweep.py"
_spec = importlib.util.spec_from_file_location("family_sweep", _SWEEP)
sweep = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("family_sweep", sweep)
_spec.loader.exec_module(sweep)

# Smaller than the sweep's (hidden 64): 4 heads of 8, 2 KV heads, one layer of
# each kind the model has (at least 2).
SIZES = sweep.Sizes(hidden=32, heads=4, kv_heads=2, head_dim=8, vocab=256)
SHAPES = [(1, 7), (3, 17)]  # (3, 17): row 0 half padding

# model type -> (kind, what it exercises): the families whose status is 'pass' in
# bench/results/family_sweep.md.
PASSING: dict[str, tuple[str, str]] = {
    "albert": ("encoder", "passes the sweep"),
    "apertus": ("causal", "passes the sweep"),
    "arcee": ("causal", "passes the sweep"),
    "bart": ("causal", "passes the sweep"),
    "bert": ("encoder", "passes the sweep"),
    "bert-generation": ("causal", "passes the sweep"),
    "big_bird": ("encoder", "passes the sweep"),
    "bigbird_pegasus": ("causal", "passes the sweep"),
    "biogpt": ("causal", "passes the sweep"),
    "bitnet": ("causal", "passes the sweep"),
    "blenderbot": ("causal", "passes the sweep"),
    "blenderbot-small": ("causal", "passes the sweep"),
    "bloom": ("causal", "passes the sweep"),
    "camembert": ("encoder", "passes the sweep"),
    "codegen": ("causal", "passes the sweep"),
    "cohere": ("causal", "passes the sweep"),
    "cohere2": ("causal", "passes the sweep"),
    "convbert": ("encoder", "passes the sweep"),
    "ctrl": ("causal", "passes the sweep"),
    "cwm": ("causal", "passes the sweep"),
    "data2vec-text": ("encoder", "passes the sweep"),
    "deberta": ("encoder", "passes the sweep"),
    "deberta-v2": ("encoder", "passes the sweep"),
    "diffllama": ("causal", "passes the sweep"),
    "distilbert": ("encoder", "passes the sweep"),
    "doge": ("causal", "passes the sweep"),
    "electra": ("encoder", "passes the sweep"),
    "ernie": ("encoder", "passes the sweep"),
    "ernie4_5": ("causal", "passes the sweep"),
    "esm": ("encoder", "passes the sweep"),
    "esmc": ("encoder", "passes the sweep"),
    "eurobert": ("encoder", "passes the sweep"),
    "exaone4": ("causal", "passes the sweep"),
    "falcon": ("causal", "passes the sweep"),
    "flaubert": ("encoder", "passes the sweep"),
    "flint": ("causal", "passes the sweep"),
    "gemma": ("causal", "passes the sweep"),
    "gemma2": ("causal", "passes the sweep"),
    "gemma3_text": ("causal", "passes the sweep"),
    "gemma3n_text": ("causal", "passes the sweep"),
    "git": ("causal", "passes the sweep"),
    "glm": ("causal", "passes the sweep"),
    "glm4": ("causal", "passes the sweep"),
    "gpt-sw3": ("causal", "passes the sweep"),
    "gpt2": ("causal", "passes the sweep"),
    "gpt_bigcode": ("causal", "passes the sweep"),
    "gpt_neox": ("causal", "passes the sweep"),
    "gpt_neox_japanese": ("causal", "passes the sweep"),
    "gptj": ("causal", "passes the sweep"),
    "granite": ("causal", "passes the sweep"),
    "granite_swa": ("causal", "passes the sweep"),
    "gte": ("encoder", "passes the sweep"),
    "helium": ("causal", "passes the sweep"),
    "hrm_text": ("causal", "passes the sweep"),
    "hunyuan_v1_dense": ("causal", "passes the sweep"),
    "hyperclovax": ("causal", "passes the sweep"),
    "ibert": ("encoder", "passes the sweep"),
    "internlm3": ("causal", "passes the sweep"),
    "iquestcoder": ("causal", "passes the sweep"),
    "jais2": ("causal", "passes the sweep"),
    "jina_embeddings_v3": ("encoder", "passes the sweep"),
    "layoutlm": ("encoder", "passes the sweep"),
    "lfm2": ("causal", "passes the sweep"),
    "lfm3": ("causal", "passes the sweep (its whole-length mask slice dropped: issue 36)"),
    "llama": ("causal", "passes the sweep"),
    "luke": ("encoder", "passes the sweep"),
    "marian": ("causal", "passes the sweep"),
    "markuplm": ("encoder", "passes the sweep"),
    "mbart": ("causal", "passes the sweep"),
    "megatron-bert": ("encoder", "passes the sweep"),
    "minicpm3": ("causal", "passes the sweep"),
    "ministral": ("causal", "passes the sweep"),
    "ministral3": ("causal", "passes the sweep"),
    "mistral": ("causal", "passes the sweep"),
    "modernbert": ("encoder", "passes the sweep"),
    "modernbert-decoder": ("causal", "passes the sweep"),
    "moshi": ("causal", "passes the sweep"),
    "mpnet": ("encoder", "passes the sweep"),
    "mra": ("encoder", "passes the sweep"),
    "mvp": ("causal", "passes the sweep"),
    "nanochat": ("causal", "passes the sweep"),
    "nemotron": ("causal", "passes the sweep"),
    "nomic_bert": ("encoder", "passes the sweep"),
    "nystromformer": ("encoder", "passes the sweep"),
    "olmo": ("causal", "passes the sweep"),
    "olmo2": ("causal", "passes the sweep"),
    "olmo3": ("causal", "passes the sweep"),
    "opt": ("causal", "passes the sweep"),
    "pegasus": ("causal", "passes the sweep"),
    "perceiver": ("encoder", "passes the sweep"),
    "persimmon": ("causal", "passes the sweep"),
    "phi": ("causal", "passes the sweep"),
    "phi3": ("causal", "passes the sweep"),
    "phi4_multimodal": ("causal", "passes the sweep"),
    "plbart": ("causal", "passes the sweep"),
    "qwen2": ("causal", "passes the sweep"),
    "qwen3": ("causal", "passes the sweep"),
    "rembert": ("encoder", "passes the sweep"),
    "roberta": ("encoder", "passes the sweep"),
    "roberta-prelayernorm": ("encoder", "passes the sweep"),
    "roc_bert": ("encoder", "passes the sweep"),
    "roformer": ("encoder", "passes the sweep"),
    "seed_oss": ("causal", "passes the sweep"),
    "smollm3": ("causal", "passes the sweep"),
    "squeezebert": ("encoder", "passes the sweep"),
    "stablelm": ("causal", "passes the sweep"),
    "starcoder2": ("causal", "passes the sweep"),
    "trocr": ("causal", "passes the sweep"),
    "ultrabert": ("encoder", "passes the sweep"),
    "vaultgemma": ("causal", "passes the sweep"),
    "whisper": ("causal", "passes the sweep"),
    "xglm": ("causal", "passes the sweep"),
    "xlm": ("encoder", "passes the sweep"),
    "xlm-roberta": ("encoder", "passes the sweep"),
    "xlm-roberta-xl": ("encoder", "passes the sweep"),
    "yoso": ("encoder", "passes the sweep"),
    "youtu": ("causal", "passes the sweep"),
}

# Mixture-of-experts families: all pass the sweep with transformers' default
# experts (grouped_mm) since issue 65 (frontend/grouped_experts.py); HunYuan-MoE's
# single expert counts its tokens with histc over the data's own range.
PASSING.update({name: ("causal", "passes the sweep with transformers' default experts")
                for name in ["hunyuan_v1_moe", "axk1", "beam", "cohere2_moe", "deepseek_v3", "dots1", "ernie4_5_moe", "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "gpt_oss", "granitemoe", "granitemoe_swa", "granitemoeshared", "hy_v3", "inkling_text", "kolibri1", "laguna", "mellum", "mimo_v2_flash", "minimax_m2", "minimax_m3_vl_text", "olmoe", "phimoe", "qwen2_moe", "qwen3_moe", "solar_open"]})
PASSING["mixtral"] = ("causal", "passes the sweep with transformers' default experts")
# Export errors until issue 65: layout probes without guards, a bound where the
# config's count is where torch's condition flips, weights inside a list, a
# one-row bias made static.
PASSING.update({
    "aria_text": ("causal", "a condition torch cannot prove, proven (issue 65)"),
    "axk2": ("causal", "topk of min(2048, seq), proven (issue 65)"),
    "deepseek_v32": ("causal", "topk of min(2048, seq), proven (issue 65)"),
    "glm_moe_dsa": ("causal", "topk of min(2048, seq), proven (issue 65)"),
    "hy_v4": ("causal", "topk of min(2048, seq), proven (issue 65)"),
    "fuyu": ("causal", "its text model from the text config (issue 65)"),
    "gemma3": ("causal", "its text model from the text config (issue 65)"),
    "gemma4": ("causal", "its text model; gelu tanh as close as eager (issue 65)"),
    "gemma4_text": ("causal", "per-layer inputs; gelu tanh as close as eager (issue 65)"),
    "gemma4_unified": ("causal", "its text model from the text config (issue 65)"),
    "gemma4_unified_text": ("causal", "per-layer config views (issue 65)"),
    "got_ocr2": ("causal", "its text model from the text config (issue 65)"),
    "modernvbert": ("encoder", "its text model from the text config (issue 65)"),
    "moss_transcribe_diarize": ("causal", "its text model from the text config (issue 65)"),
    "neomme": ("encoder", "per-layer config views (issue 65)"),
    "ultravbert": ("encoder", "its text model from the text config (issue 65)"),
    "zaya": ("causal", "passes the sweep (issue 65)"),
    "gpt_neo": ("causal", "a causal-mask buffer sliced by the length (issue 65)"),
    "openai-gpt": ("causal", "a causal-mask buffer sliced by the length (issue 65)"),
    "mobilebert": ("encoder", "two weights concatenated in the LM head; a probe of seq - 1 "
                              "(issue 65)"),
    "mpt": ("causal", "a one-row ALiBi bias sliced by the length, bounded by max_seq_len "
                      "(issue 65)"),
    **{t: (kind, "a former build-error row of the sweep (issue 65)") for t, kind in (
        ("cohere_compass_text", "causal"), ("emu3", "causal"), ("layoutlmv3", "encoder"),
        ("lfm2_moe", "causal"), ("lilt", "encoder"), ("mllama", "causal"),
        ("musicgen", "causal"), ("musicgen_melody", "causal"), ("dots3_note", "causal"),
        ("dots3_note_text", "causal"), ("gemma3n", "causal"))},
    **{t: ("causal", "complex rotary embeddings as real pairs (issue 65)")
       for t in ("deepseek_v2", "llama4", "llama4_text")},
    "mistral4": ("encoder", "a decoder's sequence-classification head (issue 65)"),
    **{t: ("causal", "Mamba-2's chunked scan at every length (issue 65)")
       for t in ("mamba2", "bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "zamba2")},
    "fnet": ("encoder", "FFTs as discrete Fourier transforms of real pairs (issue 65)"),
    "inkling2_text": ("causal", "flipped unfold windows without a layout guard (issue 65)"),
    "afmoe": ("causal", "views of attention's heads in eager's layout; a zero-initialized "
                        "router drawn (issue 65)"),
    "jetmoe": ("causal", "views of attention's heads in eager's layout; index_add of "
                         "computed rows (issue 65)"),
    "tapas": ("encoder", "a segment minimum, scatter_reduce(include_self=False) (issue 65)"),
    "xmod": ("encoder", "per-language adapters: rows read by a boolean mask (issue 65)"),
})

# One per mechanism: which of PASSING a default run compiles.
CORE: dict[str, str] = {
    "bloom": "ALiBi slopes from torch.pow of a float base (issue 36)",
    "llama": "rotary positions, grouped-query attention",
    "gpt_neox": "partial rotary, parallel attention and MLP",
    "mistral": "sliding-window mask",
    "gemma2": "logit soft-capping, alternating local and global layers",
    "deberta-v2": "relative-position encoder with disentangled attention",
    "mobilebert": "weights concatenated in a list; bottleneck layers",
    "mpt": "ALiBi bias sliced from a one-row table; a bound the config states as max_seq_len",
    "mixtral": "mixture of experts as loaded: topk routing, histc counts and the grouped "
               "product in every layer",
}

SELECTED = PASSING if os.environ.get("ANYSHAPE_HF_FAMILIES") == "all" else \
    {name: PASSING[name] for name in CORE}


def _task(model_type: str, kind: str) -> str:
    return dict(((t, k), task) for t, k, task in sweep.families(kind))[(model_type, kind)]


@pytest.fixture(scope="module", params=sorted(SELECTED))
def compiled_family(request):
    model_type = request.param
    kind = SELECTED[model_type][0]
    family = sweep.Family(model_type, kind, _task(model_type, kind), SIZES)
    compiled, _ = family.compile()
    return family, compiled


@pytest.mark.builds_after_export
@pytest.mark.parametrize("batch, length", SHAPES)
def test_matches_eager(compiled_family, batch, length):
    family, compiled = compiled_family
    ids, mask = family.inputs(batch, length, seed=length)
    if (batch, length) == sweep.PADDED_SHAPE:
        assert mask[0].sum() < length and mask[1:].all()
    with torch.no_grad():
        expected = family.wrapper(ids, mask)
    got = compiled(ids, mask)
    error, why = sweep.masked_error(got, expected, mask)
    tolerance = sweep.REL_TOLERANCE * max(1.0, float(expected.abs().max()))
    assert error <= tolerance, f"{family.model_type} at {batch}x{length}: {error:.2e} {why}"


def test_core_families_pass_the_sweep():
    assert set(CORE) <= set(PASSING), set(CORE) - set(PASSING)


@pytest.mark.parametrize("model_type, text_model", [("gemma3", "Gemma3ForCausalLM"),
                                                     ("llama4", "Llama4ForCausalLM"),
                                                     ("qwen3_5", "Qwen3_5ForCausalLM")])
def test_a_multimodal_config_builds_its_text_model(model_type, text_model):
    """These configs have no vocabulary of their own (the sweep's build-error rows
    until issue 65): a user loads their text model from the text config."""
    family = sweep.Family(model_type, "causal", _task(model_type, "causal"), SIZES)
    assert type(family.built.model).__name__ == text_model
    ids, mask = family.example()
    with torch.no_grad():
        assert family.wrapper(ids, mask).shape == (*ids.shape, family.built.vocab_size)


def test_a_config_with_per_layer_views_builds():
    """Gemma 4's text config derives a per-layer view, which its constructor
    refuses back as an override."""
    assert "per_layer_config" not in sweep.small_overrides("gemma4_text", SIZES)
    family = sweep.Family("gemma4_text", "causal", _task("gemma4_text", "causal"), SIZES)
    with torch.no_grad():
        assert family.wrapper(*family.example()).dim() == 3


# The sweep's former build-error rows (issue 65) and what made each build: a
# model class that takes a part of a composite config, ids that are code points,
# per-layer fields of a heterogeneous config, widths one size implies, and the
# fields a checkpoint's config sets where transformers' default leaves them unset.
BUILDS_SINCE_ISSUE_65: dict[str, tuple[str, str]] = {
    "blt": ("causal", "the global transformer's width (hidden_size_global)"),
    "canine": ("encoder", "ids are Unicode code points: no vocabulary"),
    "cohere_compass_text": ("causal", "rope parameters per layer type"),
    "dbrx": ("causal", "attn_config's rope_theta and clip_qkv (a part's override)"),
    "dots3_note_text": ("causal", "per-layer fields of a heterogeneous config; rotary width"),
    "dots3_note": ("causal", "the same, in the composite config's text part"),
    "emu3": ("causal", "Emu3ForCausalLM takes the text part of the composite config"),
    "mllama": ("causal", "MllamaForCausalLM takes the text part of the composite config"),
    "musicgen": ("causal", "MusicgenForCausalLM takes the decoder part; one codebook"),
    "gemma3n": ("causal", "the text part's own overrides (KV-sharing layers)"),
    "layoutlmv3": ("encoder", "box embeddings that fill the hidden width"),
    "lilt": ("encoder", "box embeddings of hidden / 6 each"),
    "lfm2_moe": ("causal", "layer types the default config leaves unset"),
    "longcat_flash": ("causal", "the rotary width of latent attention (head_dim)"),
    "nemotron_h": ("causal", "Mamba-2 groups that divide the heads"),
    "qwen4_exp_text": ("causal", "the token indexer the default config leaves unset"),
    "xmod": ("encoder", "a default language"),
    "zamba": ("causal", "two hybrid layers, twice the hidden width in the shared block"),
    "zamba2": ("causal", "twice the hidden width in the shared block"),
}


@pytest.mark.parametrize("model_type", sorted(BUILDS_SINCE_ISSUE_65))
def test_a_former_build_error_family_runs_eagerly(model_type):
    kind = BUILDS_SINCE_ISSUE_65[model_type][0]
    family = sweep.Family(model_type, kind, _task(model_type, kind), SIZES)
    ids, mask = family.inputs(*sweep.PADDED_SHAPE, seed=0)
    with torch.no_grad():
        logits = family.wrapper(ids, mask)
    assert logits.shape[0] == ids.shape[0] and torch.isfinite(logits).all()


def test_a_heterogeneous_config_has_its_per_layer_fields_shrunk():
    """dots3's text config refuses to read num_attention_heads globally; left out,
    the model kept 128 heads of a 64-wide model."""
    overrides = sweep.small_overrides("dots3_note_text", SIZES)
    assert overrides["num_attention_heads"] == SIZES.heads
    assert overrides["kv_lora_rank"] <= SIZES.head_dim


def test_a_router_initialized_to_zero_is_drawn():
    """AfMoE initializes its router to zero: every expert ties, and topk's order
    among ties is unspecified (eager's CPU topk and IREE's pick differently)."""
    family = sweep.Family("afmoe", "causal", _task("afmoe", "causal"), SIZES)
    assert family.routers_drawn == ["model.layers.1.mlp.router.gate.weight"]
    router = family.built.model.get_submodule("model.layers.1.mlp.router.gate")
    assert router.weight.std() > 0.01
    assert sweep.Family("mixtral", "causal", _task("mixtral", "causal"), SIZES).routers_drawn == []


def test_the_float64_reference_of_default_experts_runs():
    """transformers' grouped_mm experts take no float64: the reference runs
    them as its eager implementation."""
    family = sweep.Family("afmoe", "causal", _task("afmoe", "causal"), SIZES)
    ids, mask = family.inputs(*sweep.PADDED_SHAPE, seed=0)
    with torch.no_grad():
        exact = sweep._float64_copy(family.wrapper)(ids, mask)
        expected = family.wrapper(ids, mask)
    assert exact.dtype == torch.float64
    torch.testing.assert_close(exact.float(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model_type, status", [("gemma4_assistant", "not-standalone"),
                                                ("layoutlmv2", "needs-library")])
def test_a_family_that_cannot_run_alone_says_why(model_type, status):
    kind = "encoder" if model_type == "layoutlmv2" else "causal"
    row = sweep.work(model_type, kind, _task(model_type, kind))
    assert row["status"] == status
    assert ("detectron2" if model_type == "layoutlmv2" else "shared_kv_states") in row["note"]
