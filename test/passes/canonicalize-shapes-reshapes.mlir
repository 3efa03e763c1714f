// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

/// [Pattern: rewrite_view]
/// Views whose size lists are built from shape values become flatten/unflatten
/// with a known grouping.

// CHECK-LABEL: func.func @view_merges_batch_and_sequence
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK: %[[F:.*]] = torch.aten.flatten.using_ints %[[X]], %[[ZERO]], %[[ONE]] : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
// CHECK-NOT: torch.aten.view
// CHECK: return %[[F]]
func.func @view_merges_batch_and_sequence(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int8 = torch.constant.int 8
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %2 = torch.aten.mul.int %0, %1 : !torch.int, !torch.int -> !torch.int
  %3 = torch.prim.ListConstruct %2, %int8 : (!torch.int, !torch.int) -> !torch.list<int>
  %4 = torch.aten.view %arg0, %3 : !torch.vtensor<[?,?,8],f32>, !torch.list<int> -> !torch.vtensor<[?,8],f32>
  return %4 : !torch.vtensor<[?,8],f32>
}

// -----

/// Splitting heads: [b, s, 64] -> [b, s, -1, 32] is an unflatten of the last dim.
// CHECK-LABEL: func.func @view_splits_heads
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,64],f32>)
// CHECK-DAG: %[[TWO:.*]] = torch.constant.int 2
// CHECK-DAG: %[[C32:.*]] = torch.constant.int 32
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %[[TWO]], %[[C32]]
// CHECK: %[[U:.*]] = torch.aten.unflatten.int %[[X]], %[[TWO]], %[[SIZES]] : !torch.vtensor<[?,?,64],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,32],f32>
// CHECK: return %[[U]]
func.func @view_splits_heads(%arg0: !torch.vtensor<[?,?,64],f32>) -> !torch.vtensor<[?,?,2,32],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %int32 = torch.constant.int 32
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,64],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,64],f32>, !torch.int -> !torch.int
  %2 = torch.prim.ListConstruct %0, %1, %int-1, %int32 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.view %arg0, %2 : !torch.vtensor<[?,?,64],f32>, !torch.list<int> -> !torch.vtensor<[?,?,2,32],f32>
  return %3 : !torch.vtensor<[?,?,2,32],f32>
}

// -----

/// [b * s, 8] -> [b, s, 8]: the split of a dynamic dim into two dynamic dims
/// names every size (from the argument dims), never -1.
// CHECK-LABEL: func.func @view_splits_dynamic_dim
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[B:.*]] = torch.aten.size.int %[[X]], %int0
// CHECK-DAG: %[[S:.*]] = torch.aten.size.int %[[X]], %int1
// CHECK: %[[F:.*]] = torch.aten.flatten.using_ints %[[X]]
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %[[B]], %[[S]] : (!torch.int, !torch.int) -> !torch.list<int>
// CHECK: %[[U:.*]] = torch.aten.unflatten.int %[[F]], %int0{{.*}}, %[[SIZES]]
// CHECK-NOT: torch.aten.view
// CHECK: return %[[U]]
func.func @view_splits_dynamic_dim(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,?,8],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int8 = torch.constant.int 8
  %int-1 = torch.constant.int -1
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %1 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %2 = torch.aten.mul.int %0, %1 : !torch.int, !torch.int -> !torch.int
  %3 = torch.prim.ListConstruct %2, %int8 : (!torch.int, !torch.int) -> !torch.list<int>
  %4 = torch.aten.view %arg0, %3 : !torch.vtensor<[?,?,8],f32>, !torch.list<int> -> !torch.vtensor<[?,8],f32>
  %5 = torch.prim.ListConstruct %0, %1, %int-1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %6 = torch.aten.view %4, %5 : !torch.vtensor<[?,8],f32>, !torch.list<int> -> !torch.vtensor<[?,?,8],f32>
  return %6 : !torch.vtensor<[?,?,8],f32>
}

// -----

/// A view that regroups across dims ([b, 6] -> [b * 2, 3]) is neither a merge
/// nor a split: it stays.
// CHECK-LABEL: func.func @negative_view_regroups
// CHECK: torch.aten.view
func.func @negative_view_regroups(%arg0: !torch.vtensor<[?,6],f32>) -> !torch.vtensor<[?,4],f32> {
  %int0 = torch.constant.int 0
  %int3 = torch.constant.int 3
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,6],f32>, !torch.int -> !torch.int
  %1 = torch.aten.mul.int %0, %int3 : !torch.int, !torch.int -> !torch.int
  %2 = torch.aten.floordiv.int %1, %int2 : !torch.int, !torch.int -> !torch.int
  %3 = torch.prim.ListConstruct %2, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %4 = torch.aten.view %arg0, %3 : !torch.vtensor<[?,6],f32>, !torch.list<int> -> !torch.vtensor<[?,4],f32>
  return %4 : !torch.vtensor<[?,4],f32>
}
