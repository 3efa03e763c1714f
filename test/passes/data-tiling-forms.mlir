// RUN: anyshape-opt %s --split-input-file --anyshape-data-tiling-forms | FileCheck %s

/// [Pattern: one_row_bmm, selection_as_gather]
/// Slice hoisting left one query row: both batch matmuls have one row, which
/// IREE's data tiling turns into a batch matvec it cannot pack. They become a
/// multiply and a sum over the unflattened [B, heads]; the row of the values
/// (also read whole by the other products) becomes its own gather.
// CHECK-LABEL: func.func @one_row_attention
// CHECK-SAME: (%[[Q:.*]]: !torch.vtensor<[?,4,?,8],f32>, %[[K:.*]]: !torch.vtensor<[?,4,?,8],f32>, %[[V:.*]]: !torch.vtensor<[?,4,?,8],f32>)
// CHECK: %[[INDEX:.*]] = torch.vtensor.literal(dense<0> : tensor<1xsi64>)
// CHECK: %[[ROW:.*]] = torch.aten.index_select %[[V]], %int2, %[[INDEX]]
// CHECK-NOT: torch.aten.bmm
// CHECK: %[[COLUMN:.*]] = torch.aten.transpose.int %[[ROW]], %int2, %int3 : !torch.vtensor<[?,4,1,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4,8,1],f32>
// CHECK: %[[PRODUCTS:.*]] = torch.aten.mul.Tensor %[[COLUMN]], %{{.*}} : !torch.vtensor<[?,4,8,1],f32>, !torch.vtensor<[?,4,8,?],f32>
// CHECK: %[[SCORES:.*]] = torch.aten.sum.dim_IntList %[[PRODUCTS]], %{{.*}}, %true, %none {{.*}} -> !torch.vtensor<[?,4,1,?],f32>
// CHECK: %[[P:.*]] = torch.aten.softmax.int %[[SCORES]]
// CHECK: %[[PCOL:.*]] = torch.aten.transpose.int %[[P]], %int2, %int3
// CHECK: %[[PV:.*]] = torch.aten.mul.Tensor %[[PCOL]], %[[V]] : !torch.vtensor<[?,4,?,1],f32>, !torch.vtensor<[?,4,?,8],f32>
// CHECK: torch.aten.sum.dim_IntList %[[PV]], %{{.*}}, %true, %none {{.*}} -> !torch.vtensor<[?,4,1,8],f32>
// CHECK-NOT: torch.aten.bmm
func.func @one_row_attention(%arg0: !torch.vtensor<[?,4,?,8],f32>, %arg1: !torch.vtensor<[?,4,?,8],f32>, %arg2: !torch.vtensor<[?,4,?,8],f32>) -> !torch.vtensor<[?,4,8],f32> {
  %int0 = torch.constant.int 0
  %none = torch.constant.none
  %int-1 = torch.constant.int -1
  %int4 = torch.constant.int 4
  %int3 = torch.constant.int 3
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.symbolic_int "s85" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s0" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%1, %0], affine_map<()[s0, s1] -> (s1, 4, s0, 8)> : !torch.vtensor<[?,4,?,8],f32>
  torch.bind_symbolic_shape %arg1, [%1, %0], affine_map<()[s0, s1] -> (s1, 4, s0, 8)> : !torch.vtensor<[?,4,?,8],f32>
  torch.bind_symbolic_shape %arg2, [%1, %0], affine_map<()[s0, s1] -> (s1, 4, s0, 8)> : !torch.vtensor<[?,4,?,8],f32>
  %2 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,4,?,8],f32>, !torch.int -> !torch.int
  %3 = torch.prim.ListConstruct %int0, %int1, %int3, %int2 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %4 = torch.aten.permute %arg2, %3 : !torch.vtensor<[?,4,?,8],f32>, !torch.list<int> -> !torch.vtensor<[?,4,8,?],f32>
  torch.bind_symbolic_shape %4, [%1, %0], affine_map<()[s0, s1] -> (s1, 4, 8, s0)> : !torch.vtensor<[?,4,8,?],f32>
  torch.bind_symbolic_shape %4, [%1, %0], affine_map<()[s0, s1] -> (s1, 4, 8, s0)> : !torch.vtensor<[?,4,8,?],f32>
  %5 = torch.aten.flatten.using_ints %4, %int0, %int1 : !torch.vtensor<[?,4,8,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8,?],f32>
  torch.bind_symbolic_shape %5, [%1, %0], affine_map<()[s0, s1] -> (s1 * 4, 8, s0)> : !torch.vtensor<[?,8,?],f32>
  %6 = torch.prim.ListConstruct %2, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %7 = torch.aten.flatten.using_ints %arg2, %int0, %int1 : !torch.vtensor<[?,4,?,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %7, [%1, %0], affine_map<()[s0, s1] -> (s1 * 4, s0, 8)> : !torch.vtensor<[?,?,8],f32>
  %8 = torch.prim.ListConstruct %2, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %9 = torch.aten.slice.Tensor %arg2, %int2, %int0, %int1, %int1 : !torch.vtensor<[?,4,?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,4,1,8],f32>
  %10 = torch.aten.flatten.using_ints %9, %int0, %int1 : !torch.vtensor<[?,4,1,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,1,8],f32>
  %11 = torch.aten.bmm %10, %5 : !torch.vtensor<[?,1,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,1,?],f32>
  %12 = torch.aten.unflatten.int %11, %int0, %6 : !torch.vtensor<[?,1,?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,4,1,?],f32>
  %13 = torch.aten.softmax.int %12, %int-1, %none : !torch.vtensor<[?,4,1,?],f32>, !torch.int, !torch.none -> !torch.vtensor<[?,4,1,?],f32>
  %14 = torch.aten.flatten.using_ints %13, %int0, %int1 : !torch.vtensor<[?,4,1,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,1,?],f32>
  %15 = torch.aten.bmm %14, %7 : !torch.vtensor<[?,1,?],f32>, !torch.vtensor<[?,?,8],f32> -> !torch.vtensor<[?,1,8],f32>
  %16 = torch.aten.unflatten.int %15, %int0, %8 : !torch.vtensor<[?,1,8],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,4,1,8],f32>
  %17 = torch.aten.squeeze.dim %16, %int2 : !torch.vtensor<[?,4,1,8],f32>, !torch.int -> !torch.vtensor<[?,4,8],f32>
  torch.bind_symbolic_shape %17, [%0], affine_map<()[s0] -> (s0, 4, 8)> : !torch.vtensor<[?,4,8],f32>
  return %17 : !torch.vtensor<[?,4,8],f32>
}

// -----

