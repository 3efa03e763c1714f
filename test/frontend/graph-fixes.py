# RUN: %PYTHON %s | FileCheck %s

# Rewrites of the exported graph before torch-mlir imports it, each in the form
# anyshape imports: slices of a whole dim, sorts as packed keys, constants
# computed, casts to unsigned integers, segment reductions onto their identity,
# reads by a boolean mask (anyshape/frontend/graph_fixes/whole_dim_slices.py,
# packed_sort_keys.py, constant_subexpressions.py, unsigned_casts.py,
# scatter_reduce_without_self.py, boolean_mask_reads.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402
from torch.export import Dim  # noqa: E402

DIMS = {0: Dim("batch"), 1: Dim("seq")}


class MaskToLength(torch.nn.Module):
    def forward(self, h, mask):
        return h * mask[:, -h.shape[1]:][:, :, None]


# /// LFM2/3's mask sliced to the hidden states' length keeps the whole mask;
# /// its dynamic start made IREE fail on the fused RMSNorm. The mask is used
# /// as it is.
# CHECK-LABEL: // CASE: slice_of_the_whole_length
# CHECK: func.func @main(%[[H:.+]]: !torch.vtensor<[?,?,8],f32>, %[[MASK:.+]]: !torch.vtensor<[?,?],si64>)
# CHECK-NOT: torch.aten.slice.Tensor
# CHECK: %[[COLUMN:.+]] = torch.aten.unsqueeze %[[MASK]]
# CHECK: torch.aten.mul.Tensor %[[H]], %[[COLUMN]]
show("slice_of_the_whole_length", MaskToLength(),
     (torch.randn(2, 16, 8), torch.ones(2, 16, dtype=torch.int64)), (DIMS, DIMS))


class FirstColumn(torch.nn.Module):
    def forward(self, mask):
        return mask[:, :1]


# /// A slice that drops elements stays.
# CHECK-LABEL: // CASE: negative_slice_of_part
# CHECK: torch.aten.slice.Tensor
show("negative_slice_of_part", FirstColumn(), (torch.ones(2, 16, dtype=torch.int64),), (DIMS,))


class Top2(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 2).indices


# /// IREE's sort puts NaN anywhere and gave two sorts of one shape one index
# /// buffer: topk sorts int64 keys (order-preserving bits, then the position),
# /// and the indices are the keys' low 32 bits.
# CHECK-LABEL: // CASE: topk_as_packed_keys
# CHECK-NOT: torch.aten.topk
# CHECK: %[[KEYS:.+]] = torch.aten.add.Tensor %{{.+}}, %{{.+}}, %{{.+}} : !torch.vtensor<[3,6],si64>, !torch.vtensor<[1,6],si64>
# CHECK: %[[SORTED:.+]], %{{.+}} = torch.aten.sort %[[KEYS]]
# CHECK: %[[LOW:.+]] = torch.constant.int 4294967295
# CHECK: torch.aten.bitwise_and.Scalar %[[SORTED]], %[[LOW]]
show("topk_as_packed_keys", Top2(), (torch.randn(3, 6),))


class Cutoff(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x - torch.erfinv(torch.tensor(0.8)))


# /// IREE has no erfinv, and reported the literal it was applied to: an op on
# /// constants only is computed by torch (erfinv(0.8) = 0.906193852).
# CHECK-LABEL: // CASE: erfinv_of_a_constant
# CHECK-NOT: erfinv
# CHECK: %[[CUTOFF:.+]] = torch.vtensor.literal(dense<0.906193{{[0-9]*}}> : tensor<f32>)
# CHECK: torch.aten.sub.Tensor %{{.+}}, %[[CUTOFF]]
show("erfinv_of_a_constant", Cutoff(), (torch.randn(3),))


class ToBytes(torch.nn.Module):
    def forward(self, x):
        return (x * 250).to(torch.uint8), x.to(torch.int32)


# /// torch-mlir converts a float to uint8 as to a signed byte (152 came back
# /// 127): through int64. A cast to a signed type is left alone.
# CHECK-LABEL: // CASE: float_to_unsigned_through_int64
# CHECK: %[[WIDE:.+]] = torch.prims.convert_element_type %{{.+}}, %{{.+}} : !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],si64>
# CHECK: torch.aten._to_copy %[[WIDE]], {{.+}} -> !torch.vtensor<[3],ui8>
# CHECK-NOT: si64
# CHECK: -> !torch.vtensor<[3],si32>
show("float_to_unsigned_through_int64", ToBytes(), (torch.rand(3),))


