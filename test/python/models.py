"""Small models shared by the tests."""

import math

import torch
from torch.export import Dim


class ShapeQueries(torch.nn.Module):
    """Reads shapes at trace time the way NLP code does: ``x.shape[1]`` into
    ``arange``, an ``expand`` to a size list, a view by ``x.shape[0] * x.shape[1]``."""

    def __init__(self, hidden=8, max_len=64):
        super().__init__()
        self.pos = torch.nn.Embedding(max_len, hidden)
        self.proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, length = x.shape[0], x.shape[1]
        positions = torch.arange(length).unsqueeze(0).expand(batch, length)
        h = x + self.pos(positions)
        flat = h.view(batch * length, h.shape[-1])
        out = self.proj(flat) * math.sqrt(h.shape[-1])
        return out.view(batch, length, -1)


def shape_queries_case():
    torch.manual_seed(0)
    model = ShapeQueries().eval()
    example = torch.randn(2, 5, 8)
    dynamic = {"x": {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=1, max=64)}}
    return model, (example,), dynamic


def small_roberta(num_labels=2, layers=2, hidden=128, max_positions=66):
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(0)
    config = RobertaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                           intermediate_size=2 * hidden, max_position_embeddings=max_positions,
                           vocab_size=1000, num_labels=num_labels)
    return RobertaForSequenceClassification(config).eval()


class LastTokenLogits(torch.nn.Module):
    """GPT-2 prefill: the next-token logits of the last position."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids, attention_mask=attention_mask).logits[:, -1, :]


def small_gpt2_last_token(hidden=64, layers=2, heads=2, inner=128, vocab=500, positions=64):
    from transformers import GPT2Config, GPT2LMHeadModel

    return LastTokenLogits(GPT2LMHeadModel(GPT2Config(
        n_embd=hidden, n_layer=layers, n_head=heads, n_inner=inner, vocab_size=vocab,
        n_positions=positions, use_cache=False, bos_token_id=0, eos_token_id=0)))


def roberta_inputs(batch, length, vocab=1000, pad_from=None, seed=0):
    """input_ids and an attention mask whose first row is padded from ``pad_from`` on."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad_from is not None and pad_from < length:
        mask[0, pad_from:] = 0
        ids[0, pad_from:] = 1  # RoBERTa's padding token
    return ids, mask


class TransformerEncoderPattern(torch.nn.Module):
    """The Gluon-NLP encoder's shape reads: positions from ``arange(x.shape[1])``,
    a ``valid_length`` mask broadcast to ``(b, 1, L, L)``, and a scale by
    ``sqrt(x.shape[-1])``."""

    def __init__(self, hidden=16, max_len=64):
        super().__init__()
        self.position = torch.nn.Embedding(max_len, hidden)
        self.query = torch.nn.Linear(hidden, hidden)

    def forward(self, x, valid_length):
        batch, length = x.shape[0], x.shape[1]
        steps = torch.arange(length)
        h = x * math.sqrt(x.shape[-1]) + self.position(steps)
        valid = steps[None, :] < valid_length[:, None]
        mask = (valid[:, None, :, None] & valid[:, None, None, :]).expand(batch, 1, length, length)
        q = self.query(h)
        scores = q @ h.transpose(1, 2) / math.sqrt(h.shape[-1])
        scores = scores.masked_fill(~mask[:, 0], -1e4)
        return torch.softmax(scores, dim=-1) @ h


def encoder_pattern_case():
    torch.manual_seed(0)
    model = TransformerEncoderPattern().eval()
    args = (torch.randn(2, 6, 16), torch.tensor([6, 3]))
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=64)
    return model, args, {"x": {0: batch, 1: seq}, "valid_length": {0: batch}}


def one_layer_llama(hidden, intermediate, heads, kv_heads, vocab, seed):
    """A Llama of one layer, random weights from ``seed``, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=1,
        num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
        max_position_embeddings=256)).eval()
