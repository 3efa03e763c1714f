"""``data_tiling=True``: IREE's data tiling on the slice-hoisted model, exact
against eager at dynamic sizes (``anyshape-data-tiling-forms`` runs first)."""

import pytest
import torch
from conftest import MAX_LEN
from models import roberta_inputs

import anyshape


@pytest.fixture(scope="module")
def tiled(roberta, roberta_dynamic_shapes):
    ids, mask = roberta_inputs(2, 8)
    return anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                            dynamic_shapes=roberta_dynamic_shapes, data_tiling=True)


def test_forms_pass_runs_after_hoisting(tiled):
    stages = tiled.stages
    assert stages.index("anyshape-data-tiling-forms") == stages.index("anyshape-hoist-slices") + 1
    assert "--iree-opt-data-tiling" in tiled.iree_flags
    forms = tiled.ir("anyshape-data-tiling-forms")
    # The last layer's one-row attention products are no batch matmuls any more.
    assert "!torch.vtensor<[?,1,?],f32>" in tiled.ir("anyshape-hoist-slices")
    assert "-> !torch.vtensor<[?,1,?],f32>" not in forms


@pytest.mark.parametrize("batch,length", [(1, 1), (1, 17), (3, 60), (2, MAX_LEN)])
def test_data_tiled_matches_eager(roberta, tiled, batch, length):
    ids, mask = roberta_inputs(batch, length, pad_from=length // 2 if batch > 1 else None)
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask).logits
    torch.testing.assert_close(tiled(ids, attention_mask=mask).logits, expected, atol=1e-4, rtol=1e-4)


def test_data_tiling_must_be_a_bool(roberta):
    ids, mask = roberta_inputs(1, 4)
    with pytest.raises(ValueError, match=r"data_tiling: expected True or False, got 'yes'"):
        anyshape.compile(roberta, (ids,), {"attention_mask": mask}, data_tiling="yes")
