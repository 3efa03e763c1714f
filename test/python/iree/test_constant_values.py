"""``constant_values``: a weight kept in its checkpoint's half dtype, read
through a cast to float32 (frontend/checkpoint.py, ``quantized``), evaluated
and erased as the quantizing rewrite does it, in IREE's bindings."""

import numpy as np
import pytest
import torch

from anyshape.dialects import stored_literal
from anyshape.iree.constant_values import erase_if_unused, evaluate
from anyshape.mlir import iree_bindings

# Every class of value a half dtype holds: signed zeros, a subnormal, the
# extremes, infinities and a NaN, and ordinary values of both signs.
_VALUES = [0.0, -0.0, 1e-40, 3.0e38, -3.0e38, float("inf"), float("-inf"), float("nan"),
           1.5, -2.75, 0.1, -1e-3]


def _module(element: str) -> str:
    return f"""
func.func @weight() -> !torch.vtensor<[3,4],f32> {{
  %w = torch.vtensor.literal(dense_resource<w> : tensor<3x4x{element}>) : !torch.vtensor<[3,4],{element}>
  %int6 = torch.constant.int 6
  %int15 = torch.constant.int 15
  %none = torch.constant.none
  %false = torch.constant.bool false
  torch.aten._assert_tensor_metadata %w, %none, %none, %int15, %none, %none : !torch.vtensor<[3,4],{element}>, !torch.none, !torch.none, !torch.int, !torch.none, !torch.none
  %f = torch.aten._to_copy %w, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[3,4],{element}>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[3,4],f32>
  return %f : !torch.vtensor<[3,4],f32>
}}
"""


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_blob_cast_to_float32_is_widened_exactly(dtype):
    """/// The importer hands bfloat16 over as its bits (int16) and float16 as
    /// numpy's float16: the widened values are torch's own cast, bit for bit."""
    half = torch.tensor(_VALUES, dtype=dtype).reshape(3, 4)
    stored = half.view(torch.int16).numpy() if dtype == torch.bfloat16 else half.numpy()
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(_module("bf16" if dtype == torch.bfloat16 else "f16"))
        cast = _the_cast(module)
        got = evaluate(cast.result, {"w": stored})
    assert got is not None and got.dtype == np.float32
    want = half.float().numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_blob_of_another_type_than_the_literal_says_is_not_read():
    """/// A bfloat16 literal whose array is not its bits (float32 here) gives
    /// None, and the product keeps its float32 weight, not wrong values."""
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(_module("bf16"))
        cast = _the_cast(module)
        assert evaluate(cast.result, {"w": np.zeros((3, 4), np.float32)}) is None
        assert evaluate(cast.result, {}) is None


def test_a_quantized_weight_takes_its_blob_and_the_metadata_assertion_with_it():
    """/// torch.export asserts the dtype of what .to() casts: once the cast is
    /// read by nothing, the assertion must not keep the blob in the module;
    /// the constants the cast reads several times (%none) are erased once."""
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(_module("bf16"))
        cast = _the_cast(module)
        literal = stored_literal(cast.result)
        assert literal is not None and literal.name == "torch.vtensor.literal"
        ret = list(module.body.operations[0].regions[0].blocks[0].operations)[-1]
        with ir.InsertionPoint(ret), ret.location:
            zero = ir.Operation.create("torch.vtensor.literal", results=[cast.result.type],
                                       attributes={"value": ir.DenseElementsAttr.get_splat(
                                           ir.RankedTensorType.get([3, 4], ir.F32Type.get()),
                                           ir.FloatAttr.get(ir.F32Type.get(), 0.0))}).result
        ret.operands[0] = zero
        erase_if_unused(cast.result)
        text = str(module)
    assert "_assert_tensor_metadata" not in text
    assert "_to_copy" not in text
    assert "dense_resource<w>" not in text


def test_a_weight_read_elsewhere_is_kept():
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(_module("bf16"))
        cast = _the_cast(module)
        erase_if_unused(cast.result)  # the function still returns it
        text = str(module)
    assert "_to_copy" in text and "_assert_tensor_metadata" in text


def _the_cast(module):
    block = module.body.operations[0].regions[0].blocks[0]
    return next(op for op in block.operations if op.name == "torch.aten._to_copy")
