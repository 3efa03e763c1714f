// RUN: anyshape-opt %s | anyshape-opt | FileCheck %s

/// Torch-dialect IR as the FX importer emits it (symbolic dims, literals,
/// bindings) must survive print -> parse -> print unchanged.

// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[IDS:.*]]: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?,?,8],f32>
// CHECK: %[[S0:.*]] = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
// CHECK: %[[S1:.*]] = torch.symbolic_int "s1" {min_val = 1, max_val = 512} : !torch.int
// CHECK: torch.bind_symbolic_shape %[[IDS]], [%[[S0]], %[[S1]]], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
// CHECK: %[[W:.*]] = torch.vtensor.literal(dense<{{.*}}> : tensor<16x8xf32>) : !torch.vtensor<[16,8],f32>
// CHECK: %[[E:.*]] = torch.aten.embedding %[[W]], %[[IDS]], %{{.*}}, %{{.*}}, %{{.*}} : !torch.vtensor<[16,8],f32>, !torch.vtensor<[?,?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[?,?,8],f32>
// CHECK: torch.bind_symbolic_shape %[[E]], [%[[S0]], %[[S1]]], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
// CHECK: return %[[E]] : !torch.vtensor<[?,?,8],f32>
func.func @main(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?,?,8],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "s1" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %2 = torch.vtensor.literal(dense<0.5> : tensor<16x8xf32>) : !torch.vtensor<[16,8],f32>
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %3 = torch.aten.embedding %2, %arg0, %int-1, %false, %false : !torch.vtensor<[16,8],f32>, !torch.vtensor<[?,?],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %3, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  return %3 : !torch.vtensor<[?,?,8],f32>
}
