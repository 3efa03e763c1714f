// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

/// [Pattern: arange_to_iota]
/// arange(0, size(x, d), 1) over integers is the dynamic iota of x along d.

// CHECK-LABEL: func.func @arange_start_step
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?,8],f32>)
// CHECK: %[[IOTA:.*]] = "anyshape.iota_like"(%[[X]]) {dim = 1 : i64} : (!torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64>
// CHECK-NOT: torch.aten.arange
// CHECK: return %[[IOTA]]
func.func @arange_start_step(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %cpu = torch.constant.device "cpu"
  %false = torch.constant.bool false
  %0 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start_step %int0, %0, %int1, %none, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.none, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// -----

/// arange(end) with an explicit int64 dtype and a negative dim.
// CHECK-LABEL: func.func @arange_end_negative_dim
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,?],si64>)
// CHECK: %[[IOTA:.*]] = "anyshape.iota_like"(%[[X]]) {dim = 1 : i64}
// CHECK: return %[[IOTA]]
func.func @arange_end_negative_dim(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?],si64> {
  %int-1 = torch.constant.int -1
  %int4 = torch.constant.int 4
  %none = torch.constant.none
  %0 = torch.aten.size.int %arg0, %int-1 : !torch.vtensor<[?,?],si64>, !torch.int -> !torch.int
  %1 = torch.aten.arange %0, %int4, %none, %none, %none : !torch.int, !torch.int, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// -----

/// [Pattern: root_size_query, arange_to_iota]
/// A static dim folds the size query to a constant: a static arange is left
/// to torch-mlir, which lowers it with a static shape.
// CHECK-LABEL: func.func @static_dim_folds_to_constant
// CHECK-DAG: %[[EIGHT:.*]] = torch.constant.int 8
// CHECK-NOT: torch.aten.size.int
// CHECK: torch.aten.arange.start %{{.*}}, %[[EIGHT]]
// CHECK-NOT: anyshape.iota_like
func.func @static_dim_folds_to_constant(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?],si64> {
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %none = torch.constant.none
  %0 = torch.aten.size.int %arg0, %int2 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start %int0, %0, %none, %none, %none, %none : !torch.int, !torch.int, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// -----

/// [Pattern: arange_to_iota]
/// A non-zero start is not an iota: the arange stays.
// CHECK-LABEL: func.func @negative_nonzero_start
// CHECK: torch.aten.arange.start_step
// CHECK-NOT: anyshape.iota_like
func.func @negative_nonzero_start(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],si64> {
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %none = torch.constant.none
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start_step %int1, %0, %int1, %none, %none, %none, %none : !torch.int, !torch.int, !torch.int, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// -----

/// Step 2 skips elements: the arange stays.
// CHECK-LABEL: func.func @negative_step_two
// CHECK: torch.aten.arange.start_step
// CHECK-NOT: anyshape.iota_like
func.func @negative_step_two(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],si64> {
  %int2 = torch.constant.int 2
  %int0 = torch.constant.int 0
  %none = torch.constant.none
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start_step %int0, %0, %int2, %none, %none, %none, %none : !torch.int, !torch.int, !torch.int, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// -----

/// A float arange (dtype 6 = float32) is not an integer iota.
// CHECK-LABEL: func.func @negative_float_dtype
// CHECK: torch.aten.arange
// CHECK-NOT: anyshape.iota_like
func.func @negative_float_dtype(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %none = torch.constant.none
  %0 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.arange %0, %int6, %none, %none, %none : !torch.int, !torch.int, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?],f32>
  return %1 : !torch.vtensor<[?],f32>
}

// -----

/// An end that is not a size query (a function argument) keeps the arange.
// CHECK-LABEL: func.func @negative_end_not_a_size
// CHECK: torch.aten.arange
// CHECK-NOT: anyshape.iota_like
func.func @negative_end_not_a_size(%arg0: !torch.int) -> !torch.vtensor<[?],si64> {
  %none = torch.constant.none
  %0 = torch.aten.arange %arg0, %none, %none, %none, %none : !torch.int, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?],si64>
  return %0 : !torch.vtensor<[?],si64>
}
