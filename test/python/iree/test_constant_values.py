"""``constant_values``: a weight kept in its checkpoint's half dtype, read
through a cast to float32 (frontend/checkpoint.py, ``quantized``), evaluated
and erased as the quantizing rewrite does it, in IREE's bindings."""

import numpy as np
import pytest
import torch

from anyshape.dialects import stored_literal
from anyshape.iree.constant_values import erase_if_unused, evaluate, source_key
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


_TWO_FUNCTIONS = """
func.func @first(%x: !torch.vtensor<[4,3],f32>) -> (!torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32>) {
  %w = torch.vtensor.literal(dense_resource<w> : tensor<3x4xbf16>) : !torch.vtensor<[3,4],bf16>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %false = torch.constant.bool false
  %f = torch.aten._to_copy %w, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[3,4],bf16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[3,4],f32>
  %rows = torch.aten.slice.Tensor %f, %int0, %int0, %int2, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,4],f32>
  return %rows, %x : !torch.vtensor<[2,4],f32>, !torch.vtensor<[4,3],f32>
}
func.func @second() -> (!torch.vtensor<[2,4],f32>, !torch.vtensor<[2,4],f32>) {
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %false = torch.constant.bool false
  %w = torch.vtensor.literal(dense_resource<w> : tensor<3x4xbf16>) : !torch.vtensor<[3,4],bf16>
  %f = torch.aten._to_copy %w, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[3,4],bf16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[3,4],f32>
  %rows = torch.aten.slice.Tensor %f, %int0, %int0, %int2, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,4],f32>
  %other = torch.aten.slice.Tensor %f, %int0, %int1, %int3, %int1 : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,4],f32>
  return %rows, %other : !torch.vtensor<[2,4],f32>, !torch.vtensor<[2,4],f32>
}
"""


def test_the_same_weight_in_two_functions_has_one_source_key():
    """/// Each function of a module reads the weights again, through ops of its
    /// own: the quantizer knows a weight it packed before by what it is
    /// computed from (blob names, ops, constant operands), not by hashing its
    /// values. Other rows are another key; an argument has none."""
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(_TWO_FUNCTIONS)
        first, second = (list(f.regions[0].blocks[0].operations)[-1]
                         for f in module.body.operations)
        same = source_key(first.operands[0])
        assert same is not None and same == source_key(second.operands[0])
        assert source_key(second.operands[1]) not in (None, same)
        assert source_key(first.operands[1]) is None  # a function argument
        values = {"w": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).view(torch.int16).numpy()}
        assert np.array_equal(evaluate(first.operands[0], values),
                              evaluate(second.operands[0], values))


def _the_cast(module):
    block = module.body.operations[0].regions[0].blocks[0]
    return next(op for op in block.operations if op.name == "torch.aten._to_copy")