/// [Pattern: one_row_bmm]
/// A decode function's attention: batch and heads static, so the merge and
/// split of [B, H] are views, not flatten and unflatten. Still one row: the
/// scores are a multiply and a sum, and the keys are read as they are, not
/// packed for a product on every step.
// CHECK-LABEL: func.func @one_row_static_heads
// CHECK-SAME: (%[[Q:.*]]: !torch.vtensor<[1,4,1,8],f32>, %[[KT:.*]]: !torch.vtensor<[1,4,8,?],f32>)
// CHECK: %[[COLUMN:.*]] = torch.aten.transpose.int %[[Q]], %int2, %int3 : !torch.vtensor<[1,4,1,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[1,4,8,1],f32>
// CHECK: %[[PRODUCTS:.*]] = torch.aten.mul.Tensor %[[COLUMN]], %[[KT]] : !torch.vtensor<[1,4,8,1],f32>, !torch.vtensor<[1,4,8,?],f32>
// CHECK: %[[SCORES:.*]] = torch.aten.sum.dim_IntList %[[PRODUCTS]], %{{.*}}, %true, %none {{.*}} -> !torch.vtensor<[1,4,1,?],f32>
// CHECK-NOT: torch.aten.bmm
// CHECK: return %[[SCORES]]
func.func @one_row_static_heads(%arg0: !torch.vtensor<[1,4,1,8],f32>, %arg1: !torch.vtensor<[1,4,8,?],f32>) -> !torch.vtensor<[1,4,1,?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (1, 4, 8, s0)> : !torch.vtensor<[1,4,8,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %int8 = torch.constant.int 8
  %q_sizes = torch.prim.ListConstruct %int4, %int1, %int8 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %q = torch.aten.view %arg0, %q_sizes : !torch.vtensor<[1,4,1,8],f32>, !torch.list<int> -> !torch.vtensor<[4,1,8],f32>
  %k = torch.aten.flatten.using_ints %arg1, %int0, %int1 : !torch.vtensor<[1,4,8,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[4,8,?],f32>
  %s = torch.aten.bmm %q, %k : !torch.vtensor<[4,1,8],f32>, !torch.vtensor<[4,8,?],f32> -> !torch.vtensor<[4,1,?],f32>
  %int-1 = torch.constant.int -1
  %sizes = torch.prim.ListConstruct %int1, %int4, %int1, %int-1 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %r = torch.aten.view %s, %sizes : !torch.vtensor<[4,1,?],f32>, !torch.list<int> -> !torch.vtensor<[1,4,1,?],f32>
  return %r : !torch.vtensor<[1,4,1,?],f32>
}

// -----

/// [Pattern: one_row_bmm]
/// A view that does not split the merged dims back into [B, H] (here [2, 2]
/// of 4 heads with a batch of 1 is [B, H] = [1, 4] merged, split otherwise):
/// left alone.
// CHECK-LABEL: func.func @negative_view_not_the_merge
// CHECK: torch.aten.bmm
// CHECK-NOT: torch.aten.sum.dim_IntList
func.func @negative_view_not_the_merge(%arg0: !torch.vtensor<[1,4,1,8],f32>, %arg1: !torch.vtensor<[1,4,8,?],f32>) -> !torch.vtensor<[2,2,1,?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (1, 4, 8, s0)> : !torch.vtensor<[1,4,8,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int8 = torch.constant.int 8
  %q_sizes = torch.prim.ListConstruct %int4, %int1, %int8 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %q = torch.aten.view %arg0, %q_sizes : !torch.vtensor<[1,4,1,8],f32>, !torch.list<int> -> !torch.vtensor<[4,1,8],f32>
  %k = torch.aten.flatten.using_ints %arg1, %int0, %int1 : !torch.vtensor<[1,4,8,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[4,8,?],f32>
  %s = torch.aten.bmm %q, %k : !torch.vtensor<[4,1,8],f32>, !torch.vtensor<[4,8,?],f32> -> !torch.vtensor<[4,1,?],f32>
  %int-1 = torch.constant.int -1
  %sizes = torch.prim.ListConstruct %int2, %int2, %int1, %int-1 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %r = torch.aten.view %s, %sizes : !torch.vtensor<[4,1,?],f32>, !torch.list<int> -> !torch.vtensor<[2,2,1,?],f32>
  return %r : !torch.vtensor<[2,2,1,?],f32>
}

// -----

/// [Pattern: one_row_bmm]
/// Two rows: a real (if small) matmul, which IREE data-tiles; left alone.
// CHECK-LABEL: func.func @negative_two_rows
// CHECK: torch.aten.bmm
// CHECK-NOT: torch.aten.sum.dim_IntList
func.func @negative_two_rows(%arg0: !torch.vtensor<[?,4,2,8],f32>, %arg1: !torch.vtensor<[?,4,8,?],f32>) -> !torch.vtensor<[?,4,2,?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4, 2, 8)> : !torch.vtensor<[?,4,2,8],f32>
  torch.bind_symbolic_shape %arg1, [%0, %1], affine_map<()[s0, s1] -> (s0, 4, 8, s1)> : !torch.vtensor<[?,4,8,?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %b = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,4,2,8],f32>, !torch.int -> !torch.int
  %a = torch.aten.flatten.using_ints %arg0, %int0, %int1 : !torch.vtensor<[?,4,2,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,2,8],f32>
  %k = torch.aten.flatten.using_ints %arg1, %int0, %int1 : !torch.vtensor<[?,4,8,?],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,8,?],f32>
  %s = torch.aten.bmm %a, %k : !torch.vtensor<[?,2,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,2,?],f32>
  %sizes = torch.prim.ListConstruct %b, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %r = torch.aten.unflatten.int %s, %int0, %sizes : !torch.vtensor<[?,2,?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,4,2,?],f32>
  return %r : !torch.vtensor<[?,4,2,?],f32>
}

// -----

/// [Pattern: selection_as_gather]
/// The slice is the only reader of x: nothing else would share its dispatch.
// CHECK-LABEL: func.func @negative_slice_is_only_reader
// CHECK: torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.index_select
func.func @negative_slice_is_only_reader(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,1,8],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %r = torch.aten.slice.Tensor %arg0, %int1, %int0, %int1, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,1,8],f32>
  return %r : !torch.vtensor<[?,1,8],f32>
}

// -----

/// [Pattern: selection_as_gather]
/// The last row of a boolean mask that other layers read whole: no projection
/// reads a mask, and gathered into its consumer's dispatch the row made IREE's
/// peeled code explode; it stays a slice.
// CHECK-LABEL: func.func @negative_mask_row_stays_a_slice
// CHECK-SAME: (%[[MASK:.*]]: !torch.vtensor<[?,1,?,?],i1>)
// CHECK: %[[ROW:.*]] = torch.aten.slice.Tensor %[[MASK]], %int2
// CHECK-NOT: torch.aten.index_select
// CHECK: return %[[MASK]], %[[ROW]]
func.func @negative_mask_row_stays_a_slice(%arg0: !torch.vtensor<[?,1,?,?],i1>) -> (!torch.vtensor<[?,1,?,?],i1>, !torch.vtensor<[?,1,1,?],i1>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, 1, s1, s1)> : !torch.vtensor<[?,1,?,?],i1>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %len = torch.aten.size.int %arg0, %int2 : !torch.vtensor<[?,1,?,?],i1>, !torch.int -> !torch.int
  %last = torch.aten.sub.int %len, %int1 : !torch.int, !torch.int -> !torch.int
  %r = torch.aten.slice.Tensor %arg0, %int2, %last, %len, %int1 : !torch.vtensor<[?,1,?,?],i1>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,1,1,?],i1>
  return %arg0, %r : !torch.vtensor<[?,1,?,?],i1>, !torch.vtensor<[?,1,1,?],i1>
}

// -----

