// RUN: anyshape-opt %s --split-input-file --anyshape-lower | FileCheck %s

/// [Pattern: lower_iota_like]
/// iota_like becomes the dynamic iota: linalg.index over tensor.empty sized by
/// tensor.dim of the reference tensor.

// CHECK-LABEL: func.func @iota_like
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[T:.*]] = torch_c.to_builtin_tensor %[[X]] : !torch.vtensor<[?,?,8],f32> -> tensor<?x?x8xf32>
// CHECK: %[[N:.*]] = tensor.dim %[[T]], %[[C1]] : tensor<?x?x8xf32>
// CHECK: %[[E:.*]] = tensor.empty(%[[N]]) : tensor<?xi64>
// CHECK: %[[G:.*]] = linalg.generic {{.*}} iterator_types = ["parallel"]} outs(%[[E]] : tensor<?xi64>)
// CHECK: %[[I:.*]] = linalg.index 0 : index
// CHECK: %[[V:.*]] = arith.index_cast %[[I]] : index to i64
// CHECK: linalg.yield %[[V]] : i64
// CHECK: %[[R:.*]] = torch_c.from_builtin_tensor %[[G]] : tensor<?xi64> -> !torch.vtensor<[?],si64>
// CHECK: return %[[R]]
// CHECK-NOT: anyshape.iota_like
func.func @iota_like(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  %0 = "anyshape.iota_like"(%arg0) {dim = 1 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64>
  return %0 : !torch.vtensor<[?],si64>
}

// -----

/// A static iota needs no tensor.dim.
// CHECK-LABEL: func.func @iota_like_static
// CHECK-NOT: tensor.dim
// CHECK: tensor.empty() : tensor<8xi32>
func.func @iota_like_static(%arg0: !torch.vtensor<[?,8],f32>) -> !torch.vtensor<[8],si32> {
  %0 = "anyshape.iota_like"(%arg0) {dim = 1 : i64} : (!torch.vtensor<[?,8],f32>) -> !torch.vtensor<[8],si32>
  return %0 : !torch.vtensor<[8],si32>
}

// -----

/// [Pattern: _record_symbolic_shapes]
/// Argument bindings become `anyshape.dims` argument attributes that keep the
/// real minimum (IREE's own reading of the bindings drops it to 1): the derived
/// dim `s0 * 2` gets its range through the expression and divisor 2, a dim
/// bound to the same symbol in two arguments has the same `expr`, static dims
/// get no entry, and existing argument attributes stay. Bindings of other
/// values and every torch.symbolic_int go: torch-mlir cannot lower them.
// CHECK-LABEL: func.func @symbolic_shapes
// CHECK-SAME: (%[[X:[^:]*]]: !torch.vtensor<[2,?],f32> {anyshape.dims = [{axis = 1 : i64, divisor = 1 : i64, expr = "s0", max = 512 : i64, min = 16 : i64}]}
// CHECK-SAME: %[[Y:[^:]*]]: !torch.vtensor<[2,?],f32> {anyshape.dims = [{axis = 1 : i64, divisor = 2 : i64, expr = "2*s0", max = 1024 : i64, min = 32 : i64}]}
// CHECK-SAME: %[[Z:[^:]*]]: !torch.vtensor<[?,2],f32> {anyshape.dims = [{axis = 0 : i64, divisor = 1 : i64, expr = "s0", max = 512 : i64, min = 16 : i64}], test.kept = 1 : i64}
// CHECK-NOT: torch.symbolic_int
// CHECK-NOT: torch.bind_symbolic_shape
// CHECK: %[[T:.*]] = torch.aten.tanh %[[X]]
// CHECK-NOT: torch.bind_symbolic_shape
// CHECK: return %[[T]]
func.func @symbolic_shapes(%arg0: !torch.vtensor<[2,?],f32>, %arg1: !torch.vtensor<[2,?],f32>,
                           %arg2: !torch.vtensor<[?,2],f32> {test.kept = 1 : i64}) -> !torch.vtensor<[2,?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 16, max_val = 512} : !torch.int
  %1 = torch.symbolic_int "2*s0" {min_val = 32, max_val = 1024} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (2, s0)> : !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (2, s0 * 2)> : !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %arg2, [%0], affine_map<()[s0] -> (s0, 2)> : !torch.vtensor<[?,2],f32>
  %2 = torch.aten.tanh %arg0 : !torch.vtensor<[2,?],f32> -> !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %2, [%0], affine_map<()[s0] -> (2, s0)> : !torch.vtensor<[2,?],f32>
  return %2 : !torch.vtensor<[2,?],f32>
}

// -----

/// torch states "no upper bound" as a huge max_val: the fact has no max, nor
/// has a dim derived from it. A min_val of 0 becomes 1 (a size is positive),
/// then a multiple of the divisor. An expression over two symbols is written
/// with its symbols sorted, so `s1 * 4 + s0 * 8` and `s0 * 8 + s1 * 4` compare equal.
// CHECK-LABEL: func.func @unbounded
// CHECK-SAME: {anyshape.dims = [{axis = 0 : i64, divisor = 1 : i64, expr = "s0", min = 1 : i64}, {axis = 1 : i64, divisor = 4 : i64, expr = "8*s0 + 4*s1", min = 4 : i64}]}
// CHECK-NOT: torch.symbolic_int
func.func @unbounded(%arg0: !torch.vtensor<[?,?],f32>) -> !torch.vtensor<[?,?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 0, max_val = 9223372036854775806} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 0, max_val = 1024} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1 * 4 + s0 * 8)> : !torch.vtensor<[?,?],f32>
  return %arg0 : !torch.vtensor<[?,?],f32>
}

// -----

/// Derived dims from floor division and a constant offset: the range goes
/// through each operation.
// CHECK-LABEL: func.func @derived_ranges
// CHECK-SAME: {anyshape.dims = [{axis = 0 : i64, divisor = 1 : i64, expr = "(s0 floordiv 2) + 1", max = 33 : i64, min = 5 : i64}]}
func.func @derived_ranges(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 8, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0 floordiv 2 + 1)> : !torch.vtensor<[?],f32>
  return %arg0 : !torch.vtensor<[?],f32>
}

// -----

/// No bindings: nothing to record, the function is unchanged.
// CHECK-LABEL: func.func @negative_no_bindings
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
// CHECK-NOT: anyshape.dims
// CHECK: %[[T:.*]] = torch.aten.tanh %[[X]]
// CHECK: return %[[T]]
func.func @negative_no_bindings(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?],f32>
  return %0 : !torch.vtensor<[?],f32>
}
