"""A sliding-window cache cut to its window without a guard, while anyshape exports.

transformers' ``DynamicSlidingWindowLayer.update`` keeps the last ``window - 1``
keys and values with ``full[:, :, -window + 1:, :]``. torch's fake slice decides
at the example's length whether that start clamps to 0, and records it: a
hand-written decode step (Mistral, Phi-3) with ``Dim("past")`` was refused with
``past < 7`` (a bound from the example, not the model's, which takes a past of up
to ``window - 1``). Inside ``window_cut_caches`` the same cut is a ``narrow`` from
``max(n - (window - 1), 0)`` of ``min(n, window - 1)`` rows, torch's own symbolic
max and min, so the sizes stay symbolic; what they imply (``past = min(7,
past)``, a past no longer than the cache keeps) is a condition of the model, and
``unproven_guards`` proves it over the dim's declared range or the refusal
names it. Only the layer as transformers writes it is replaced (its source
holds the cut); past recording (``record_past``) keeps transformers' own path.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="sliding_window_cut_without_guard", stage="export", where="window_cut_caches",
    upstream="torch 2.13's fake slice decides whether a negative start clamps from the example "
             "size (transformers 5.23's DynamicSlidingWindowLayer keeps "
             "full[:, :, -window + 1:]): a hand-written decode step's Dim('past') was bounded by "
             "the example (pytorch/pytorch#185166 makes it a min/max).",
    guard="test/python/generation/test_decode_step.py::"
          "test_hand_written_decode_step_is_the_eager_step[mistral]",
    remove_when="the pinned torch has pytorch/pytorch#185166 (the guard passes without it)"),)

# The cut this replaces, as transformers' source writes it.
_CUT = "full_key_states[:, :, -self.sliding_window + 1 :, :]"


def _update_cut_by_narrow(original):
    def update(self, key_states, value_states, *args, **kwargs):
        if self.record_past:
            return original(self, key_states, value_states, *args, **kwargs)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        full_keys = torch.cat([self.keys, key_states], dim=-2)
        full_values = torch.cat([self.values, value_states], dim=-2)
        rows, kept = full_keys.shape[-2], self.sliding_window - 1
        start, length = torch.sym_max(rows - kept, 0), torch.sym_min(rows, kept)
        self.keys = full_keys.narrow(-2, start, length)
        self.values = full_values.narrow(-2, start, length)
        return full_keys, full_values
    return update


@contextlib.contextmanager
def window_cut_caches() -> Iterator[None]:
    """Within: transformers' ``DynamicSlidingWindowLayer.update`` cuts by ``narrow``."""
    try:
        from transformers.cache_utils import DynamicSlidingWindowLayer
    except ImportError:
        yield
        return
    original = DynamicSlidingWindowLayer.__dict__.get("update")
    try:
        ours = original is not None and _CUT in inspect.getsource(original)
    except (OSError, TypeError):
        ours = False
    if ours:
        DynamicSlidingWindowLayer.update = _update_cut_by_narrow(original)
    try:
        yield
    finally:
        if ours:
            DynamicSlidingWindowLayer.update = original
