# RUN: %PYTHON %s | FileCheck %s

# pow at the inputs where IREE's exp(y * log(x)) expansion is wrong, as anyshape
# imports it (anyshape/frontend/graph_fixes/edge_value_math.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402


class Power(torch.nn.Module):
    def forward(self, x, y):
        return torch.pow(x, y)


# /// IREE computes pow as exp(y * log(x)): 0 or NaN for every negative base
# /// ((-2.0) ** 3 is -8). The power of |x| is taken, its sign restored for a
# /// negative base and an odd integer exponent, 0 ** y given its value apart.
# CHECK-LABEL: // CASE: pow_of_any_base
# CHECK: func.func @main(%[[X:.+]]: !torch.vtensor<[3],f32>, %[[Y:.+]]: !torch.vtensor<[3],f32>)
# CHECK: %[[MAGNITUDE:.+]] = torch.aten.abs %[[X]]
# CHECK: %[[POWER:.+]] = torch.aten.pow.Tensor_Tensor %[[MAGNITUDE]], %[[Y]]
# CHECK: %[[INTEGER:.+]] = torch.aten.trunc %[[Y]]
# CHECK: torch.aten.eq.Tensor %[[Y]], %[[INTEGER]]
# CHECK: torch.aten.neg
show("pow_of_any_base", Power(), (torch.randn(3), torch.randn(3)))
