// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

/// [Pattern: rewrite_iota_lookup]
/// Position embeddings indexed by an iota read rows 0..L-1 in order: a slice.

// CHECK-LABEL: func.func @embedding_of_unsqueezed_iota
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?],si64>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG: %[[TABLE:.*]] = torch.vtensor.literal
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor %[[TABLE]], %[[ZERO]], %[[ZERO]], %[[L]], %[[ONE]] : !torch.vtensor<[64,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,8],f32>
// CHECK: %[[U:.*]] = torch.aten.unsqueeze %[[ROWS]], %[[ZERO]]
// CHECK-NOT: torch.aten.embedding
// CHECK: return %[[U]]
func.func @embedding_of_unsqueezed_iota(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[1,?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %table = torch.vtensor.literal(dense<0.5> : tensor<64x8xf32>) : !torch.vtensor<[64,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = "anyshape.iota_like"(%arg0) {dim = 1 : i64} : (!torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.add.Scalar %0, %int0, %int1 : !torch.vtensor<[?],si64>, !torch.int, !torch.int -> !torch.vtensor<[?],si64>
  %2 = torch.aten.unsqueeze %1, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %3 = torch.aten.embedding %table, %2, %int-1, %false, %false : !torch.vtensor<[64,8],f32>, !torch.vtensor<[1,?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[1,?,8],f32>
  return %3 : !torch.vtensor<[1,?,8],f32>
}

// -----

// CHECK-LABEL: func.func @index_select_of_iota
// CHECK: torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.index_select
func.func @index_select_of_iota(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 16} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %table = torch.vtensor.literal(dense<0.5> : tensor<16x8xf32>) : !torch.vtensor<[16,8],f32>
  %int0 = torch.constant.int 0
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?],f32>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.index_select %table, %int0, %0 : !torch.vtensor<[16,8],f32>, !torch.int, !torch.vtensor<[?],si64> -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// The length may exceed the table (max 128 > 64 rows): eager would raise an
/// index error where a slice would clamp, so the lookup stays.
// CHECK-LABEL: func.func @negative_length_beyond_table
// CHECK: torch.aten.embedding
func.func @negative_length_beyond_table(%arg0: !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 128} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],si64>
  %table = torch.vtensor.literal(dense<0.5> : tensor<64x8xf32>) : !torch.vtensor<[64,8],f32>
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?],si64>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.embedding %table, %0, %int-1, %false, %false : !torch.vtensor<[64,8],f32>, !torch.vtensor<[?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[?,8],f32>
  return %1 : !torch.vtensor<[?,8],f32>
}

// -----

/// An offset iota (positions past + i, past = 2) reads other rows: it stays.
// CHECK-LABEL: func.func @negative_offset_iota
// CHECK: torch.aten.embedding
func.func @negative_offset_iota(%arg0: !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 32} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],si64>
  %table = torch.vtensor.literal(dense<0.5> : tensor<64x8xf32>) : !torch.vtensor<[64,8],f32>
  %int-1 = torch.constant.int -1
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?],si64>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.add.Scalar %0, %int2, %int1 : !torch.vtensor<[?],si64>, !torch.int, !torch.int -> !torch.vtensor<[?],si64>
  %2 = torch.aten.embedding %table, %1, %int-1, %false, %false : !torch.vtensor<[64,8],f32>, !torch.vtensor<[?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[?,8],f32>
  return %2 : !torch.vtensor<[?,8],f32>
}

// -----

/// An iota with several users: the lookup becomes a slice, and the iota stays
/// for its other user.
// CHECK-LABEL: func.func @iota_with_several_users
// CHECK: %[[IOTA:.*]] = "anyshape.iota_like"
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor
// CHECK-NOT: torch.aten.embedding
// CHECK: return %[[ROWS]], %[[IOTA]]
func.func @iota_with_several_users(%arg0: !torch.vtensor<[?],si64>) -> (!torch.vtensor<[?,8],f32>, !torch.vtensor<[?],si64>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 16} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],si64>
  %table = torch.vtensor.literal(dense<0.5> : tensor<16x8xf32>) : !torch.vtensor<[16,8],f32>
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?],si64>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.embedding %table, %0, %int-1, %false, %false : !torch.vtensor<[16,8],f32>, !torch.vtensor<[?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[?,8],f32>
  return %1, %0 : !torch.vtensor<[?,8],f32>, !torch.vtensor<[?],si64>
}

// -----

