// RUN: anyshape-opt %s --split-input-file --anyshape-data-tiling-forms="kernel-products=true" | FileCheck %s

/// [Pattern: few_rows_projection, kernel_products]
/// anyshape's product kernel computes float32 products with a constant weight
/// at any row count (iree/kernels/linear_rows.py): projections of a few rows stay
/// products for it, the weight joined from constants (the fused Q, K and V
/// projection's cat) as well as a literal.
// CHECK-LABEL: func.func @few_rows_constant_weights
// CHECK-SAME: (%[[X:.*]]: !torch.vtensor<[?,8],f32>)
// CHECK: %[[LIN:.*]] = torch.aten.linear %[[X]], %{{.*}}, %{{.*}} : !torch.vtensor<[?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,4],f32>
// CHECK: %[[FUSED:.*]] = torch.aten.linear %[[X]], %{{.*}}, %{{.*}} : !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,8],f32>, !torch.none -> !torch.vtensor<[?,8],f32>
// CHECK: %[[ADDMM:.*]] = torch.aten.addmm %{{.*}}, %[[X]], %{{.*}}, %{{.*}}, %{{.*}}
// CHECK-NOT: torch.aten.sum.dim_IntList
// CHECK: return %[[LIN]], %[[FUSED]], %[[ADDMM]]
func.func @few_rows_constant_weights(%arg0: !torch.vtensor<[?,8],f32>) -> (!torch.vtensor<[?,4],f32>, !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,4],f32>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %w = torch.vtensor.literal(dense<1.0> : tensor<4x8xf32>) : !torch.vtensor<[4,8],f32>
  %wt = torch.vtensor.literal(dense<2.0> : tensor<8x4xf32>) : !torch.vtensor<[8,4],f32>
  %b = torch.vtensor.literal(dense<3.0> : tensor<4xf32>) : !torch.vtensor<[4],f32>
  %parts = torch.prim.ListConstruct %w, %w : (!torch.vtensor<[4,8],f32>, !torch.vtensor<[4,8],f32>) -> !torch.list<vtensor>
  %joined = torch.aten.cat %parts, %int0 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[8,8],f32>
  %lin = torch.aten.linear %arg0, %w, %b : !torch.vtensor<[?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[?,4],f32>
  %fused = torch.aten.linear %arg0, %joined, %none : !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,8],f32>, !torch.none -> !torch.vtensor<[?,8],f32>
  %addmm = torch.aten.addmm %b, %arg0, %wt, %int1, %int1 : !torch.vtensor<[4],f32>, !torch.vtensor<[?,8],f32>, !torch.vtensor<[8,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,4],f32>
  return %lin, %fused, %addmm : !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,8],f32>, !torch.vtensor<[?,4],f32>
}

// -----

/// The kernel takes neither a weight the function is given (it is not packed
/// once, at load) nor float16 rows: those still become a broadcast multiply
/// and a sum, which IREE leaves untiled.
// CHECK-LABEL: func.func @negative_weight_input_or_half_rows
// CHECK-NOT: torch.aten.linear
// CHECK: torch.aten.sum.dim_IntList {{.*}} -> !torch.vtensor<[?,4],f32>
// CHECK: torch.aten.sum.dim_IntList {{.*}} -> !torch.vtensor<[?,4],f16>
// CHECK-NOT: torch.aten.linear
func.func @negative_weight_input_or_half_rows(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[4,8],f32>, %arg2: !torch.vtensor<[?,8],f16>) -> (!torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f16>) {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  torch.bind_symbolic_shape %arg2, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f16>
  %none = torch.constant.none
  %wh = torch.vtensor.literal(dense<1.0> : tensor<4x8xf16>) : !torch.vtensor<[4,8],f16>
  %given = torch.aten.linear %arg0, %arg1, %none : !torch.vtensor<[?,8],f32>, !torch.vtensor<[4,8],f32>, !torch.none -> !torch.vtensor<[?,4],f32>
  %half = torch.aten.linear %arg2, %wh, %none : !torch.vtensor<[?,8],f16>, !torch.vtensor<[4,8],f16>, !torch.none -> !torch.vtensor<[?,4],f16>
  return %given, %half : !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f16>
}
