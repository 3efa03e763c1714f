"""Calls that do not fit the compiled signature raise ValueError naming what and why."""

import numpy as np
import pytest
import torch
from models import roberta_inputs

from conftest import MAX_LEN


@pytest.fixture
def good():
    return roberta_inputs(2, 6)


def test_too_many_arguments(compiled_roberta, good):
    ids, mask = good
    with pytest.raises(ValueError, match=r"expected at most 2 arguments \(input_ids, attention_mask\), got 3"):
        compiled_roberta(ids, mask, mask)


def test_missing_argument(compiled_roberta, good):
    with pytest.raises(ValueError, match=r"missing argument\(s\) attention_mask"):
        compiled_roberta(good[0])


def test_unknown_keyword(compiled_roberta, good):
    ids, mask = good
    with pytest.raises(ValueError, match="unexpected argument 'token_type_ids'"):
        compiled_roberta(ids, attention_mask=mask, token_type_ids=mask)


def test_wrong_dtype(compiled_roberta, good):
    ids, mask = good
    with pytest.raises(ValueError, match="argument 'attention_mask': expected dtype int64, got float32"):
        compiled_roberta(ids, attention_mask=mask.float())
    with pytest.raises(ValueError, match="argument 'input_ids': expected dtype int64, got int32"):
        compiled_roberta(ids.numpy().astype(np.int32), attention_mask=mask)


def test_wrong_rank(compiled_roberta, good):
    ids, mask = good
    with pytest.raises(ValueError, match=r"argument 'input_ids': expected rank 2 \(s\d+, s\d+\), got rank 1 \(6,\)"):
        compiled_roberta(ids[0], attention_mask=mask)


def test_length_out_of_range(compiled_roberta):
    ids, mask = roberta_inputs(1, MAX_LEN + 1)
    with pytest.raises(ValueError, match=rf"argument 'input_ids' dim 1: expected a size with 'seq' in \[1, {MAX_LEN}\], got {MAX_LEN + 1}"):
        compiled_roberta(ids, attention_mask=mask)


def test_batch_out_of_range(compiled_roberta):
    ids, mask = roberta_inputs(5, 4)
    with pytest.raises(ValueError, match=r"argument 'input_ids' dim 0: expected a size with 'batch' in \[1, 4\], got 5"):
        compiled_roberta(ids, attention_mask=mask)


def test_shared_dim_mismatch(compiled_roberta, good):
    ids, mask = good
    with pytest.raises(ValueError, match=r"argument 'attention_mask' dim 1: must equal argument 'input_ids' dim 1 \(both are 'seq' in \[1, \d+\]\), expected 6, got 5"):
        compiled_roberta(ids, attention_mask=mask[:, :5])


def test_not_a_tensor(compiled_roberta, good):
    with pytest.raises(TypeError, match="argument 'input_ids': expected a torch.Tensor or numpy.ndarray, got list"):
        compiled_roberta([[1, 2]], attention_mask=good[1])


def test_static_dim(tmp_path):
    import anyshape

    model = torch.nn.Linear(4, 3)
    compiled = anyshape.compile(model.eval(), (torch.randn(2, 4),),
                                dynamic_shapes={"input": {0: torch.export.Dim("rows", max=16)}})
    with pytest.raises(ValueError, match=r"argument 'input' dim 1: expected size 4 \(static\), got 5"):
        compiled(torch.randn(2, 5))
    x = torch.randn(9, 4)
    torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)
