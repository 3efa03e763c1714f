"""dtype=: a model compiled in float16 (weights and activations), against eager in float16."""

import pytest
import torch
from models import roberta_inputs, shape_queries_case, small_roberta
from torch.export import Dim

import anyshape


@pytest.fixture(scope="module")
def roberta_fp16():
    model = small_roberta(layers=2, hidden=64, max_positions=66)
    ids, mask = roberta_inputs(2, 8)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=64)
    compiled = anyshape.compile(model, (ids,), {"attention_mask": mask}, dtype=torch.float16,
                                dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                "attention_mask": {0: batch, 1: seq}})
    return model, compiled


@pytest.mark.parametrize("length", [1, 17, 64])
@pytest.mark.builds_after_export
def test_float16_matches_eager_float16(roberta_fp16, length):
    model, compiled = roberta_fp16
    ids, mask = roberta_inputs(3, length, pad_from=length // 2 + 1, seed=length)
    half = _half_copy(model)
    with torch.no_grad():
        expected = half(ids, attention_mask=mask).logits
    got = compiled(ids, attention_mask=mask).logits
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.float(), expected.float(), atol=1e-2, rtol=0)


def _half_copy(model):
    import copy

    return copy.deepcopy(model).half().eval()


@pytest.mark.builds_after_export
def test_callers_model_is_left_in_float32(roberta_fp16):
    model, _ = roberta_fp16
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_float_inputs_take_the_dtype():
    model, args, dynamic = shape_queries_case()
    compiled = anyshape.compile(model, args, dynamic_shapes=dynamic, dtype=torch.float16)
    assert compiled.signature.inputs[0].dtype == "float16"
    x = torch.randn(3, 11, 8)
    with torch.no_grad():
        expected = _half_copy(model)(x.half())
    torch.testing.assert_close(compiled(x.half()).float(), expected.float(), atol=1e-2, rtol=0)
    with pytest.raises(ValueError, match="argument 'x': expected dtype float16, got float32"):
        compiled(x)


@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16, "float16"])
def test_bad_dtype_is_named(dtype):
    model, args, dynamic = shape_queries_case()
    with pytest.raises(ValueError, match="dtype: expected one of torch.float32, torch.float16 "
                                         r"\(or None"):
        anyshape.compile(model, args, dynamic_shapes=dynamic, dtype=dtype)