/// Row 3 of a length that may be 2: the slice would be empty there, a gather
/// would read out of bounds; left alone.
// CHECK-LABEL: func.func @negative_row_may_be_outside
// CHECK: torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.index_select
func.func @negative_row_may_be_outside(%arg0: !torch.vtensor<[?,?,8],f32>) -> (!torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,1,8],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %r = torch.aten.slice.Tensor %arg0, %int1, %int3, %int4, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,1,8],f32>
  return %arg0, %r : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,1,8],f32>
}

// -----

/// The last row of every sequence of a flattened [B*L, 8] (GPT-2's last token
/// after its Conv1D view), also read whole: rows L-1, 2L-1, ... gathered.
// CHECK-LABEL: func.func @strided_rows
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,8],f32>
// CHECK: %[[ROWS:.*]] = torch.aten.arange.start_step
// CHECK: torch.aten.index_select %[[X]], %int0, %[[ROWS]] : !torch.vtensor<[?,8],f32>, !torch.int, !torch.vtensor<[?],si64> -> !torch.vtensor<[?,8],f32>
func.func @strided_rows(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[?,?],si64>) -> (!torch.vtensor<[?,8],f32>, !torch.vtensor<[?,8],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0 * s1, 8)> : !torch.vtensor<[?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %b = torch.aten.size.int %arg1, %int0 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %l = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %start = torch.aten.sub.int %l, %int1 : !torch.int, !torch.int -> !torch.int
  %end = torch.aten.mul.int %b, %l : !torch.int, !torch.int -> !torch.int
  %r = torch.aten.slice.Tensor %arg0, %int0, %start, %end, %l : !torch.vtensor<[?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %arg0, %r : !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,8],f32>
}

// -----

/// The same rows with an open end (x[L-1::L]), as slice hoisting writes
/// GPT-2's last token: the gather stops at x's size, B*L, not at the end.
// CHECK-LABEL: func.func @strided_rows_open_end
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,8],f32>, %[[IDS:.*]]: !torch.vtensor<[?,?],si64>)
// CHECK-DAG: %[[B:.*]] = torch.aten.size.int %[[IDS]], %int0
// CHECK-DAG: %[[L:.*]] = torch.aten.size.int %[[IDS]], %int1
// CHECK: %[[SIZE:.*]] = torch.aten.mul.int
// CHECK-NOT: 9223372036854775807
// CHECK: %[[ROWS:.*]] = torch.aten.arange.start_step %{{.*}}, %[[SIZE]], %[[L]]
// CHECK: torch.aten.index_select %[[X]], %int0, %[[ROWS]]
func.func @strided_rows_open_end(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[?,?],si64>) -> (!torch.vtensor<[?,8],f32>, !torch.vtensor<[?,8],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0 * s1, 8)> : !torch.vtensor<[?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %max = torch.constant.int 9223372036854775807
  %l = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %start = torch.aten.sub.int %l, %int1 : !torch.int, !torch.int -> !torch.int
  %r = torch.aten.slice.Tensor %arg0, %int0, %start, %max, %l : !torch.vtensor<[?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %arg0, %r : !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,8],f32>
}

// -----

/// An end that may fall inside x (row 1 on, step 2, up to 100 when x may have
/// up to 512 rows): the slice stops early, an arange to x's size would not;
/// left alone.
// CHECK-LABEL: func.func @negative_strided_end_inside
// CHECK: torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.index_select
func.func @negative_strided_end_inside(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[?,?],si64>) -> (!torch.vtensor<[?,8],f32>, !torch.vtensor<[?,8],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0 * s1, 8)> : !torch.vtensor<[?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int100 = torch.constant.int 100
  %r = torch.aten.slice.Tensor %arg0, %int0, %int1, %int100, %int2 : !torch.vtensor<[?,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
  return %arg0, %r : !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,8],f32>
}

// -----

/// [Pattern: whole_weight_projection]
/// GPT-2's fused QKV projection split by slice hoisting: each part reads a
/// column slice of the constant weight and bias, which IREE would pack inside
/// the projection on every call. Each part becomes the whole projection,
/// sliced after; the three identical projections are then one after CSE.
// CHECK-LABEL: func.func @constant_weight_columns
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>)
// CHECK-DAG: %[[W:.*]] = torch.vtensor.literal(dense_resource<w> : tensor<4x6xf32>)
// CHECK-DAG: %[[BIAS:.*]] = torch.vtensor.literal(dense_resource<bias> : tensor<6xf32>)
// CHECK: %[[QKV:.*]] = torch.aten.addmm %[[BIAS]], %[[X]], %[[W]], %int1, %int1 {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: %[[Q:.*]] = torch.aten.slice.Tensor %[[QKV]], %int1, %int0, %int2, %int1 {{.*}} -> !torch.vtensor<[?,2],f32>
// CHECK: %[[ALL:.*]] = torch.aten.mm %[[X]], %[[W]] : {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: %[[KV:.*]] = torch.aten.slice.Tensor %[[ALL]], %int1, %int2, %int6, %int1 {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: return %[[Q]], %[[KV]]
func.func @constant_weight_columns(%arg0: !torch.vtensor<[?,4],f32>) -> (!torch.vtensor<[?,2],f32>, !torch.vtensor<[?,4],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int6 = torch.constant.int 6
  %w = torch.vtensor.literal(dense_resource<w> : tensor<4x6xf32>) : !torch.vtensor<[4,6],f32>
  %b = torch.vtensor.literal(dense_resource<bias> : tensor<6xf32>) : !torch.vtensor<[6],f32>
  %wq = torch.aten.slice.Tensor %w, %int1, %int0, %int2, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,2],f32>
  %bq = torch.aten.slice.Tensor %b, %int0, %int0, %int2, %int1 : !torch.vtensor<[6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2],f32>
  %q = torch.aten.addmm %bq, %arg0, %wq, %int1, %int1 : !torch.vtensor<[2],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,2],f32>
  %wkv = torch.aten.slice.Tensor %w, %int1, %int2, %int6, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,4],f32>
  %kv = torch.aten.mm %arg0, %wkv : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,4],f32> -> !torch.vtensor<[?,4],f32>
  return %q, %kv : !torch.vtensor<[?,2],f32>, !torch.vtensor<[?,4],f32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b841",
      bias: "0x04000000000000000000803f0000004000004040000080400000a040"
    }
  }
#-}

// -----

