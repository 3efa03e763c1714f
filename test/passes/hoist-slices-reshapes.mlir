// RUN: anyshape-opt %s --split-input-file --anyshape-hoist-slices | FileCheck %s

/// [Pattern: through_unflatten, through_flatten]
/// [B, L, H] -> [B*L, H] -> mm -> [B, L, N], then [:, -1]: one row per batch of
/// the merged axis is the strided slice (L-1)::L; through the mm it becomes
/// one row of the unmerged input. The mm runs on B rows, not B*L.
// CHECK-LABEL: func.func @sequence_row_through_merged_axis
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>, %[[W:.*]]: !torch.vtensor<[8,16],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK: %[[LAST:.*]] = torch.aten.add.int %{{.*}}, %[[L]]
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[X]], %[[ONE]], %[[LAST]], %[[L]], %[[ONE]] : {{.*}} -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[FLAT:.*]] = torch.aten.flatten.using_ints %[[ROW]], %[[ZERO]], %[[ONE]]
// CHECK: %[[MM:.*]] = torch.aten.mm %[[FLAT]], %[[W]]
// CHECK-NOT: torch.aten.unflatten
// CHECK: return %[[MM]]
func.func @sequence_row_through_merged_axis(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[?,16],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %b = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %l = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %0 = torch.aten.flatten.using_ints %arg0, %int0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  %1 = torch.aten.mm %0, %arg1 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[?,16],f32>
  %sizes = torch.prim.ListConstruct %b, %l : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.unflatten.int %1, %int0, %sizes : !torch.vtensor<[?,16],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,16],f32>
  %3 = torch.aten.select.int %2, %int1, %int-1 : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
  return %3 : !torch.vtensor<[?,16],f32>
}

// -----

/// [Pattern: through_unflatten]
/// Slicing the batch axis of [B, L, H] -> [B, L, 2, 4] (heads split, an
/// unflatten of a later axis): the axis keeps its number.
// CHECK-LABEL: func.func @batch_slice_through_head_split
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[XS:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[1,?,8],f32>
// CHECK: %[[H:.*]] = torch.aten.unflatten.int %[[XS]]
// CHECK: return %[[H]]
func.func @batch_slice_through_head_split(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[1,?,2,4],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %sizes = torch.prim.ListConstruct %int2, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.unflatten.int %arg0, %int2, %sizes : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,4],f32>
  %1 = torch.aten.slice.Tensor %0, %int0, %int0, %int1, %int1 : !torch.vtensor<[?,?,2,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,?,2,4],f32>
  return %1 : !torch.vtensor<[1,?,2,4],f32>
}

// -----

/// Slicing the sequence axis of a [B*L, H] -> [B, L, H] unflatten with more
/// than one row (rows 2..5 of each batch) is not one strided slice of the
/// merged axis: it stays.
// CHECK-LABEL: func.func @negative_multi_row_slice_of_merged_axis
// CHECK: %[[U:.*]] = torch.aten.unflatten.int
// CHECK: torch.aten.slice.Tensor %[[U]]
func.func @negative_multi_row_slice_of_merged_axis(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.int, %arg2: !torch.int) -> !torch.vtensor<[?,3,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int5 = torch.constant.int 5
  %sizes = torch.prim.ListConstruct %arg1, %arg2 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.unflatten.int %arg0, %int0, %sizes : !torch.vtensor<[?,8],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,8],f32>
  %1 = torch.aten.slice.Tensor %0, %int1, %int2, %int5, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,3,8],f32>
  return %1 : !torch.vtensor<[?,3,8],f32>
}

// -----

