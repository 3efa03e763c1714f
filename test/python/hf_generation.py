"""HF's own ``generate`` as the oracle of compiled generation, float64 deciding
where float32's tokens differ from anyshape's."""

from __future__ import annotations

import copy
import warnings

import torch


def hf_generate(model, ids, mask=None, **kwargs):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, attention_mask=mask, **kwargs)


def sequences(output):
    return getattr(output, "sequences", output)


def hf_and_ours(model, generator, ids, mask, generate=hf_generate, **kwargs):
    """(HF's output, anyshape's) for the same inputs, arguments and seed.
    Where HF's float32 tokens differ from anyshape's, HF's float64 ones decide:
    its output is then the float64 model's (a near tie that float32 rounding
    breaks either way, e.g. a beam's score after a hundred tokens)."""
    torch.manual_seed(0)
    got = generator.generate(ids, attention_mask=mask, **kwargs)
    torch.manual_seed(0)
    want = generate(model, ids, mask, **kwargs)
    if not torch.equal(sequences(got), sequences(want)):
        torch.manual_seed(0)
        want = generate(copy.deepcopy(model).double(), ids, mask, **kwargs)
    return want, got