/// [Pattern: whole_weight_projection, rows_of_shared_projection]
/// The same split projection of a weight kept as stored (bfloat16, read
/// through its cast to float32: frontend/checkpoint.py) is read whole too;
/// and the last token's query rows come from the product of every row.
// CHECK-LABEL: func.func @stored_weight_columns
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>)
// CHECK: %[[W:.*]] = torch.aten._to_copy %{{.*}} -> !torch.vtensor<[4,6],f32>
// CHECK: %[[ALL:.*]] = torch.aten.mm %[[X]], %[[W]] : {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: torch.aten.slice.Tensor %[[ALL]], %int1, %int2, %int6, %int1
// CHECK: %[[SAME:.*]] = torch.aten.mm %[[X]], %[[W]] : {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor %[[SAME]], %int0
// CHECK: torch.aten.slice.Tensor %[[ROWS]], %int1, %int0, %int2, %int1
func.func @stored_weight_columns(%arg0: !torch.vtensor<[?,4],f32>) -> (!torch.vtensor<[?,4],f32>, !torch.vtensor<[?,2],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %false = torch.constant.bool false
  %stored = torch.vtensor.literal(dense_resource<w> : tensor<4x6xbf16>) : !torch.vtensor<[4,6],bf16>
  %w = torch.aten._to_copy %stored, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[4,6],bf16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[4,6],f32>
  %wkv = torch.aten.slice.Tensor %w, %int1, %int2, %int6, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,4],f32>
  %kv = torch.aten.mm %arg0, %wkv : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,4],f32> -> !torch.vtensor<[?,4],f32>
  %x = torch.aten.slice.Tensor %arg0, %int0, %int1, %int3, %int2 : !torch.vtensor<[?,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,4],f32>
  %wq = torch.aten.slice.Tensor %w, %int1, %int0, %int2, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,2],f32>
  %q = torch.aten.mm %x, %wq : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32> -> !torch.vtensor<[?,2],f32>
  return %kv, %q : !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,2],f32>
}
{-#
  dialect_resources: {
    builtin: {
      w: "0x02000000803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f"
    }
  }
#-}

// -----

/// A bias sliced differently from the weight (or not a constant) cannot be
/// read whole with the same columns; left alone.
// CHECK-LABEL: func.func @negative_bias_other_columns
// CHECK: torch.aten.addmm %{{.*}}, %{{.*}}, %{{.*}} : !torch.vtensor<[2],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32>
func.func @negative_bias_other_columns(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,2],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %w = torch.vtensor.literal(dense_resource<w> : tensor<4x6xf32>) : !torch.vtensor<[4,6],f32>
  %b = torch.vtensor.literal(dense_resource<bias> : tensor<6xf32>) : !torch.vtensor<[6],f32>
  %wq = torch.aten.slice.Tensor %w, %int1, %int0, %int2, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,2],f32>
  %bq = torch.aten.slice.Tensor %b, %int0, %int2, %int4, %int1 : !torch.vtensor<[6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2],f32>
  %q = torch.aten.addmm %bq, %arg0, %wq, %int1, %int1 : !torch.vtensor<[2],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,2],f32>
  return %q : !torch.vtensor<[?,2],f32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b841",
      bias: "0x04000000000000000000803f0000004000004040000080400000a040"
    }
  }
#-}

// -----

/// A weight computed at run time (not a constant) is packed per call anyway.
// CHECK-LABEL: func.func @negative_weight_not_constant
// CHECK: torch.aten.mm %{{.*}}, %{{.*}} : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32>
func.func @negative_weight_not_constant(%arg0: !torch.vtensor<[?,4],f32>, %arg1: !torch.vtensor<[4,6],f32>) -> !torch.vtensor<[?,2],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %wq = torch.aten.slice.Tensor %arg1, %int1, %int0, %int2, %int1 : !torch.vtensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,2],f32>
  %q = torch.aten.mm %arg0, %wq : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,2],f32> -> !torch.vtensor<[?,2],f32>
  return %q : !torch.vtensor<[?,2],f32>
}

// -----

/// [Pattern: rows_of_shared_projection]
/// The last layer after the rewrite above: the query rows' projection reads
/// the same whole weight as every row's K and V projection beside it, so its
/// rows come from that product (IREE would otherwise fuse the column slice
/// back into a one-row projection and pack the weight inside it).
// CHECK-LABEL: func.func @rows_of_shared_projection
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>)
// CHECK: %[[ALL:.*]] = torch.aten.addmm %[[BIAS:.*]], %[[X]], %[[W:.*]], %int1, %int1 {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: %[[SAME:.*]] = torch.aten.addmm %[[BIAS]], %[[X]], %[[W]], %int1, %int1 {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor %[[SAME]], %int0, %{{.*}}, %{{.*}}, %{{.*}} : {{.*}} -> !torch.vtensor<[?,6],f32>
// CHECK: return %[[ALL]], %[[ROWS]]
func.func @rows_of_shared_projection(%arg0: !torch.vtensor<[?,4],f32>) -> (!torch.vtensor<[?,6],f32>, !torch.vtensor<[?,6],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int2 = torch.constant.int 2
  %w = torch.vtensor.literal(dense_resource<w> : tensor<4x6xf32>) : !torch.vtensor<[4,6],f32>
  %b = torch.vtensor.literal(dense_resource<bias> : tensor<6xf32>) : !torch.vtensor<[6],f32>
  %all = torch.aten.addmm %b, %arg0, %w, %int1, %int1 : !torch.vtensor<[6],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,6],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,6],f32>
  %x = torch.aten.slice.Tensor %arg0, %int0, %int1, %int3, %int2 : !torch.vtensor<[?,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,4],f32>
  %rows = torch.aten.addmm %b, %x, %w, %int1, %int1 : !torch.vtensor<[6],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,6],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,6],f32>
  return %all, %rows : !torch.vtensor<[?,6],f32>, !torch.vtensor<[?,6],f32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b841",
      bias: "0x04000000000000000000803f0000004000004040000080400000a040"
    }
  }
#-}

// -----

/// No projection of every row beside it: taking the rows from a product over
/// all rows would add work; left alone.
// CHECK-LABEL: func.func @negative_rows_projection_alone
// CHECK: %[[X:.*]] = torch.aten.slice.Tensor %arg0, %int0
// CHECK: torch.aten.addmm %{{.*}}, %[[X]], %{{.*}} : {{.*}} -> !torch.vtensor<[?,6],f32>
func.func @negative_rows_projection_alone(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,6],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int2 = torch.constant.int 2
  %w = torch.vtensor.literal(dense_resource<w> : tensor<4x6xf32>) : !torch.vtensor<[4,6],f32>
  %b = torch.vtensor.literal(dense_resource<bias> : tensor<6xf32>) : !torch.vtensor<[6],f32>
  %x = torch.aten.slice.Tensor %arg0, %int0, %int1, %int3, %int2 : !torch.vtensor<[?,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,4],f32>
  %rows = torch.aten.addmm %b, %x, %w, %int1, %int1 : !torch.vtensor<[6],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[4,6],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,6],f32>
  return %rows : !torch.vtensor<[?,6],f32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b841",
      bias: "0x04000000000000000000803f0000004000004040000080400000a040"
    }
  }
#-}

// -----