/// [Pattern: through_transpose, through_permute]
/// Transpose and permute remap the axis: axis 2 of permute(x, [0, 2, 1, 3]) is
/// axis 1 of x, and axis 1 of transpose(y, 1, 2) is axis 2 of y.
// CHECK-LABEL: func.func @transpose_and_permute_remap
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,2,4],f32>)
// CHECK: %[[XS:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[?,1,2,4],f32>
// CHECK: %[[T:.*]] = torch.aten.transpose.int %[[XS]]
// CHECK: %[[P:.*]] = torch.aten.permute %[[T]]
// CHECK: torch.aten.squeeze.dim %[[P]]
func.func @transpose_and_permute_remap(%arg0: !torch.vtensor<[?,?,2,4],f32>) -> !torch.vtensor<[?,2,4],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %0 = torch.aten.transpose.int %arg0, %int1, %int2 : !torch.vtensor<[?,?,2,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,2,?,4],f32>
  %order = torch.prim.ListConstruct %int0, %int2, %int1, %int3 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.permute %0, %order : !torch.vtensor<[?,2,?,4],f32>, !torch.list<int> -> !torch.vtensor<[?,?,2,4],f32>
  %2 = torch.aten.select.int %1, %int1, %int0 : !torch.vtensor<[?,?,2,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,2,4],f32>
  return %2 : !torch.vtensor<[?,2,4],f32>
}

// -----

/// [Pattern: through_unsqueeze, through_squeeze, through_expand]
/// unsqueeze/squeeze shift the axis; an expand of a full axis keeps it (-1),
/// and a broadcast axis (size 1) gets the selected size.
// CHECK-LABEL: func.func @unsqueeze_and_expand
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,8],f32>)
// CHECK: %[[XS:.*]] = torch.aten.slice.Tensor %[[X]], %{{.*}} -> !torch.vtensor<[1,8],f32>
// CHECK: %[[U:.*]] = torch.aten.unsqueeze %[[XS]]
// CHECK: %[[E:.*]] = torch.aten.expand %[[U]]
// CHECK-SAME: -> !torch.vtensor<[1,3,8],f32>
// CHECK: return %[[E]]
func.func @unsqueeze_and_expand(%arg0: !torch.vtensor<[?,8],f32>) -> !torch.vtensor<[1,3,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten.unsqueeze %arg0, %int1 : !torch.vtensor<[?,8],f32>, !torch.int -> !torch.vtensor<[?,1,8],f32>
  %sizes = torch.prim.ListConstruct %int-1, %int3, %int-1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.expand %0, %sizes, %false : !torch.vtensor<[?,1,8],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[?,3,8],f32>
  %2 = torch.aten.slice.Tensor %1, %int0, %int0, %int1, %int1 : !torch.vtensor<[?,3,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,3,8],f32>
  return %2 : !torch.vtensor<[1,3,8],f32>
}

// -----

/// [Pattern: squeeze_of_unsqueeze]
/// What a moved row leaves below a reshape: squeeze(unsqueeze(x, 1), -2) is x.
// CHECK-LABEL: func.func @squeeze_of_unsqueeze
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,8],f32>)
// CHECK-NEXT: return %[[X]]
func.func @squeeze_of_unsqueeze(%arg0: !torch.vtensor<[?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int1 = torch.constant.int 1
  %int-2 = torch.constant.int -2
  %0 = torch.aten.unsqueeze %arg0, %int1 : !torch.vtensor<[?,8],f32>, !torch.int -> !torch.vtensor<[?,1,8],f32>
  %1 = torch.aten.squeeze.dim %0, %int-2 : !torch.vtensor<[?,1,8],f32>, !torch.int -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// Squeezing another unit axis than the one unsqueezed keeps both ops.
// CHECK-LABEL: func.func @negative_squeeze_of_other_axis
// CHECK: torch.aten.unsqueeze
// CHECK: torch.aten.squeeze.dim
func.func @negative_squeeze_of_other_axis(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.unsqueeze %arg0, %int1 : !torch.vtensor<[1,8],f32>, !torch.int -> !torch.vtensor<[1,1,8],f32>
  %1 = torch.aten.squeeze.dim %0, %int0 : !torch.vtensor<[1,1,8],f32>, !torch.int -> !torch.vtensor<[1,8],f32>
  return %1 : !torch.vtensor<[1,8],f32>
}
