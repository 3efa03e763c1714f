"""The benchmark models, shared by the scripts in bench/.

Each is a HuggingFace model built from its config (random weights: nothing is
downloaded, and latency does not depend on the weights), wrapped so that it
takes ``(input_ids, attention_mask)`` (a sequence-to-sequence model also
``decoder_input_ids``) and returns one logits tensor.
``tiny=True`` gives the same architecture at 2 layers, hidden size 64 (for
smoke tests of the scripts, not for numbers).
"""

from __future__ import annotations

import torch

TINY = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 256}


class Logits(torch.nn.Module):
    """A HuggingFace model's logits as a tensor; ``position``: only that token's."""

    def __init__(self, model, position: int | None = None):
        super().__init__()
        self.model, self.position = model, position

    def forward(self, input_ids, attention_mask):
        logits = self.model(input_ids, attention_mask=attention_mask).logits
        return logits if self.position is None else logits[:, self.position, :]


class Seq2SeqLogits(torch.nn.Module):
    """An encoder-decoder's logits for ``decoder_input_ids``, the encoder run on the source."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids).logits


def roberta_base(tiny: bool = False):
    """roberta-base sequence classification (reads ``features[:, 0, :]``): its logits."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    size = {} if not tiny else {
        "num_hidden_layers": TINY["layers"], "hidden_size": TINY["hidden"],
        "num_attention_heads": TINY["heads"], "intermediate_size": TINY["intermediate"]}
    return Logits(RobertaForSequenceClassification(
        RobertaConfig(max_position_embeddings=514, **size)))


def gpt2_small(tiny: bool = False):
    """GPT-2 small's logits for the last token (reads ``logits[:, -1, :]``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    size = {} if not tiny else {
        "n_layer": TINY["layers"], "n_embd": TINY["hidden"], "n_head": TINY["heads"],
        "n_inner": TINY["intermediate"]}
    return Logits(GPT2LMHeadModel(GPT2Config(use_cache=False, **size)), position=-1)


def gpt2_small_logits(tiny: bool = False):
    """GPT-2 small's logits at every position."""
    return Logits(gpt2_small(tiny).model)


def bert_base_masked_lm(tiny: bool = False):
    """bert-base's masked-LM logits at every position."""
    from transformers import BertConfig, BertForMaskedLM

    size = {} if not tiny else {
        "num_hidden_layers": TINY["layers"], "hidden_size": TINY["hidden"],
        "num_attention_heads": TINY["heads"], "intermediate_size": TINY["intermediate"]}
    return Logits(BertForMaskedLM(BertConfig(**size)))


def t5_small(tiny: bool = False):
    """T5-small (t5-small's config: 6 + 6 layers, d_model 512, relative positions): the
    decoder's logits."""
    from transformers import T5Config, T5ForConditionalGeneration

    size = {"d_model": 512, "d_ff": 2048, "d_kv": 64, "num_layers": 6, "num_heads": 8} \
        if not tiny else {"d_model": TINY["hidden"], "d_ff": TINY["intermediate"], "d_kv": 16,
                          "num_layers": TINY["layers"], "num_heads": TINY["heads"]}
    return Seq2SeqLogits(T5ForConditionalGeneration(T5Config(
        vocab_size=32128, use_cache=False, decoder_start_token_id=0, **size)))


# name -> (builder, longest sequence the model takes)
MODELS = {"roberta-base classifier": (roberta_base, 512),
          "gpt2-small last-token logits": (gpt2_small, 1024),
          "gpt2-small logits": (gpt2_small_logits, 1024),
          "bert-base masked-LM logits": (bert_base_masked_lm, 512),
          "t5-small logits": (t5_small, 512)}
# The models that also take decoder_input_ids (their own length)
SEQ2SEQ = {"t5-small logits"}
