# RUN: %PYTHON %s | FileCheck %s

# Integer negation and dims counted from the end, as anyshape imports them
# (anyshape/frontend/graph_fixes/integer_negation.py, anyshape/frontend/graph_fixes/nonnegative_dims.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402


class Negate(torch.nn.Module):
    def forward(self, a, b, x):
        return -a, -b, -x


# /// torch-mlir negates integers through float32 (-(2**40 + 7) came back
# /// -2**40): int64 and int32 negation becomes a multiply by -1; a float's stays.
# CHECK-LABEL: // CASE: negation
# CHECK: func.func @main(%[[A:.+]]: !torch.vtensor<[3],si64>, %[[B:.+]]: !torch.vtensor<[3],si32>, %[[X:.+]]: !torch.vtensor<[3],f32>)
# CHECK: %[[M1:.+]] = torch.constant.int -1
# CHECK: torch.aten.mul.Scalar %[[A]], %[[M1]] : !torch.vtensor<[3],si64>, !torch.int
# CHECK: %[[M2:.+]] = torch.constant.int -1
# CHECK: torch.aten.mul.Scalar %[[B]], %[[M2]] : !torch.vtensor<[3],si32>, !torch.int
# CHECK: torch.aten.neg %[[X]] : !torch.vtensor<[3],f32>
show("negation", Negate(), (torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3], dtype=torch.int32),
                            torch.randn(3)))


class MaskFirstExpert(torch.nn.Module):
    def forward(self, scores, experts):
        return torch.scatter(scores, -1, experts, float("-inf"))


# /// torch-mlir's scatter lowering crashed iree-compile at dim -1 (PhiMoE's
# /// router): the dim is counted from the front.
# CHECK-LABEL: // CASE: scatter_at_dim_minus_1
# CHECK: %[[DIM:.+]] = torch.constant.int 1
# CHECK: torch.aten.scatter.value %{{.+}}, %[[DIM]], %{{.+}}, %{{.+}} : !torch.vtensor<[4,8],f32>, !torch.int
show("scatter_at_dim_minus_1", MaskFirstExpert(),
     (torch.randn(4, 8), torch.randint(0, 8, (4, 2))))


class GatherLast(torch.nn.Module):
    def forward(self, scores, experts):
        return torch.gather(scores, -1, experts)


# /// gather lowers right at a negative dim: left as it is.
# CHECK-LABEL: // CASE: negative_gather_at_dim_minus_1
# CHECK: %[[DIM:.+]] = torch.constant.int -1
# CHECK: torch.aten.gather %{{.+}}, %[[DIM]]
show("negative_gather_at_dim_minus_1", GatherLast(),
     (torch.randn(4, 8), torch.randint(0, 8, (4, 2))))
