# RUN: %PYTHON %s | FileCheck %s

# Rewrites and refusals of the exported graph for scalars computed from sizes
# and ops torch-mlir lowers wrongly (anyshape/frontend/graph_fixes/symbolic_scalars.py,
# rank0_softmax.py, checked_det.py, stable_logcumsumexp.py, wrong_lowerings.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402
from torch.export import Dim  # noqa: E402


class ScaledBySize(torch.nn.Module):
    def forward(self, x):
        return x * x.shape[-1] ** 0.5, x * (x.shape[-1] % 3)


# /// torch-mlir refuses pow of a size and imports % as a truncating fmod: the
# /// square root is sqrt.int, and % is floor division's remainder.
# CHECK-LABEL: // CASE: scalars_from_a_size
# CHECK: %[[N:.+]] = torch.aten.size.int %arg0, %{{.+}}
# CHECK: %[[ROOT:.+]] = torch.aten.sqrt.int %[[N]] : !torch.int -> !torch.float
# CHECK: torch.aten.scalar_tensor %[[ROOT]]
# CHECK: %[[QUOTIENT:.+]] = torch.aten.floordiv.int %[[N]], %{{.+}}
# CHECK: %[[MULTIPLE:.+]] = torch.aten.mul.int %{{.+}}, %[[QUOTIENT]]
# CHECK: torch.aten.sub.int %[[N]], %[[MULTIPLE]]
# CHECK-NOT: fmod
show("scalars_from_a_size", ScaledBySize(), (torch.randn(2, 5),), ({1: Dim("n")},))


class SoftmaxOfOne(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, 0)


# /// IREE never finishes a 0-d softmax: over one element it is exp(x - x).
# CHECK-LABEL: // CASE: softmax_of_a_0d_tensor
# CHECK-NOT: softmax
# CHECK: %[[ZERO:.+]] = torch.aten.sub.Tensor %arg0, %arg0
# CHECK: torch.aten.exp %[[ZERO]] : !torch.vtensor<[],f32>
show("softmax_of_a_0d_tensor", SoftmaxOfOne(), (torch.tensor(3.0),))


class Determinant(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.det(x)


# /// torch-mlir's det has no row pivoting (NaN at a zero pivot): the result is
# /// asserted a number wherever the matrix is finite.
# CHECK-LABEL: // CASE: determinant_checked
# CHECK: %[[DET:.+]], %{{.+}}, %{{.+}} = torch.aten._linalg_det %arg0
# CHECK: torch.aten.eq.Tensor %[[DET]], %[[DET]]
# CHECK: torch.aten._assert_scalar %{{.+}}, %{{.+}} : !torch.int, !torch.str
show("determinant_checked", Determinant(), (torch.randn(3, 3),))


class CumulativeLogSumExp(torch.nn.Module):
    def forward(self, x):
        return torch.logcumsumexp(x, 0)


# /// torch-mlir's log(cumsum(exp(x))) overflows past exp's range: prefix sums of
# /// stable logaddexp steps (max + log1p(exp(-|a - b|))).
# CHECK-LABEL: // CASE: logcumsumexp_stable
# CHECK-NOT: torch.aten.logcumsumexp
# CHECK: torch.aten.maximum
# CHECK: torch.aten.log1p
show("logcumsumexp_stable", CumulativeLogSumExp(), (torch.randn(4),))


class WeightedBags(torch.nn.Module):
    def forward(self, weight, indices, offsets, per_sample_weights):
        return torch.nn.functional.embedding_bag(indices, weight, offsets, mode="sum",
                                                 per_sample_weights=per_sample_weights)


# /// torch-mlir ignores embedding_bag's per-sample weights: refused by name.
# CHECK-LABEL: // CASE: negative_embedding_bag_with_weights
# CHECK: // ERROR: stage 'import' failed: embedding_bag with per_sample_weights: torch-mlir's lowering ignores the weights
# CHECK-NOT: module
show("negative_embedding_bag_with_weights", WeightedBags(),
     (torch.randn(5, 3), torch.tensor([0, 2, 4]), torch.tensor([0, 2]), torch.rand(3)))