class RowsFromTheEnd(torch.nn.Module):
    def __init__(self, rows):
        super().__init__()
        self.register_buffer("bias", torch.randn(4, rows, 8))

    def forward(self, x):
        return self.bias[:, max(0, self.bias.size(1) - x.size(1)):] * 2


# /// MPT's one-row ALiBi bias sliced from max(0, 1 - seq): one row at every
# /// length, which torch records as 1 - Max(0, 1 - seq). Imported as the static
# /// 1 it is, so that torch-mlir broadcasts it instead of taking it for seq.
# CHECK-LABEL: // CASE: constant_sizes_one_row_at_every_length
# CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[4,1,8],f32>
# CHECK: torch.aten.mul.Scalar {{.*}} -> !torch.vtensor<[4,1,8],f32>
show("constant_sizes_one_row_at_every_length", RowsFromTheEnd(1), (torch.randn(2, 16),),
     ({0: Dim("batch"), 1: Dim("seq")},))

# /// Three rows from the end are min(3, seq) rows: that size stays dynamic.
# CHECK-LABEL: // CASE: negative_constant_sizes_rows_that_vary
# CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[4,?,8],f32>
show("negative_constant_sizes_rows_that_vary", RowsFromTheEnd(3), (torch.randn(2, 16),),
     ({0: Dim("batch"), 1: Dim("seq")},))


class SegmentMin(torch.nn.Module):
    def __init__(self, include_self):
        super().__init__()
        self.include_self = include_self

    def forward(self, values, segments):
        return torch.zeros(8).scatter_reduce(0, segments, values, reduce="amin",
                                             include_self=self.include_self)


# /// torch-mlir's two-scatter lowering of include_self=False did not compile at
# /// a dynamic size (TAPAS's segment minimum): the source is reduced onto the
# /// identity, +inf, and kept where a count by scatter_add says some value landed.
# CHECK-LABEL: // CASE: scatter_reduce_without_self
# CHECK: %[[COUNTS:.+]] = torch.aten.scatter_add
# CHECK: %[[HIT:.+]] = torch.aten.gt.Scalar %[[COUNTS]]
# CHECK: %[[BASE:.+]] = torch.aten.full_like
# CHECK: %[[TRUE:.+]] = torch.constant.bool true
# CHECK: %[[REDUCED:.+]] = torch.aten.scatter_reduce.two %[[BASE]], {{.+}}, %[[TRUE]]
# CHECK: torch.aten.where.self %[[HIT]], %[[REDUCED]]
show("scatter_reduce_without_self", SegmentMin(False), (torch.randn(16), torch.randint(0, 8, (16,))),
     ({0: Dim("n")}, {0: Dim("n")}))

# /// include_self=True compiles as it is.
# CHECK-LABEL: // CASE: negative_scatter_reduce_with_self
# CHECK-NOT: torch.aten.scatter_add
# CHECK: torch.aten.scatter_reduce.two
show("negative_scatter_reduce_with_self", SegmentMin(True),
     (torch.randn(16), torch.randint(0, 8, (16,))), ({0: Dim("n")}, {0: Dim("n")}))


class RowsOfLanguage(torch.nn.Module):
    def forward(self, hidden, lang_ids):
        return hidden[lang_ids == 0]


# /// torch-mlir lowered a boolean index to an arith.cmpi of i1 with i64, which
# /// IREE rejects (XMOD's adapters): the rows are read at the mask's nonzero
# /// positions.
# CHECK-LABEL: // CASE: boolean_mask_read_by_position
# CHECK: %[[MASK:.+]] = torch.aten.eq.Scalar
# CHECK: %[[NONZERO:.+]] = torch.aten.nonzero %[[MASK]]
# CHECK: %[[ROWS:.+]] = torch.aten.select.int %[[NONZERO]]
# CHECK: %[[INDICES:.+]] = torch.prim.ListConstruct %[[ROWS]] : (!torch.vtensor<[?],si64>)
# CHECK: torch.aten.index.Tensor %{{.+}}, %[[INDICES]]
show("boolean_mask_read_by_position", RowsOfLanguage(),
     (torch.randn(2, 16, 8), torch.tensor([0, 1])), ({0: Dim("batch"), 1: Dim("seq")},
                                                     {0: Dim("batch")}))
