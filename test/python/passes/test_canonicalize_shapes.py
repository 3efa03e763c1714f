"""anyshape-canonicalize-shapes + anyshape-lower on models built to exercise each rewrite."""

import pytest
import torch
from models import encoder_pattern_case, shape_queries_case

import anyshape


@pytest.fixture(scope="module")
def encoder():
    model, args, dynamic = encoder_pattern_case()
    return model, anyshape.compile(model, args, dynamic_shapes=dynamic)


def test_default_pipeline_stages(encoder):
    _, compiled = encoder
    # Data tiling (automatic on CPU) adds its forms pass after the hoisting.
    assert compiled.stages == ["import", "anyshape-canonicalize-shapes", "anyshape-hoist-slices",
                               "anyshape-data-tiling-forms", "anyshape-defer-softmax-normalization",
                               "anyshape-logsumexp-softmax", "anyshape-lower", "iree-input"]


def test_arange_becomes_iota_and_lowers(encoder):
    _, compiled = encoder
    imported = compiled.ir("import")
    canonical = compiled.ir("anyshape-canonicalize-shapes")
    lowered = compiled.ir("anyshape-lower")
    print(f"aranges: import {imported.count('torch.aten.arange')}, "
          f"after canonicalize {canonical.count('torch.aten.arange')}")
    assert imported.count("torch.aten.arange") >= 1
    assert canonical.count("torch.aten.arange") == 0
    # The positions' iota is read as a slice of the table; the mask's stays.
    assert canonical.count('"anyshape.iota_like"') >= 1
    # No anyshape op is left (ops print generically, quoted); the anyshape.dims
    # argument attributes stay.
    assert '"anyshape.' not in lowered and "linalg.index" in lowered


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("length", [1, 2, 9, 33, 64])
def test_encoder_pattern_matches_eager(encoder, batch, length):
    model, compiled = encoder
    x = torch.randn(batch, length, 16)
    valid = torch.randint(1, length + 1, (batch,))
    torch.testing.assert_close(compiled(x, valid), model(x, valid).detach(), atol=1e-5, rtol=1e-5)


def test_shape_queries_with_and_without_passes(shape_queries):
    model, with_passes = shape_queries
    _, args, dynamic = shape_queries_case()
    without = anyshape.compile(model, args, dynamic_shapes=dynamic, passes=[])
    assert without.stages == ["import", "iree-input"]
    for length in (1, 5, 40, 64):
        x = torch.randn(2, length, 8)
        expected = model(x).detach()
        torch.testing.assert_close(with_passes(x), expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(without(x), expected, atol=1e-5, rtol=0)
