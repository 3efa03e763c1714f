"""PT2E's quantize/dequantize ops at dynamic sizes, against eager (frontend/quantized_ops.py).

The ops PyTorch's quantization flows leave in an exported graph, written here
as a converted model holds them: int8 weights dequantized before a linear,
activations quantized per tensor or per token.
"""

import pytest
import torch
from torch.ao.quantization.fx import _decomposed  # noqa: F401  (defines the ops)
from torch.export import Dim

import anyshape

quantized = torch.ops.quantized_decomposed
SIZES = [(1, 1), (3, 7), (2, 17), (1, 65)]


class PerTensorLinear(torch.nn.Module):
    """A converted int8 linear: activations and weight quantized per tensor."""

    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.randint(-127, 128, (24, 16), dtype=torch.int8))
        self.bias = torch.nn.Parameter(torch.randn(24))

    def forward(self, x):
        q = quantized.quantize_per_tensor(x, 0.02, 3, -128, 127, torch.int8)
        x = quantized.dequantize_per_tensor(q, 0.02, 3, -128, 127, torch.int8)
        w = quantized.dequantize_per_tensor(self.weight, 0.01, 0, -127, 127, torch.int8)
        return q, torch.nn.functional.linear(x, w, self.bias)


class PerTokenPerChannel(torch.nn.Module):
    """Dynamic activations quantized per token, weights per output channel."""

    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.randint(-127, 128, (24, 16), dtype=torch.int8))
        self.register_buffer("scales", torch.rand(24) * 0.02 + 0.001)
        self.register_buffer("zero_points", torch.zeros(24, dtype=torch.int64))

    def forward(self, x):
        scales, zero_points = quantized.choose_qparams_per_token_asymmetric(x, torch.int8)
        q = quantized.quantize_per_token(x, scales, zero_points, -128, 127, torch.int8)
        x = quantized.dequantize_per_token(q, scales, zero_points, -128, 127, torch.int8,
                                           torch.float32)
        w = quantized.dequantize_per_channel(self.weight, self.scales, self.zero_points, 0,
                                             -127, 127, torch.int8)
        return q, torch.nn.functional.linear(x, w)


@pytest.mark.parametrize("model", [PerTensorLinear, PerTokenPerChannel])
def test_per_tensor_quantization_matches_eager(model):
    model = model().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 5, 16),),
                                dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    for batch, length in SIZES:
        x = torch.randn(batch, length, 16) * 2
        (q, y), (want_q, want_y) = compiled(x), model(x)
        assert q.dtype == torch.int8
        # The same round-half-even of the same float32 product: equal integers.
        torch.testing.assert_close(q, want_q, rtol=0, atol=0)
        torch.testing.assert_close(y, want_y, rtol=1e-5, atol=1e-5)


class QuantizedTensorType(torch.nn.Module):
    def forward(self, x):
        return torch.int_repr(torch.quantize_per_tensor(x, 0.1, 3, torch.qint8))


def test_negative_a_quantized_tensor_type_is_refused_with_the_ops_that_compile():
    """torch.export cannot trace qint8 tensors: the error says what to write instead."""
    with pytest.raises(anyshape.CompileError) as caught:
        anyshape.compile(QuantizedTensorType().eval(), (torch.randn(2, 5),),
                         dynamic_shapes={"x": {1: Dim("seq")}})
    message = str(caught.value)
    assert "UnsupportedOperatorException" in message and "aten.int_repr" in message
    assert "torch.ops.quantized_decomposed" in message
