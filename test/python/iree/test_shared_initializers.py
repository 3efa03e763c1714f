"""Initializers computing the same value share one global (iree/shared_initializers.py).

The module below is the shape of IREE's flow phase for a weight two functions
use: each function's concatenation of two parameters hoisted into an
initializer of its own, and each function's packing of that concatenation
into another. The rewrite must leave one of each, every load reading it, and
must not merge what could differ (a mutable global read, a different body).
"""

from __future__ import annotations

import re

from anyshape.iree.shared_initializers import share_identical_initializers
from anyshape.mlir import iree_bindings

_CONCATENATION = """
  util.initializer {{
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %a = util.global.load immutable @a : tensor<4x8xf32>
    %b = util.global.load {immutable}@{second} : tensor<4x8xf32>
    %0 = flow.tensor.empty : tensor<8x8xf32>
    %1 = flow.tensor.update %a, %0[%c0, %c0] : tensor<4x8xf32> -> %0 as tensor<8x8xf32>
    %2 = flow.tensor.update %b, %1[%c4, %c0] : tensor<4x8xf32> -> %1 as tensor<8x8xf32>
    util.global.store %2, @{name} : tensor<8x8xf32>
    util.return
  }}"""
_RESHAPED = """
  util.initializer {{
    %0 = util.global.load immutable @{source} : tensor<8x8xf32>
    %1 = flow.tensor.reshape %0 : tensor<8x8xf32> -> tensor<2x4x8xf32>
    util.global.store %1, @{name} : tensor<2x4x8xf32>
    util.return
  }}"""


def _module(second_of_copy: str = "b", second: str = "b") -> str:
    read = {name: "" if name == "m" else "immutable " for name in ("a", "b", "m")}
    return f"""
module {{
  util.global private @a = #flow.parameter.named<"model"::"a"> : tensor<4x8xf32>
  util.global private @b = #flow.parameter.named<"model"::"b"> : tensor<4x8xf32>
  util.global private mutable @m : tensor<4x8xf32>
  util.global private @cat : tensor<8x8xf32>
  util.global private @cat_copy : tensor<8x8xf32>
  util.global private @packed : tensor<2x4x8xf32>
  util.global private @packed_copy : tensor<2x4x8xf32>
  {_CONCATENATION.format(second=second, immutable=read[second], name="cat")}
  {_RESHAPED.format(source="cat", name="packed")}
  {_CONCATENATION.format(second=second_of_copy, immutable=read[second_of_copy],
                         name="cat_copy")}
  {_RESHAPED.format(source="cat_copy", name="packed_copy")}
  util.func public @step() -> tensor<2x4x8xf32> {{
    %0 = util.global.load immutable @packed : tensor<2x4x8xf32>
    util.return %0 : tensor<2x4x8xf32>
  }}
  util.func public @decode() -> tensor<2x4x8xf32> {{
    %0 = util.global.load immutable @packed_copy : tensor<2x4x8xf32>
    util.return %0 : tensor<2x4x8xf32>
  }}
}}"""


def _shared(text: str) -> tuple[int, str]:
    ir = iree_bindings()
    with ir.Context():
        module = ir.Module.parse(text)
        shared = share_identical_initializers(ir, module)
        assert module.operation.verify()
        return shared, str(module)


def test_a_value_computed_twice_is_kept_once_and_read_by_both_functions():
    """/// The concatenations are equal; then so are the packings of them."""
    shared, text = _shared(_module())
    assert shared == 2
    assert "@cat_copy" not in text and "@packed_copy" not in text
    assert text.count("util.initializer") == 2
    decode = text.split("util.func public @decode", 1)[1]
    assert re.search(r"util.global.load immutable @packed\b", decode)


def test_negative_a_mutable_global_read_is_not_shared():
    """/// Two initializers reading a mutable global may see two values."""
    shared, text = _shared(_module(second="m", second_of_copy="m"))
    assert shared == 0
    assert text.count("util.initializer") == 4


def test_negative_different_operands_are_not_shared():
    """/// The copy concatenates @a with itself: another value."""
    shared, text = _shared(_module(second_of_copy="a"))
    assert shared == 0
    assert "@packed_copy" in text
