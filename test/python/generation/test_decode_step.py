"""A decode step written by hand and compiled with ``anyshape.compile``, as users write one.

The module takes the ids, the mask and the cache's keys and values as a list of
tensors, builds a ``DynamicCache`` from them in ``forward``, and returns the
logits and the grown cache; one ``Dim("batch")`` for the ids, the mask and
every cache tensor, one ``Dim("past")`` for the cache length. The example cache
comes from the HF model's own prefill (for a sliding-window model, views of its
cache). Each family runs in a fresh process, as a user's script would, and is
checked against the eager step at batch 1 with one past token, at 7 and on a
batch of 3 at 17. Llama, Qwen2 and BLOOM used to fail export (torch's layout
probes, frontend/layout_probes.py); OPT refused batch 1; the compiled module
took the list only as separate arguments (issue 65). A sliding-window cache
keeps at most ``window - 1`` keys (frontend/sliding_window_cache.py): its step
is compiled with ``Dim("past", max=window - 1)``, and refused by name without
it. Gemma 2 alternates sliding layers, which keep at most ``window - 1`` keys,
with full ones, which keep every key: its sliding layers' caches get a Dim of
their own, ``Dim("kept", max=window - 1)``, as a user describes them.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from extent import sweep
from test_generate import FAMILIES, FAMILY_OVERRIDES

HERE = Path(__file__).resolve().parent
# Llama and Mistral (a sliding window) in the quick extent (extent.py).
CORE = sweep(["llama", "mistral"], ["qwen2", "opt", "bloom"])
SELECTED = FAMILIES if os.environ.get("ANYSHAPE_HF_FAMILIES") == "all" else CORE
# Sliding-window caches: the longest past they keep (FAMILY_OVERRIDES' window of 8).
SLIDING_WINDOW = {"mistral": 7, "phi3": 7}

SCRIPT = textwrap.dedent('''
    import json, sys, warnings
    warnings.simplefilter("ignore")
    sys.path[:0] = [{here!r}, {lib!r}]
    import torch
    from torch.export import Dim
    from transformers import DynamicCache
    import anyshape
    from test_generate import small_causal_lm

    model = small_causal_lm({model_type!r}, **{overrides!r})
    layers = model.config.num_hidden_layers

    class Step(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, past):
            cache = DynamicCache(config=self.model.config)
            for layer in range(layers):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True)
            return out.logits, [t for layer in out.past_key_values.layers
                                for t in (layer.keys, layer.values)]

    def prefill(batch, length, seed):
        ids = torch.randint(3, 100, (batch, length), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            cache = model(input_ids=ids, use_cache=True).past_key_values
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]

    def step_inputs(batch, length, seed):
        past = prefill(batch, length, seed)
        ids = torch.randint(3, 100, (batch, 1), generator=torch.Generator().manual_seed(seed))
        full = max(t.shape[2] for t in past)  # a sliding layer keeps fewer
        return ids, torch.ones(batch, full + 1, dtype=torch.long), past

    step = Step(model).eval()
    batch, past = Dim("batch"), Dim("past", max={past_max}) if {past_max} else Dim("past")
    # Sliding layers beside full ones keep at most window - 1 keys: a Dim of their own.
    layer_types = getattr(model.config, "layer_types", None) or []
    mixed = {{"sliding_attention", "full_attention"}} <= set(layer_types)
    kept = Dim("kept", max=model.config.sliding_window - 1) if mixed else past
    example = step_inputs(2, 5, 0)
    compiled = anyshape.compile(step, example, dynamic_shapes={{
        "input_ids": {{0: batch}}, "attention_mask": {{0: batch, 1: past + 1}},
        "past": [{{0: batch, 2: kept if layer_types and layer_types[i // 2] ==
                   "sliding_attention" else past}} for i in range(len(example[2]))]}})
    errors = {{}}
    for batch_size, length in ((1, 1), (1, 7), (3, 17)):
        ids, mask, cache = step_inputs(batch_size, length, length)
        with torch.no_grad():
            logits, grown = step(ids, mask, cache)
        got_logits, got_grown = compiled(ids, mask, cache)
        errors[f"{{batch_size}}x{{length}}"] = max(
            [float((got_logits - logits).abs().max())] +
            [float((g - e).abs().max()) for g, e in zip(got_grown, grown)])
    try:
        compiled(*example[:2], example[2][:-1])
        short = ""
    except ValueError as error:
        short = str(error)
    print(json.dumps({{"errors": errors, "short": short}}))
''')


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", SELECTED)
def test_hand_written_decode_step_is_the_eager_step(model_type):
    script = SCRIPT.format(here=str(HERE), lib=str(HERE.parent), model_type=model_type,
                           overrides=FAMILY_OVERRIDES.get(model_type, {}),
                           past_max=SLIDING_WINDOW.get(model_type))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert max(result["errors"].values()) < 1e-4, result["errors"]
    layers = 2
    assert result["short"] == (f"argument 'past': expected a list of {2 * layers} items, got "
                               f"{2 * layers - 1}"), result["short"]


@pytest.mark.builds_after_export
def test_negative_an_unbounded_past_past_the_window_is_refused_by_name():
    """/// Mistral's cache keeps 7 keys (window 8): with an unbounded Dim("past")
    /// the refusal names the dim and the cache's line, and the condition."""
    script = SCRIPT.format(here=str(HERE), lib=str(HERE.parent), model_type="mistral",
                           overrides=FAMILY_OVERRIDES["mistral"], past_max=None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode != 0
    assert "could not keep dim 'past'" in done.stderr, done.stderr[-3000:]
    assert "Min(7, " in done.stderr and "cache_utils.py" in done.stderr, done.stderr[-3000:]
