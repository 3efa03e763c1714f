// RUN: anyshape-opt %s --split-input-file --anyshape-lower | FileCheck %s
// RUN: anyshape-opt %s --split-input-file --anyshape-lower=keep-argument-bindings=false \
// RUN:   | FileCheck %s --check-prefix=STRIP

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
// STRIP-LABEL: func.func @iota_like
// STRIP-NOT: anyshape.iota_like
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

/// Argument bindings carry the range facts IREE uses: kept by default, erased
/// for torch-mlir's linalg pipeline. Bindings on other values always go.
// CHECK-LABEL: func.func @symbolic_shapes
// CHECK: %[[S0:.*]] = torch.symbolic_int "s0" {min_val = 1, max_val = 512}
// CHECK: torch.bind_symbolic_shape %arg0, [%[[S0]]]
// CHECK-NOT: torch.bind_symbolic_shape
// CHECK: return
// STRIP-LABEL: func.func @symbolic_shapes
// STRIP-NOT: torch.symbolic_int
// STRIP-NOT: torch.bind_symbolic_shape
// STRIP: return
func.func @symbolic_shapes(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {
  %0 = torch.symbolic_int "s0" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %1 = torch.aten.tanh %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?],f32>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  return %1 : !torch.vtensor<[?],f32>
}