/// [Pattern: rewrite_iota_gather]
/// gather(table, 1, iota[None, :]) reads table[0:1, 0:L]: a slice.
// CHECK-LABEL: func.func @gather_of_iota
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?],si64>, %[[TABLE:.*]]: !torch.vtensor<[1,64],si64>)
// CHECK-DAG: %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG: %[[ONE:.*]] = torch.constant.int 1
// CHECK: %[[L:.*]] = torch.aten.size.int %[[X]], %[[ONE]]
// CHECK: %[[ROWS:.*]] = torch.aten.slice.Tensor %[[TABLE]], %[[ONE]], %[[ZERO]], %[[L]], %[[ONE]]
// CHECK-NOT: torch.aten.gather
// CHECK: return %[[ROWS]]
func.func @gather_of_iota(%arg0: !torch.vtensor<[?,?],si64>, %arg1: !torch.vtensor<[1,64],si64>) -> !torch.vtensor<[1,?],si64> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = "anyshape.iota_like"(%arg0) {dim = 1 : i64} : (!torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.unsqueeze %0, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %2 = torch.aten.gather %arg1, %int1, %1, %false : !torch.vtensor<[1,64],si64>, !torch.int, !torch.vtensor<[1,?],si64>, !torch.bool -> !torch.vtensor<[1,?],si64>
  return %2 : !torch.vtensor<[1,?],si64>
}

// -----

/// The iota runs along axis 0 of the index but the gather is along axis 1:
/// each row reads column 0 + its row number, not a contiguous block.
// CHECK-LABEL: func.func @negative_gather_iota_along_other_axis
// CHECK: torch.aten.gather
func.func @negative_gather_iota_along_other_axis(%arg0: !torch.vtensor<[?,?],si64>, %arg1: !torch.vtensor<[64,64],si64>) -> !torch.vtensor<[?,1],si64> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.unsqueeze %0, %int1 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[?,1],si64>
  %2 = torch.aten.gather %arg1, %int1, %1, %false : !torch.vtensor<[64,64],si64>, !torch.int, !torch.vtensor<[?,1],si64>, !torch.bool -> !torch.vtensor<[?,1],si64>
  return %2 : !torch.vtensor<[?,1],si64>
}

// -----

/// [Pattern: rewrite_arange_constant_slice]
/// BERT's position_ids buffer holds 0..63: its slice [:, :L] is an iota (L <= 64).
// CHECK-LABEL: func.func @arange_buffer_slice_is_iota
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?],si64>)
// CHECK: %[[IOTA:.*]] = "anyshape.iota_like"(%[[X]]) {dim = 1 : i64}
// CHECK: %[[ROW:.*]] = torch.aten.unsqueeze %[[IOTA]]
// CHECK-NOT: torch.aten.slice.Tensor
// CHECK: return %[[ROW]]
func.func @arange_buffer_slice_is_iota(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[1,?],si64> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %buffer = torch.vtensor.literal(dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xsi64>) : !torch.vtensor<[1,8],si64>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.aten.slice.Tensor %buffer, %int1, %int0, %0, %int1 : !torch.vtensor<[1,8],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,?],si64>
  return %1 : !torch.vtensor<[1,?],si64>
}

// -----

/// A buffer that is not 0..n-1 is data: its slice stays.
// CHECK-LABEL: func.func @negative_buffer_not_an_arange
// CHECK: torch.aten.slice.Tensor
// CHECK-NOT: anyshape.iota_like
func.func @negative_buffer_not_an_arange(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[1,?],si64> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %buffer = torch.vtensor.literal(dense<[[0, 1, 2, 3, 5, 4, 6, 7]]> : tensor<1x8xsi64>) : !torch.vtensor<[1,8],si64>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.aten.slice.Tensor %buffer, %int1, %int0, %0, %int1 : !torch.vtensor<[1,8],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,?],si64>
  return %1 : !torch.vtensor<[1,?],si64>
}

// -----

/// L may reach 16 but the buffer holds 8 values: the slice clamps at 8 where
/// an iota would not, so it stays.
// CHECK-LABEL: func.func @negative_buffer_shorter_than_length
// CHECK: torch.aten.slice.Tensor
// CHECK-NOT: anyshape.iota_like
func.func @negative_buffer_shorter_than_length(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[1,?],si64> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 16} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %buffer = torch.vtensor.literal(dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xsi64>) : !torch.vtensor<[1,8],si64>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.aten.slice.Tensor %buffer, %int1, %int0, %0, %int1 : !torch.vtensor<[1,8],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,?],si64>
  return %1 : !torch.vtensor<[1,?],si64>
}

// -----

