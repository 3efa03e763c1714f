// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

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