/// [Pattern: fuse_shared_input_linears, linear_on_flat_rows]
/// RoBERTa's Q, K and V projections of one input, each split into heads:
/// IREE would fold each head transpose into its projection (a contraction
/// data tiling leaves alone). One linear on the concatenated constant weights
/// (and biases), sliced after, is one plain matmul; V's width differs and
/// still joins. It runs on the [B, L] rows flattened into one dim: on
/// [B, L, K] IREE's GlobalOptimization data tiling sees a batch matmul with
/// the weight broadcast to every batch and packs that broadcast on every call.
// CHECK-LABEL: func.func @shared_input_linears
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[WQ:.*]] = torch.vtensor.literal(dense_resource<wq>
// CHECK-DAG: %[[WK:.*]] = torch.vtensor.literal(dense_resource<wk>
// CHECK-DAG: %[[WV:.*]] = torch.vtensor.literal(dense_resource<wv>
// CHECK: %[[WLIST:.*]] = torch.prim.ListConstruct %[[WQ]], %[[WK]], %[[WV]]
// CHECK: %[[W:.*]] = torch.aten.cat %[[WLIST]], %int0 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[10,8],f32>
// CHECK: %[[BLIST:.*]] = torch.prim.ListConstruct
// CHECK: %[[B:.*]] = torch.aten.cat %[[BLIST]], %int0 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[10],f32>
// CHECK: %[[FLAT:.*]] = torch.aten.flatten.using_ints %[[X]], %{{.*}}, %{{.*}} : {{.*}} -> !torch.vtensor<[?,8],f32>
// CHECK: %[[ROWS:.*]] = torch.aten.linear %[[FLAT]], %[[W]], %[[B]] : {{.*}} -> !torch.vtensor<[?,10],f32>
// CHECK: %[[QKV:.*]] = torch.aten.unflatten.int %[[ROWS]], %{{.*}}, %{{.*}} -> !torch.vtensor<[?,?,10],f32>
// CHECK-DAG: %[[Q:.*]] = torch.aten.slice.Tensor %[[QKV]], %int2, %int0, %int4, %int1 {{.*}} -> !torch.vtensor<[?,?,4],f32>
// CHECK-DAG: %[[K:.*]] = torch.aten.slice.Tensor %[[QKV]], %int2, %int4, %int8, %int1 {{.*}} -> !torch.vtensor<[?,?,4],f32>
// CHECK-DAG: %[[V:.*]] = torch.aten.slice.Tensor %[[QKV]], %int2, %int8, %int10, %int1 {{.*}} -> !torch.vtensor<[?,?,2],f32>
// CHECK-NOT: torch.aten.linear
// CHECK-DAG: torch.aten.unflatten.int %[[Q]]
// CHECK-DAG: torch.aten.unflatten.int %[[K]]
// CHECK-DAG: torch.aten.unflatten.int %[[V]]
func.func @shared_input_linears(%arg0: !torch.vtensor<[?,?,8],f32>) -> (!torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,1],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %heads = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %vheads = torch.prim.ListConstruct %int2, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %wq = torch.vtensor.literal(dense_resource<wq> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %bq = torch.vtensor.literal(dense_resource<bq> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %q = torch.aten.linear %arg0, %wq, %bq : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,?,4],f32>
  %qh = torch.aten.unflatten.int %q, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  %wk = torch.vtensor.literal(dense_resource<wk> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %bk = torch.vtensor.literal(dense_resource<bk> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %k = torch.aten.linear %arg0, %wk, %bk : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,?,4],f32>
  %kh = torch.aten.unflatten.int %k, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  %wv = torch.vtensor.literal(dense_resource<wv> : tensor<2x8xf32>) : !torch.vtensor<[2,8],f32>
  %bv = torch.vtensor.literal(dense_resource<bv> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %v = torch.aten.linear %arg0, %wv, %bv : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[2,8],f32>, !torch.vtensor<[2],f32> -> !torch.vtensor<[?,?,2],f32>
  %vh = torch.aten.unflatten.int %v, %int2, %vheads : !torch.vtensor<[?,?,2],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,1],f32>
  return %qh, %kh, %vh : !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,1],f32>
}
{-#
  dialect_resources: {
    builtin: {
      wq: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b8410000c0410000c8410000d0410000d8410000e0410000e8410000f0410000f841",
      wk: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b8410000c0410000c8410000d0410000d8410000e0410000e8410000f0410000f841",
      wv: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041",
      bq: "0x04000000000000000000803f0000004000004040",
      bk: "0x04000000000000000000803f0000004000004040",
      bv: "0x04000000000000000000803f"
    }
  }
#-}

// -----

/// [Pattern: fuse_shared_input_linears (weights kept as stored)]
/// A checkpoint's bfloat16 weights compiled in float32 are read through a
/// cast (frontend/checkpoint.py): Q and K still join, the casts moved above
/// the first projection with the constants they read, and the dtype
/// assertion on each stored weight stays where it was.
// CHECK-LABEL: func.func @shared_input_linears_of_stored_weights
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[WQ:.*]] = torch.aten._to_copy %{{.*}}, %int6{{.*}} -> !torch.vtensor<[4,8],f32>
// CHECK-DAG: %[[WK:.*]] = torch.aten._to_copy %{{.*}}, %int6{{.*}} -> !torch.vtensor<[4,8],f32>
// CHECK: %[[WLIST:.*]] = torch.prim.ListConstruct %[[WQ]], %[[WK]]
// CHECK: %[[W:.*]] = torch.aten.cat %[[WLIST]], %int0 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[8,8],f32>
// CHECK: torch.aten.linear %{{.*}}, %[[W]], %{{.*}} : {{.*}} -> !torch.vtensor<[?,8],f32>
// CHECK-NOT: torch.aten.linear
// CHECK: torch.aten._assert_tensor_metadata
func.func @shared_input_linears_of_stored_weights(%arg0: !torch.vtensor<[?,?,8],f32>) -> (!torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %none = torch.constant.none
  %int2 = torch.constant.int 2
  %heads = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %wq_stored = torch.vtensor.literal(dense_resource<wq> : tensor<4x8xbf16>) : !torch.vtensor<[4,8],bf16>
  %int6 = torch.constant.int 6
  %false = torch.constant.bool false
  %wq = torch.aten._to_copy %wq_stored, %int6, %none, %none, %none, %false, %none : !torch.vtensor<[4,8],bf16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[4,8],f32>
  %q = torch.aten.linear %arg0, %wq, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %qh = torch.aten.unflatten.int %q, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  %wk_stored = torch.vtensor.literal(dense_resource<wk> : tensor<4x8xbf16>) : !torch.vtensor<[4,8],bf16>
  %int15 = torch.constant.int 15
  torch.aten._assert_tensor_metadata %wk_stored, %none, %none, %int15, %none, %none : !torch.vtensor<[4,8],bf16>, !torch.none, !torch.none, !torch.int, !torch.none, !torch.none
  %int6_0 = torch.constant.int 6
  %false_0 = torch.constant.bool false
  %wk = torch.aten._to_copy %wk_stored, %int6_0, %none, %none, %none, %false_0, %none : !torch.vtensor<[4,8],bf16>, !torch.int, !torch.none, !torch.none, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[4,8],f32>
  %k = torch.aten.linear %arg0, %wk, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %kh = torch.aten.unflatten.int %k, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  return %qh, %kh : !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>
}
{-#
  dialect_resources: {
    builtin: {
      wq: "0x02000000803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f",
      wk: "0x02000000803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f803f"
    }
  }
#-}

// -----

/// [Pattern: fuse_shared_input_linears (gathered rows)]
/// The projections of
/// anyshape-eliminate-padding's token rows, each gathered back to the padded
/// layout by the same slots before its head split: they still fuse, and the
/// fused rows are gathered once (one dispatch reading whole rows, not one per
/// projection), then sliced.
// CHECK-LABEL: func.func @shared_input_linears_of_gathered_rows
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>, %[[SLOTS:.*]]: !torch.vtensor<[?],si64>)
// CHECK: %[[QK:.*]] = torch.aten.linear %[[X]], {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: %[[ROWS:.*]] = torch.aten.index_select %[[QK]], %{{.*}}, %[[SLOTS]] : {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK-NOT: torch.aten.index_select
// CHECK-DAG: %[[Q:.*]] = torch.aten.slice.Tensor %[[ROWS]], %{{.*}}, %int0, %int2, %{{.*}} -> !torch.vtensor<[?,2],f32>
// CHECK-DAG: %[[K:.*]] = torch.aten.slice.Tensor %[[ROWS]], %{{.*}}, %int2, %int4, %{{.*}} -> !torch.vtensor<[?,2],f32>
// CHECK-DAG: torch.aten.unflatten.int %[[Q]]
// CHECK-DAG: torch.aten.unflatten.int %[[K]]
func.func @shared_input_linears_of_gathered_rows(%x: !torch.vtensor<[?,4],f32>, %slots: !torch.vtensor<[?],si64>) -> (!torch.vtensor<[?,2,1],f32>, !torch.vtensor<[?,2,1],f32>) {
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %heads = torch.prim.ListConstruct %int2, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %wq = torch.vtensor.literal(dense_resource<wq> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %q = torch.aten.linear %x, %wq, %none : !torch.vtensor<[?,4],f32>, !torch.vtensor<[2,4],f32>, !torch.none -> !torch.vtensor<[?,2],f32>
  %qg = torch.aten.index_select %q, %int0, %slots : !torch.vtensor<[?,2],f32>, !torch.int, !torch.vtensor<[?],si64> -> !torch.vtensor<[?,2],f32>
  %qh = torch.aten.unflatten.int %qg, %int1, %heads : !torch.vtensor<[?,2],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,1],f32>
  %wk = torch.vtensor.literal(dense_resource<wk> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %k = torch.aten.linear %x, %wk, %none : !torch.vtensor<[?,4],f32>, !torch.vtensor<[2,4],f32>, !torch.none -> !torch.vtensor<[?,2],f32>
  %kg = torch.aten.index_select %k, %int0, %slots : !torch.vtensor<[?,2],f32>, !torch.int, !torch.vtensor<[?],si64> -> !torch.vtensor<[?,2],f32>
  %kh = torch.aten.unflatten.int %kg, %int1, %heads : !torch.vtensor<[?,2],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,1],f32>
  return %qh, %kh : !torch.vtensor<[?,2,1],f32>, !torch.vtensor<[?,2,1],f32>
}
{-#
  dialect_resources: {
    builtin: {
      wq: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e040",
      wk: "0x040000000000004100001041000020410000304100004041000050410000604100007041"
    }
  }
#-}

// -----

/// Gathered by different indices, the fused rows stay gathered per slice.
// CHECK-LABEL: func.func @negative_gathers_by_different_rows
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,4],f32>, %[[A:.*]]: !torch.vtensor<[?],si64>, %[[B:.*]]: !torch.vtensor<[?],si64>)
// CHECK: %[[QK:.*]] = torch.aten.linear %[[X]], {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK-DAG: %[[Q:.*]] = torch.aten.slice.Tensor %[[QK]], %{{.*}}, %int0, %int2
// CHECK-DAG: %[[K:.*]] = torch.aten.slice.Tensor %[[QK]], %{{.*}}, %int2, %int4
// CHECK-DAG: torch.aten.index_select %[[Q]], %{{.*}}, %[[A]]
// CHECK-DAG: torch.aten.index_select %[[K]], %{{.*}}, %[[B]]
func.func @negative_gathers_by_different_rows(%x: !torch.vtensor<[?,4],f32>, %a: !torch.vtensor<[?],si64>, %b: !torch.vtensor<[?],si64>) -> (!torch.vtensor<[?,2,1],f32>, !torch.vtensor<[?,2,1],f32>) {
  %none = torch.constant.none
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %heads = torch.prim.ListConstruct %int2, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %wq = torch.vtensor.literal(dense_resource<wq> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %q = torch.aten.linear %x, %wq, %none : !torch.vtensor<[?,4],f32>, !torch.vtensor<[2,4],f32>, !torch.none -> !torch.vtensor<[?,2],f32>
  %qg = torch.aten.index_select %q, %int0, %a : !torch.vtensor<[?,2],f32>, !torch.int, !torch.vtensor<[?],si64> -> !torch.vtensor<[?,2],f32>
  %qh = torch.aten.unflatten.int %qg, %int1, %heads : !torch.vtensor<[?,2],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,1],f32>
  %wk = torch.vtensor.literal(dense_resource<wk> : tensor<2x4xf32>) : !torch.vtensor<[2,4],f32>
  %k = torch.aten.linear %x, %wk, %none : !torch.vtensor<[?,4],f32>, !torch.vtensor<[2,4],f32>, !torch.none -> !torch.vtensor<[?,2],f32>
  %kg = torch.aten.index_select %k, %int0, %b : !torch.vtensor<[?,2],f32>, !torch.int, !torch.vtensor<[?],si64> -> !torch.vtensor<[?,2],f32>
  %kh = torch.aten.unflatten.int %kg, %int1, %heads : !torch.vtensor<[?,2],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,1],f32>
  return %qh, %kh : !torch.vtensor<[?,2,1],f32>, !torch.vtensor<[?,2,1],f32>
}
{-#
  dialect_resources: {
    builtin: {
      wq: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e040",
      wk: "0x040000000000004100001041000020410000304100004041000050410000604100007041"
    }
  }
#-}

// -----

/// [Pattern: fuse_shared_input_linears]
/// Different inputs (the last layer's query rows against every row's K), a
/// weight computed at run time, a linear without bias beside ones with, and
/// projections read whole by an attention product (one head: no head
/// transpose to fold; a column slice would be packed inside the product's
/// dispatch): none is joined with another; left alone.
// CHECK-LABEL: func.func @negative_linears_not_shareable
// CHECK-NOT: torch.aten.cat
// CHECK-COUNT-6: torch.aten.linear
// CHECK-NOT: torch.aten.cat
func.func @negative_linears_not_shareable(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,1,8],f32>, %arg2: !torch.vtensor<[4,8],f32>) -> (!torch.vtensor<[?,1,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,?],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (s0, 1, 8)> : !torch.vtensor<[?,1,8],f32>
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %heads = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %wq = torch.vtensor.literal(dense_resource<wq> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %bq = torch.vtensor.literal(dense_resource<bq> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %q = torch.aten.linear %arg1, %wq, %bq : !torch.vtensor<[?,1,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,1,4],f32>
  %qh = torch.aten.unflatten.int %q, %int2, %heads : !torch.vtensor<[?,1,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,1,2,2],f32>
  %wk = torch.vtensor.literal(dense_resource<wk> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %bk = torch.vtensor.literal(dense_resource<bk> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %k = torch.aten.linear %arg0, %wk, %bk : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,?,4],f32>
  %kh = torch.aten.unflatten.int %k, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  %r = torch.aten.linear %arg0, %arg2, %bk : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,?,4],f32>
  %rh = torch.aten.unflatten.int %r, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  %n = torch.aten.linear %arg0, %wq, %none : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.none -> !torch.vtensor<[?,?,4],f32>
  %nh = torch.aten.unflatten.int %n, %int2, %heads : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,2,2],f32>
  %a = torch.aten.linear %arg0, %wq, %bq : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,?,4],f32>
  %b = torch.aten.linear %arg0, %wk, %bk : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,?,4],f32>
  %bt = torch.aten.transpose.int %b, %int1, %int2 : !torch.vtensor<[?,?,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4,?],f32>
  %s = torch.aten.bmm %a, %bt : !torch.vtensor<[?,?,4],f32>, !torch.vtensor<[?,4,?],f32> -> !torch.vtensor<[?,?,?],f32>
  return %qh, %kh, %rh, %nh, %s : !torch.vtensor<[?,1,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,2,2],f32>, !torch.vtensor<[?,?,?],f32>
}
{-#
  dialect_resources: {
    builtin: {
      wq: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b8410000c0410000c8410000d0410000d8410000e0410000e8410000f0410000f841",
      wk: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041000080410000884100009041000098410000a0410000a8410000b0410000b8410000c0410000c8410000d0410000d8410000e0410000e8410000f0410000f841",
      wv: "0x04000000000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041",
      bq: "0x04000000000000000000803f0000004000004040",
      bk: "0x04000000000000000000803f0000004000004040",
      bv: "0x04000000000000000000803f"
    }
  }
#-}

// -----

/// [Pattern: few_rows_projection]
/// Projections of one row per sequence (a dynamic row count of at most 8):
/// IREE 3.13 fails to data-tile such a matmul (GPT-2's and RoBERTa's
/// slice-hoisted last layer), and it is one tile of rows at most, so it
/// becomes a broadcast multiply and a sum over K, which IREE leaves untiled.
// CHECK-LABEL: func.func @few_rows_projections
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,8],f32>)
// CHECK: %[[COL:.*]] = torch.aten.unsqueeze %[[X]], %{{.*}} : !torch.vtensor<[?,8],f32>, !torch.int -> !torch.vtensor<[?,1,8],f32>
// CHECK: %[[P:.*]] = torch.aten.mul.Tensor %[[COL]], %{{.*}} : !torch.vtensor<[?,1,8],f32>, !torch.vtensor<[4,8],f32> -> !torch.vtensor<[?,4,8],f32>
// CHECK: %[[S:.*]] = torch.aten.sum.dim_IntList %[[P]], %{{.*}}, %false, %none {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: %[[LIN:.*]] = torch.aten.add.Tensor %[[S]], %{{.*}}, %{{.*}} : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[?,4],f32>
// CHECK: %[[KCOL:.*]] = torch.aten.unsqueeze %[[X]], %{{.*}} -> !torch.vtensor<[?,8,1],f32>
// CHECK: %[[KP:.*]] = torch.aten.mul.Tensor %[[KCOL]], %{{.*}} : !torch.vtensor<[?,8,1],f32>, !torch.vtensor<[8,4],f32> -> !torch.vtensor<[?,8,4],f32>
// CHECK: %[[MM:.*]] = torch.aten.sum.dim_IntList %[[KP]], %{{.*}}, %false, %none {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: %[[ADDMM:.*]] = torch.aten.add.Tensor %{{.*}}, %{{.*}}, %{{.*}} : !torch.vtensor<[?,4],f32>, !torch.vtensor<[4],f32>
// CHECK-NOT: torch.aten.linear
// CHECK-NOT: torch.aten.mm
// CHECK-NOT: torch.aten.addmm
// CHECK: return %[[LIN]], %[[MM]], %[[ADDMM]]
func.func @few_rows_projections(%arg0: !torch.vtensor<[?,8],f32>) -> (!torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  %int1 = torch.constant.int 1
  %w = torch.vtensor.literal(dense<1.0> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %wt = torch.vtensor.literal(dense<2.0> : tensor<8x4xf32>) : !torch.vtensor<[8,4],f32>
  %b = torch.vtensor.literal(dense<3.0> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %lin = torch.aten.linear %arg0, %w, %b : !torch.vtensor<[?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,4],f32>
  %mm = torch.aten.mm %arg0, %wt : !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,4],f32> -> !torch.vtensor<[?,4],f32>
  %addmm = torch.aten.addmm %b, %arg0, %wt, %int1, %int1 : !torch.vtensor<[4],f32>, !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4],f32>
  return %lin, %mm, %addmm : !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f32>
}