/// [Pattern: rewrite_iota_index]
/// mask[iota_B[:, None, None, None], iota_L[None, None, None, :]] (HuggingFace's
/// vmapped mask builder) reads the whole mask in order: mask[:, None, None, :].
// CHECK-LABEL: func.func @index_by_full_iotas_is_unsqueeze
// CHECK-SAME: (%[[MASK:.*]]: !torch.vtensor<[?,?],i1>)
// CHECK: %[[U1:.*]] = torch.aten.unsqueeze %[[MASK]]
// CHECK: %[[U2:.*]] = torch.aten.unsqueeze %[[U1]]
// CHECK-SAME: -> !torch.vtensor<[?,1,1,?],i1>
// CHECK-NOT: torch.aten.index.Tensor
// CHECK: return %[[U2]]
func.func @index_by_full_iotas_is_unsqueeze(%arg0: !torch.vtensor<[?,?],i1>) -> !torch.vtensor<[?,1,1,?],i1> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],i1>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?,?],i1>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.unsqueeze %0, %int1 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[?,1],si64>
  %2 = torch.aten.unsqueeze %1, %int2 : !torch.vtensor<[?,1],si64>, !torch.int -> !torch.vtensor<[?,1,1],si64>
  %3 = torch.aten.unsqueeze %2, %int3 : !torch.vtensor<[?,1,1],si64>, !torch.int -> !torch.vtensor<[?,1,1,1],si64>
  %4 = "anyshape.iota_like"(%arg0) {dim = 1 : i64} : (!torch.vtensor<[?,?],i1>) -> !torch.vtensor<[?],si64>
  %5 = torch.aten.unsqueeze %4, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %6 = torch.aten.unsqueeze %5, %int1 : !torch.vtensor<[1,?],si64>, !torch.int -> !torch.vtensor<[1,1,?],si64>
  %7 = torch.aten.unsqueeze %6, %int2 : !torch.vtensor<[1,1,?],si64>, !torch.int -> !torch.vtensor<[1,1,1,?],si64>
  %8 = torch.prim.ListConstruct %3, %7 : (!torch.vtensor<[?,1,1,1],si64>, !torch.vtensor<[1,1,1,?],si64>) -> !torch.list<optional<vtensor>>
  %9 = torch.aten.index.Tensor %arg0, %8 : !torch.vtensor<[?,?],i1>, !torch.list<optional<vtensor>> -> !torch.vtensor<[?,1,1,?],i1>
  return %9 : !torch.vtensor<[?,1,1,?],i1>
}

// -----

/// The second index runs over the batch (a size taken along a different dim),
/// not over the mask's own axis 1: not the identity, so the gather stays.
// CHECK-LABEL: func.func @negative_index_iota_of_other_dim
// CHECK: torch.aten.index.Tensor
func.func @negative_index_iota_of_other_dim(%arg0: !torch.vtensor<[?,?],i1>) -> !torch.vtensor<[?,1,1,?],i1> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 4} : !torch.int
  %s1 = torch.symbolic_int "s1" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0, %s1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],i1>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?,?],i1>) -> !torch.vtensor<[?],si64>
  %1 = torch.aten.unsqueeze %0, %int1 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[?,1],si64>
  %2 = torch.aten.unsqueeze %1, %int2 : !torch.vtensor<[?,1],si64>, !torch.int -> !torch.vtensor<[?,1,1],si64>
  %3 = torch.aten.unsqueeze %2, %int3 : !torch.vtensor<[?,1,1],si64>, !torch.int -> !torch.vtensor<[?,1,1,1],si64>
  %4 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?,?],i1>) -> !torch.vtensor<[?],si64>
  %5 = torch.aten.unsqueeze %4, %int0 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  %6 = torch.aten.unsqueeze %5, %int1 : !torch.vtensor<[1,?],si64>, !torch.int -> !torch.vtensor<[1,1,?],si64>
  %7 = torch.aten.unsqueeze %6, %int2 : !torch.vtensor<[1,1,?],si64>, !torch.int -> !torch.vtensor<[1,1,1,?],si64>
  %8 = torch.prim.ListConstruct %3, %7 : (!torch.vtensor<[?,1,1,1],si64>, !torch.vtensor<[1,1,1,?],si64>) -> !torch.list<optional<vtensor>>
  %9 = torch.aten.index.Tensor %arg0, %8 : !torch.vtensor<[?,?],i1>, !torch.list<optional<vtensor>> -> !torch.vtensor<[?,1,1,?],i1>
  return %9 : !torch.vtensor<[?,1,1,?],i1>
}
