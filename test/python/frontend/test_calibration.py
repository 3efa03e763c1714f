"""Weights rounded by GPTQ against calibration samples (``anyshape.calibrated``, issue 66).

The oracle of the rounding is the products' own error: on inputs of the
samples' distribution, a calibrated layer's outputs must be closer to the
float32 layer's than rounding each weight to nearest makes them. The
oracle of the compile is eager on the calibrated copy, which a compiled
module must match within float32 rounding, with every weight stored as
its codes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree.quantized_weights import (QuantizationError, exact_codes, reference_model,
                                             weight_format)


def correlated_inputs(count: int, seed: int) -> torch.Tensor:
    """Rows [count, 7, 128] spanning few directions, with a few large
    channels, as a transformer's hidden states do: the case where moving
    rounding errors onto correlated columns pays."""
    generator = torch.Generator().manual_seed(seed)
    basis = torch.randn(12, 128, generator=torch.Generator().manual_seed(99))
    basis[:, :4] *= 8
    mix = torch.randn(count, 7, 12, generator=generator)
    return mix @ basis + 0.05 * torch.randn(count, 7, 128, generator=generator)


def mlp(hidden: int = 128) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(128, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, 64)).eval()


@pytest.mark.parametrize("weights, group_size", [("int4", 32), ("int4", 128), ("int8", None)])
def test_calibrated_products_are_closer_to_float32_than_rounding_to_nearest(weights,
                                                                            group_size):
    model = mlp()
    samples = list(correlated_inputs(16, seed=1))
    calibrated = anyshape.calibrated(model, samples, weights=weights, group_size=group_size)
    fmt = weight_format(weights, group_size)
    nearest = reference_model(model, fmt)
    held_out = correlated_inputs(16, seed=2)
    with torch.no_grad():
        want = model(held_out)
        calibrated_error = (calibrated(held_out) - want).norm()
        nearest_error = (nearest(held_out) - want).norm()
    assert calibrated_error < 0.8 * nearest_error, (calibrated_error, nearest_error)
    for layer in (calibrated[0], calibrated[2]):
        assert exact_codes(layer.weight.detach().numpy(), fmt) is not None
    # The model itself is untouched.
    assert torch.equal(model[0].weight, mlp()[0].weight)


def test_padded_positions_are_left_out_of_the_statistics():
    """A sample's padded positions (attention_mask 0) hold inputs the model
    never uses: calibrating with any values there gives the same codes."""
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = mlp()[0]

        def forward(self, hidden, attention_mask):
            return self.proj(hidden) * attention_mask[..., None]

    model = Masked().eval()
    hidden = correlated_inputs(4, seed=3)
    mask = torch.ones(4, 7, dtype=torch.long)
    mask[1:, 4:] = 0
    noisy = hidden.clone()
    noisy[mask == 0] = 100 * torch.randn(int((mask == 0).sum()), 128)
    results = [anyshape.calibrated(model, [{"hidden": h, "attention_mask": mask}])
               for h in (hidden, noisy)]
    assert torch.equal(results[0].proj.weight, results[1].proj.weight)
    unmasked = anyshape.calibrated(model, [(noisy, mask)])
    assert not torch.equal(unmasked.proj.weight, results[0].proj.weight)


def tiny_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=128)).eval()


@pytest.mark.builds_after_export
def test_a_calibrated_model_compiles_to_its_own_codes():
    model = tiny_bert()
    samples = [{"input_ids": torch.randint(0, 300, (2, 17)),
                "attention_mask": torch.tensor([[1] * 17, [1] * 9 + [0] * 8])}
               for _ in range(4)]
    calibrated = anyshape.calibrated(model, samples)
    reports = []
    dims = {"input_ids": {0: Dim("batch"), 1: Dim("seq", max=512)},
            "attention_mask": {0: Dim("batch"), 1: Dim("seq", max=512)}}
    module = anyshape.compile(calibrated, (samples[0]["input_ids"], samples[0]["attention_mask"]),
                              dynamic_shapes=dims, progress=reports.append)
    assert any("with int4 weights" in line and "0 kept float32" in line for line in reports), \
        reports
    for batch, length in [(1, 1), (3, 7), (2, 33)]:
        ids = torch.randint(0, 300, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[0, length // 2 + 1:] = 0
        got = np.asarray(module(ids, mask).last_hidden_state)
        with torch.no_grad():
            want = calibrated(ids, mask).last_hidden_state.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_calibrated_weight_changed_afterwards_is_named():
    calibrated = anyshape.calibrated(tiny_bert(), [torch.randint(0, 300, (1, 9))])
    with torch.no_grad():
        calibrated.encoder.layer[1].intermediate.dense.weight[3, 5] += 1e-3
    with pytest.raises(ValueError, match=r"encoder\.layer\.1\.intermediate\.dense\.weight is "
                                         r"not int4 codes any more"):
        anyshape.compile(calibrated, (torch.randint(0, 300, (1, 9)),))


def test_calibration_errors_name_their_argument():
    model = mlp(hidden=96)
    samples = [correlated_inputs(1, seed=0)]
    with pytest.raises(ValueError, match=r"weights: .*'int8' or 'int4'; got 'float32'"):
        anyshape.calibrated(model, samples, weights="float32")
    with pytest.raises(ValueError, match=r"group_size: expected one of 32, 64, 128, got 48"):
        anyshape.calibrated(model, samples, group_size=48)
    with pytest.raises(QuantizationError, match=r"group_size: 128 does not divide k = 96"):
        anyshape.calibrated(model, samples, group_size=128)
    with pytest.raises(ValueError, match=r"samples: expected at least one"):
        anyshape.calibrated(model, [])
    with pytest.raises(TypeError, match=r"samples: expected a sequence .* got Tensor"):
        anyshape.calibrated(model, samples[0])
    with pytest.raises(TypeError, match=r"samples\[1\]: expected a tuple .* got str"):
        anyshape.calibrated(model, [samples[0], "text"])
    with pytest.raises(ValueError, match=r"0\.weight is torch\.bfloat16"):
        anyshape.calibrated(mlp().to(torch.bfloat16), samples)
    with pytest.raises(QuantizationError, match=r"no linear layer to calibrate"):
        anyshape.calibrated(torch.nn.Sequential(torch.nn.Embedding(10, 32)),
                            [torch.tensor([[1, 2]])])
    once = anyshape.calibrated(model, samples)
    with pytest.raises(ValueError, match=r"model: already quantized"):
        anyshape.calibrated(once, samples)


def test_a_layer_the_samples_do_not_reach_is_rounded_to_nearest():
    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.used, self.unused = torch.nn.Linear(128, 64), torch.nn.Linear(128, 64)

        def forward(self, x, other=False):
            return self.unused(x) if other else self.used(x)

    model = Branches().eval()
    reports = []
    calibrated = anyshape.calibrated(model, [correlated_inputs(2, seed=5)], progress=reports.append)
    nearest = reference_model(model, weight_format("int4", 32))
    assert torch.equal(calibrated.unused.weight, nearest.unused.weight)
    assert not torch.equal(calibrated.used.weight, nearest.used.weight)
    assert "unused: rounded to nearest (the samples do not reach it)" in reports, reports
