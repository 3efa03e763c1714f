# RUN: %PYTHON %s | FileCheck %s

# Complex values made and used inside the graph become real pairs
# (anyshape/frontend/graph_fixes/complex_as_pairs.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402
from torch.export import Dim  # noqa: E402


class Rotation(torch.nn.Module):
    def forward(self, x, angles):
        pairs = torch.view_as_complex(x)
        return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles))


# /// IREE refuses complex element types: polar is (cos, sin) as a trailing
# /// pair, and the product (ac - bd, ad + bc), all in f32.
# CHECK-LABEL: // CASE: rotation_by_polar
# CHECK-NOT: complex
# CHECK: %[[COS:.+]] = torch.aten.cos %arg1
# CHECK: %[[SIN:.+]] = torch.aten.sin %arg1
# CHECK: torch.aten.cat
# CHECK: torch.aten.sub.Tensor
# CHECK: torch.aten.add.Tensor
# CHECK: %[[PRODUCT:.+]] = torch.aten.cat {{.+}} -> !torch.vtensor<[?,4,2],f32>
# CHECK-NOT: complex
# CHECK: return %[[PRODUCT]]
show("rotation_by_polar", Rotation(), (torch.randn(3, 4, 2), torch.randn(3, 4)),
     ({0: Dim("rows")}, {0: Dim("rows")}))


class ComplexResult(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x) * 2


# /// A complex value the graph returns cannot be a pair: left as it was.
# CHECK-LABEL: // CASE: negative_complex_result
# CHECK: torch.aten.view_as_complex
# CHECK: !torch.vtensor<[3,4],complex<f32>>
show("negative_complex_result", ComplexResult(), (torch.randn(3, 4, 2),))