// -----

/// Rows that may exceed one tile (up to 64), a static row count, and an
/// addmm with a scale other than 1: data tiling handles the first two, and
/// the third is not a plain product; left alone.
// CHECK-LABEL: func.func @negative_many_or_static_rows
// CHECK: torch.aten.linear
// CHECK: torch.aten.linear
// CHECK: torch.aten.addmm
// CHECK-NOT: torch.aten.sum.dim_IntList
func.func @negative_many_or_static_rows(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[2,8],f32>, %arg2: !torch.vtensor<[?,8],f32>) -> (!torch.vtensor<[?,4],f32>, !torch.vtensor<[2,4],f32>, !torch.vtensor<[?,4],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  torch.bind_symbolic_shape %arg2, [%1], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %w = torch.vtensor.literal(dense<1.0> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %wt = torch.vtensor.literal(dense<2.0> : tensor<8x4xf32>) : !torch.vtensor<[8,4],f32>
  %b = torch.vtensor.literal(dense<3.0> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %many = torch.aten.linear %arg0, %w, %b : !torch.vtensor<[?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,4],f32>
  %static = torch.aten.linear %arg1, %w, %b : !torch.vtensor<[2,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[2,4],f32>
  %scaled = torch.aten.addmm %b, %arg2, %wt, %int1, %int2 : !torch.vtensor<[4],f32>, !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4],f32>
  return %many, %static, %scaled : !torch.vtensor<[?,4],f32>, !torch.vtensor<[2,4],f32>, !torch.vtensor<[?,4],f32>
}

// -----

/// A vector, and one static row, against a weight whose column count N is
/// dynamic (a weight that is an input): IREE 3.13's data tiling returned such
/// a product padded to 8 columns where it had a second user, and a softmax
/// over it read the padding; they become a broadcast multiply and a sum.
// CHECK-LABEL: func.func @one_row_dynamic_columns
// CHECK-SAME: (%[[V:.*]]: !torch.vtensor<[8],f32>, %[[R:.*]]: !torch.vtensor<[1,8],f32>, %[[W:.*]]: !torch.vtensor<[?,8],f32>, %[[WT:.*]]: !torch.vtensor<[8,?],f32>)
// CHECK: %[[ROW:.*]] = torch.aten.unsqueeze %[[V]], %{{.*}} -> !torch.vtensor<[1,8],f32>
// CHECK: %[[P:.*]] = torch.aten.mul.Tensor %[[ROW]], %[[W]] : !torch.vtensor<[1,8],f32>, !torch.vtensor<[?,8],f32> -> !torch.vtensor<[?,8],f32>
// CHECK: %[[LIN:.*]] = torch.aten.sum.dim_IntList %[[P]], %{{.*}}, %false, %none {{.*}} -> !torch.vtensor<[?],f32>
// CHECK: %[[COL:.*]] = torch.aten.unsqueeze %[[R]], %{{.*}} -> !torch.vtensor<[1,8,1],f32>
// CHECK: %[[Q:.*]] = torch.aten.mul.Tensor %[[COL]], %[[WT]] : !torch.vtensor<[1,8,1],f32>, !torch.vtensor<[8,?],f32> -> !torch.vtensor<[1,8,?],f32>
// CHECK: %[[MM:.*]] = torch.aten.sum.dim_IntList %[[Q]], %{{.*}}, %false, %none {{.*}} -> !torch.vtensor<[1,?],f32>
// CHECK-NOT: torch.aten.linear
// CHECK-NOT: torch.aten.mm
// CHECK: return %[[LIN]], %[[MM]]
func.func @one_row_dynamic_columns(%arg0: !torch.vtensor<[8],f32>, %arg1: !torch.vtensor<[1,8],f32>, %arg2: !torch.vtensor<[?,8],f32>, %arg3: !torch.vtensor<[8,?],f32>) -> (!torch.vtensor<[?],f32>, !torch.vtensor<[1,?],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 2, max_val = 9223372036854775807} : !torch.int
  torch.bind_symbolic_shape %arg2, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  torch.bind_symbolic_shape %arg3, [%0], affine_map<()[s0] -> (8, s0)> : !torch.vtensor<[8,?],f32>
  %none = torch.constant.none
  %lin = torch.aten.linear %arg0, %arg2, %none : !torch.vtensor<[8],f32>, !torch.vtensor<[?,8],f32>, !torch.none -> !torch.vtensor<[?],f32>
  %mm = torch.aten.mm %arg1, %arg3 : !torch.vtensor<[1,8],f32>, !torch.vtensor<[8,?],f32> -> !torch.vtensor<[1,?],f32>
  return %lin, %mm : !torch.vtensor<[?],f32>, !torch.vtensor<[1,?],f32>
}

// -----

/// A vector or one static row against a weight of static columns: IREE's data
/// tiling handles them (a one-row LM head with the batch fixed); left alone.
// CHECK-LABEL: func.func @negative_one_row_static_columns
// CHECK: torch.aten.linear
// CHECK: torch.aten.mm
// CHECK-NOT: torch.aten.sum.dim_IntList
func.func @negative_one_row_static_columns(%arg0: !torch.vtensor<[8],f32>, %arg1: !torch.vtensor<[1,8],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[1,4],f32>) {
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<1.0> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %wt = torch.vtensor.literal(dense<2.0> : tensor<8x4xf32>) : !torch.vtensor<[8,4],f32>
  %lin = torch.aten.linear %arg0, %w, %none : !torch.vtensor<[8],f32>, !torch.vtensor<[4,8],f32>, !torch.none -> !torch.vtensor<[4],f32>
  %mm = torch.aten.mm %arg1, %wt : !torch.vtensor<[1,8],f32>, !torch.vtensor<[8,4],f32> -> !torch.vtensor<[1,4],f32>
  return %lin, %mm : !torch.vtensor<[4],f32>, !torch.vtensor<[1,4],f32>
}

// -----

/// [Pattern: mask_as_contraction_column]
/// Attention scores plus a padding mask of one row per sequence: IREE cannot
/// fuse the unpacking of the data-tiled scores with the addition when the
/// length is dynamic, so the mask becomes one more contraction step of the
/// score product (a column of ones beside Q, the mask row below K^T).
// CHECK-LABEL: func.func @mask_as_contraction_column
// CHECK-SAME: (%[[Q:.*]]: !torch.vtensor<[?,?,8],f32>, %[[KT:.*]]: !torch.vtensor<[?,8,?],f32>, %[[MASK:.*]]: !torch.vtensor<[?,1,1,?],f32>, %[[B:.*]]: !torch.int)
// CHECK: %[[FIRST:.*]] = torch.aten.slice.Tensor %[[Q]], %int2, %int0, %int1, %int1 : {{.*}} -> !torch.vtensor<[?,?,1],f32>
// CHECK: %[[ONES:.*]] = torch.aten.full_like %[[FIRST]], %int1
// CHECK: %[[QS:.*]] = torch.prim.ListConstruct %[[Q]], %[[ONES]]
// CHECK: %[[Q1:.*]] = torch.aten.cat %[[QS]], %int2 : {{.*}} -> !torch.vtensor<[?,?,9],f32>
// CHECK: %[[SIZES:.*]] = torch.prim.ListConstruct %[[B]], %int2{{.*}}, %int-1, %int-1
// CHECK: %[[PER_HEAD:.*]] = torch.aten.expand %[[MASK]], %[[SIZES]], %false : {{.*}} -> !torch.vtensor<[?,2,1,?],f32>
// CHECK: %[[ROW:.*]] = torch.aten.flatten.using_ints %[[PER_HEAD]], %int0, %int1 : {{.*}} -> !torch.vtensor<[?,1,?],f32>
// CHECK: %[[KS:.*]] = torch.prim.ListConstruct %[[KT]], %[[ROW]]
// CHECK: %[[KT1:.*]] = torch.aten.cat %[[KS]], %int1 : {{.*}} -> !torch.vtensor<[?,9,?],f32>
// CHECK: %[[SCORES:.*]] = torch.aten.bmm %[[Q1]], %[[KT1]] : {{.*}} -> !torch.vtensor<[?,?,?],f32>
// CHECK: %[[RESULT:.*]] = torch.aten.unflatten.int %[[SCORES]], %int0
// CHECK-NOT: torch.aten.add.Tensor
// CHECK: return %[[RESULT]]
func.func @mask_as_contraction_column(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,8,?],f32>, %arg2: !torch.vtensor<[?,1,1,?],f32>, %arg3: !torch.int) -> !torch.vtensor<[?,2,?,?],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.bmm %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.prim.ListConstruct %arg3, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.unflatten.int %0, %int0, %1 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,?,?],f32>
  %3 = torch.aten.add.Tensor %2, %arg2, %int1 : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,1,1,?],f32>, !torch.int -> !torch.vtensor<[?,2,?,?],f32>
  return %3 : !torch.vtensor<[?,2,?,?],f32>
}

