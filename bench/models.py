"""The benchmark models, shared by the scripts in bench/.

Each is a HuggingFace model built from its config (random weights: nothing is
downloaded, and latency does not depend on the weights), wrapped so that it
takes ``(input_ids, attention_mask)`` and returns one logits tensor.
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


# name -> (builder, longest sequence the model takes)
MODELS = {"roberta-base classifier": (roberta_base, 512),
          "gpt2-small last-token logits": (gpt2_small, 1024)}
