"""HuggingFace transformers models by model type and task, unmodified, from their configs.

What ``anyshape-compile --hf`` and ``make zoo`` compile: a model built from
the default config of a transformers model type (``roberta``, ``t5``, ...),
with overrides, for one task; example inputs for ``torch.export`` and the
dynamic dims over them. Random weights: nothing is downloaded.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import torch
from torch.export import Dim

# task -> the transformers auto class that builds it
TASKS = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "causal-lm-last-token": "AutoModelForCausalLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    # Electra's discriminator (ElectraForPreTraining), BERT with its MLM and NSP heads
    "pretraining": "AutoModelForPreTraining",
}

# For models without learned positions (T5's relative buckets), the default
# longest sequence; --max-seq sets another.
DEFAULT_MAX_SEQ = 512
# Models whose position ids start after the padding index (RoBERTa's
# create_position_ids_from_input_ids): pad_token_id + 1 positions are unusable.
# Their released checkpoints (roberta-base, xlm-roberta-base) have that many more
# positions than transformers' default config (514, not 512: 512 tokens), and
# so does the default here, unless --config sets max_position_embeddings.
POSITIONS_AFTER_PADDING = {"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl"}


# Models whose ids are Unicode code points, with no vocabulary of their own
# (CANINE hashes each code point into its embeddings).
CODE_POINT_INPUTS = {"canine": 0x110000}


class LastTokenLogits(torch.nn.Module):
    """A causal LM's next-token logits at the last position (prefill)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids, attention_mask=attention_mask).logits[:, -1, :]


@dataclasses.dataclass
class HFModel:
    model: torch.nn.Module
    model_type: str
    task: str
    max_seq: int | None        # the longest sequence its positions allow (None: no limit)
    vocab_size: int
    seq2seq: bool

    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def example_inputs(self, batch: int, seq: int, dec_seq: int | None = None,
                       padding: bool = True, seed: int = 0) -> dict[str, torch.Tensor]:
        """Random token ids (never the padding token) and an attention mask whose
        first row is padded from half its length on (``padding``)."""
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(3, self.vocab_size, (batch, seq), generator=generator)
        mask = torch.ones(batch, seq, dtype=torch.long)
        if padding and seq > 1:
            mask[0, (seq + 1) // 2:] = 0
        inputs = {"input_ids": ids, "attention_mask": mask}
        if self.seq2seq:
            inputs["decoder_input_ids"] = torch.randint(
                3, self.vocab_size, (batch, dec_seq or seq), generator=generator)
        return inputs

    def dynamic_shapes(self, dynamic: set[str], max_batch: int | None,
                       max_seq: int | None) -> dict:
        """torch.export dynamic_shapes for ``example_inputs``' names (a max of None:
        unbounded, as a user's plain ``Dim("seq")``)."""
        batch = Dim("batch", min=1, max=max_batch) if "batch" in dynamic else None
        seq = Dim("seq", min=1, max=max_seq) if "seq" in dynamic else None
        dec = Dim("dec_seq", min=1, max=max_seq) if "seq" in dynamic else None
        shapes = {}
        for name, seq_dim in [("input_ids", seq), ("attention_mask", seq),
                              *([("decoder_input_ids", dec)] if self.seq2seq else [])]:
            shapes[name] = {axis: dim for axis, dim in ((0, batch), (1, seq_dim)) if dim}
        return shapes


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["num_hidden_layers=2", "hidden_act=gelu"]`` -> values as Python literals
    where they parse as one, else strings."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config: expected KEY=VALUE, got '{item}'")
        try:
            out[key.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key.strip()] = value
    return out


def default_config(model_type: str, overrides: dict[str, Any] | None = None):
    """transformers' default config of ``model_type``, with ``overrides``."""
    import transformers

    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        known = ", ".join(sorted(transformers.CONFIG_MAPPING.keys()))
        raise ValueError(f"model type: transformers has no model type '{model_type}' "
                         f"(known: {known})") from None
    fields = config.to_dict()  # with the per-layer fields a heterogeneous config
    # refuses to read globally (hasattr raises on them)
    unknown = [key for key in overrides or {} if key not in fields and not hasattr(config, key)]
    if unknown:
        raise ValueError(f"--config: {model_type}'s config ({type(config).__name__}) has no "
                         f"field {', '.join(repr(k) for k in unknown)}")
    if model_type in POSITIONS_AFTER_PADDING and "max_position_embeddings" not in (overrides or {}):
        config.max_position_embeddings += (config.pad_token_id or 0) + 1
    for key, value in (overrides or {}).items():
        setattr(config, key, value)
    return config


def build(model_type: str, task: str, overrides: dict[str, Any] | None = None,
          seed: int = 0) -> HFModel:
    """The model of ``task`` for transformers' default ``model_type`` config with
    ``overrides``, in eval mode, without a KV cache."""
    import transformers

    if task not in TASKS:
        raise ValueError(f"task: expected one of {', '.join(TASKS)}, got '{task}'")
    auto = getattr(transformers, TASKS[task])
    model_class, config = _model_class_and_config(auto, default_config(model_type, overrides))
    config.use_cache = False  # one forward over the whole sequence: no KV cache to return
    if model_class is None:
        have = [t for t, a in TASKS.items()
                if type(config) in getattr(transformers, a)._model_mapping]
        raise ValueError(f"task: transformers has no '{task}' model for model type "
                         f"'{model_type}' (its tasks: {', '.join(have) or 'none of these'})")
    torch.manual_seed(seed)
    model = model_class._from_config(config).eval()
    if task == "causal-lm-last-token":
        model = LastTokenLogits(model).eval()
    vocab = getattr(config, "vocab_size", None) or CODE_POINT_INPUTS.get(model_type)
    return HFModel(model, model_type, task, _max_positions(config, model_type),
                   vocab, task == "seq2seq-lm")


def _model_class_and_config(auto, config):
    """The class ``auto`` builds for ``config`` (None: it has none) and the config
    it is built from. Where that class takes one of a composite config's parts
    (Mllama's and Emu3's text models, MusicGen's decoder), that part; otherwise
    ``text_model_config(config)``."""
    if type(config) in auto._model_mapping:
        model_class = auto._model_mapping[type(config)]
        wanted = model_class.config_class
        if wanted is not None and not isinstance(config, wanted):
            part = [v for v in vars(config).values() if type(v) is wanted]
            if len(part) == 1:
                return model_class, part[0]
    config = text_model_config(config)
    return auto._model_mapping.get(type(config), None), config


def text_model_config(config):
    """``config``, or for a composite (multimodal) config without a vocabulary of
    its own (Gemma 3, Llama 4, Qwen3.5, Mllama), its text config: the model a
    user loads with ``AutoModelForCausalLM`` for text."""
    if hasattr(config, "vocab_size") or not hasattr(config, "get_text_config"):
        return config
    text = config.get_text_config()
    return text if text is not config and hasattr(text, "vocab_size") else config


def _max_positions(config, model_type: str) -> int | None:
    for field in ("max_position_embeddings", "n_positions"):
        positions = getattr(config, field, None)
        if isinstance(positions, int):
            if model_type in POSITIONS_AFTER_PADDING:
                positions -= (config.pad_token_id or 0) + 1
            return positions
    return None


def unique_parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each tensor once (a tied
    embedding and LM head count once)."""
    return sum({t.data_ptr(): t.numel() * t.element_size()
                for t in [*model.parameters(), *model.buffers()]}.values())
