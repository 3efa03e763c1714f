"""PT2E's quantize and dequantize ops as the integer arithmetic they are.

``torch.ao.quantization``'s PT2E flow (and hand-written int8 weights with
``torch.ops.quantized_decomposed.dequantize_per_tensor``) leaves
``quantized_decomposed`` ops in the exported graph. torch-mlir matches them to
its quantized types, and IREE 3.13 cannot compile the per-tensor ones at all,
static shapes too ("failed to legalize operation 'util.initializer'"). Each op
has a reference implementation in PyTorch (its CompositeExplicitAutograd
kernel: a scale, a round, a clamp and a cast); exported through it, the graph
holds only those elementwise ops, and computes what eager computes.
"""

from __future__ import annotations

import torch

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name='quantized_decomposed_as_arithmetic', stage='export',
    where='decompositions (decomposition_table)',
    upstream="IREE 3.13 fails on torch-mlir's lowering of quantized_decomposed."
             "quantize_per_tensor and dequantize_per_tensor (\"failed to legalize operation "
             "'util.initializer' that was explicitly marked illegal\"), static shapes too.",
    guard='test/python/frontend/test_quantized_ops.py::'
          'test_per_tensor_quantization_matches_eager',
    remove_when="IREE compiles torch-mlir's quantized per-tensor ops"),)

# The ops PT2E's quantizers and converters emit; each overload's reference
# kernel is the function of that name in torch.ao.quantization.fx._decomposed
# (with "_<overload>" for overloads other than "default").
_OPS = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
        "dequantize_per_channel", "quantize_per_token", "dequantize_per_token",
        "quantize_per_channel_group", "dequantize_per_channel_group",
        "choose_qparams", "choose_qparams_symmetric", "choose_qparams_per_token",
        "choose_qparams_per_token_asymmetric")


def decompositions() -> dict:
    """Each ``quantized_decomposed`` overload to its reference kernel."""
    from torch.ao.quantization.fx import _decomposed as reference  # defines the ops

    table = {}
    namespace = torch.ops.quantized_decomposed
    for name in _OPS:
        packet = getattr(namespace, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            kernel = getattr(reference, name if overload == "default" else f"{name}_{overload}",
                             None)
            if callable(kernel):
                table[getattr(packet, overload)] = kernel
    return table