// -----

/// A mask with a row per query (a causal mask, [B, 1, L, L]) would be as
/// large as the scores as a contraction operand; a scaled addition is not
/// one contraction step of weight 1; scores read elsewhere too would be
/// computed twice. Left alone.
// CHECK-LABEL: func.func @negative_mask_not_a_column
// CHECK-COUNT-3: torch.aten.add.Tensor
// CHECK-NOT: torch.aten.cat
func.func @negative_mask_not_a_column(%arg0: !torch.vtensor<[?,?,8],f32>, %arg1: !torch.vtensor<[?,8,?],f32>, %arg2: !torch.vtensor<[?,1,?,?],f32>, %arg3: !torch.vtensor<[?,1,1,?],f32>, %arg4: !torch.int) -> (!torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,2,?,?],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.bmm %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %1 = torch.prim.ListConstruct %arg4, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.unflatten.int %0, %int0, %1 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,?,?],f32>
  %3 = torch.aten.add.Tensor %2, %arg2, %int1 : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,1,?,?],f32>, !torch.int -> !torch.vtensor<[?,2,?,?],f32>
  %4 = torch.aten.bmm %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %5 = torch.aten.unflatten.int %4, %int0, %1 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,?,?],f32>
  %6 = torch.aten.add.Tensor %5, %arg3, %int2 : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,1,1,?],f32>, !torch.int -> !torch.vtensor<[?,2,?,?],f32>
  %7 = torch.aten.bmm %arg0, %arg1 : !torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,8,?],f32> -> !torch.vtensor<[?,?,?],f32>
  %8 = torch.aten.unflatten.int %7, %int0, %1 : !torch.vtensor<[?,?,?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,2,?,?],f32>
  %9 = torch.aten.add.Tensor %8, %arg3, %int1 : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,1,1,?],f32>, !torch.int -> !torch.vtensor<[?,2,?,?],f32>
  return %3, %6, %9, %8 : !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,2,?,?],f32>, !torch.vtensor<[?,2,?,?],f32>
}
