# RUN: %PYTHON %s | FileCheck %s

# torch.export's _assert_tensor_metadata on a complex tensor, dropped where the
# graph's own types prove it (anyshape/frontend/graph_fixes/tensor_metadata_asserts.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402
from torch.export import Dim  # noqa: E402


class ComplexRotary(torch.nn.Module):
    """Llama 4's rotary embedding: a complex buffer moved with .to(x.device)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("freqs", torch.polar(torch.ones(64, 2), torch.ones(64, 2)))

    def forward(self, x):
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * self.freqs[: x.shape[1]].to(x.device)).flatten(-2)


# /// torch-mlir refused the complex dtype's metadata assert ("Failed to
# /// canonicalize the _assert_tensor_metadata op"); the fake values prove it, so
# /// it is dropped and the complex product stays.
# CHECK-LABEL: // CASE: complex_buffer_to_device
# CHECK-NOT: _assert_tensor_metadata
# CHECK: torch.aten.mul.Tensor {{.+}} -> !torch.vtensor<[?,?,2],complex<f32>>
show("complex_buffer_to_device", ComplexRotary(), (torch.randn(2, 16, 4),),
     ({0: Dim("batch"), 1: Dim("seq", max=64)},))
