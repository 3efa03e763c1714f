// RUN: anyshape-opt %s --split-input-file --anyshape-canonicalize-shapes | FileCheck %s

/// Every anyshape pass folds through the greedy driver, and torch-mlir's folder
/// of a comparison with a scalar reads the tensor literal as the scalar's number
/// kind (passes/torch_ir/mixed_comparisons.py). These cases run through
/// canonicalize-shapes, the first pass of the pipeline; the rewrite itself sits
/// in pass_api.apply_patterns, under every pass.

/// BLOOM's ALiBi sign test, `base < 0` with base = 0.25: false. torch-mlir read
/// 0.25 as an integer and folded it to true in most processes (issue 36).
// CHECK-LABEL: func.func @float_literal_below_int_zero
// CHECK: %[[FALSE:.*]] = torch.vtensor.literal(dense<false> : tensor<i1>)
// CHECK: return %[[FALSE]]
func.func @float_literal_below_int_zero() -> !torch.vtensor<[],i1> {
  %base = torch.vtensor.literal(dense<2.500000e-01> : tensor<f32>) : !torch.vtensor<[],f32>
  %int0 = torch.constant.int 0
  %0 = torch.aten.lt.Scalar %base, %int0 : !torch.vtensor<[],f32>, !torch.int -> !torch.vtensor<[],i1>
  return %0 : !torch.vtensor<[],i1>
}

// -----

/// Not a splat: each element is compared as a float.
// CHECK-LABEL: func.func @float_elements_against_int
// CHECK: %[[R:.*]] = torch.vtensor.literal(dense<[false, true, true]> : tensor<3xi1>)
// CHECK: return %[[R]]
func.func @float_elements_against_int() -> !torch.vtensor<[3],i1> {
  %x = torch.vtensor.literal(dense<[2.5, -3.0, -0.5]> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %int0 = torch.constant.int 0
  %0 = torch.aten.le.Scalar %x, %int0 : !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],i1>
  return %0 : !torch.vtensor<[3],i1>
}

// -----

/// An integer literal against a float scalar crashed the compiler; PyTorch
/// compares it in float32: 1 < 1.5.
// CHECK-LABEL: func.func @int_literal_below_float
// CHECK: %[[TRUE:.*]] = torch.vtensor.literal(dense<true> : tensor<i1>)
// CHECK: return %[[TRUE]]
func.func @int_literal_below_float() -> !torch.vtensor<[],i1> {
  %one = torch.vtensor.literal(dense<1> : tensor<si64>) : !torch.vtensor<[],si64>
  %float = torch.constant.float 1.500000e+00
  %0 = torch.aten.lt.Scalar %one, %float : !torch.vtensor<[],si64>, !torch.float -> !torch.vtensor<[],i1>
  return %0 : !torch.vtensor<[],i1>
}

// -----

/// A tensor that is not a literal still gets a float scalar, since a later fold
/// may make it one. A constant int becomes the float the lowering would convert
/// it to: 2^24 + 1 rounds to 2^24 in float32, once.
// CHECK-LABEL: func.func @int_scalar_rounded_to_the_tensor_precision
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?],f32>, %[[N:.*]]: !torch.int)
// CHECK-DAG: %[[BIG:.*]] = torch.constant.float 0x4170000000000000
// CHECK-DAG: %[[NF:.*]] = torch.aten.Float.Scalar %[[N]] : !torch.int -> !torch.float
// CHECK-DAG: torch.aten.gt.Scalar %[[X]], %[[BIG]] : !torch.vtensor<[?],f32>, !torch.float
// CHECK-DAG: torch.aten.ge.Scalar %[[X]], %[[NF]] : !torch.vtensor<[?],f32>, !torch.float
func.func @int_scalar_rounded_to_the_tensor_precision(%arg0: !torch.vtensor<[?],f32>, %arg1: !torch.int) -> (!torch.vtensor<[?],i1>, !torch.vtensor<[?],i1>) {
  %big = torch.constant.int 16777217
  %0 = torch.aten.gt.Scalar %arg0, %big : !torch.vtensor<[?],f32>, !torch.int -> !torch.vtensor<[?],i1>
  %1 = torch.aten.ge.Scalar %arg0, %arg1 : !torch.vtensor<[?],f32>, !torch.int -> !torch.vtensor<[?],i1>
  return %0, %1 : !torch.vtensor<[?],i1>, !torch.vtensor<[?],i1>
}

// -----

/// Same kinds on both sides are left alone.
// CHECK-LABEL: func.func @negative_same_kinds
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?],si64>, %[[Y:.*]]: !torch.vtensor<[?],f32>)
// CHECK-DAG: %[[INT:.*]] = torch.constant.int 3
// CHECK-DAG: %[[FLOAT:.*]] = torch.constant.float 5.000000e-01
// CHECK-DAG: torch.aten.eq.Scalar %[[X]], %[[INT]] : !torch.vtensor<[?],si64>, !torch.int
// CHECK-DAG: torch.aten.ne.Scalar %[[Y]], %[[FLOAT]] : !torch.vtensor<[?],f32>, !torch.float
// CHECK-NOT: torch.aten.to.dtype
// CHECK-NOT: torch.aten.Float.Scalar
func.func @negative_same_kinds(%arg0: !torch.vtensor<[?],si64>, %arg1: !torch.vtensor<[?],f32>) -> (!torch.vtensor<[?],i1>, !torch.vtensor<[?],i1>) {
  %int3 = torch.constant.int 3
  %float = torch.constant.float 5.000000e-01
  %0 = torch.aten.eq.Scalar %arg0, %int3 : !torch.vtensor<[?],si64>, !torch.int -> !torch.vtensor<[?],i1>
  %1 = torch.aten.ne.Scalar %arg1, %float : !torch.vtensor<[?],f32>, !torch.float -> !torch.vtensor<[?],i1>
  return %0, %1 : !torch.vtensor<[?],i1>, !torch.vtensor<[?],i1>
}
